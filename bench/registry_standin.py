#!/usr/bin/env python3
"""Issue 14, bench/registry_route.sh: the smallest Docker registry (API v2) that `docker push`
and `docker pull` accept, blobs and manifests kept in a folder. A stand-in to measure what
the registry route would cost, not a registry: no auth, no checks, 127.0.0.1 only.

    registry_standin.py PORT FOLDER
"""
import hashlib, os, sys, uuid, re
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROOT = sys.argv[2]
os.makedirs(ROOT + "/blobs", exist_ok=True)
os.makedirs(ROOT + "/up", exist_ok=True)
os.makedirs(ROOT + "/manifests", exist_ok=True)

class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def reply(self, code, headers=None, body=b""):
        self.send_response(code)
        self.send_header("Docker-Distribution-API-Version", "registry/2.0")
        for k, v in (headers or {}).items(): self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body and self.command != "HEAD": self.wfile.write(body)
    def body_to(self, f):
        n = 0
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""): pass
                    break
                left = size
                while left:
                    b = self.rfile.read(min(left, 1 << 20)); f.write(b); left -= len(b); n += len(b)
                self.rfile.readline()
        else:
            left = int(self.headers.get("Content-Length", "0"))
            while left:
                b = self.rfile.read(min(left, 1 << 20)); f.write(b); left -= len(b); n += len(b)
        return n
    def do_GET(self): self.get(True)
    def do_HEAD(self): self.get(False)
    def get(self, body):
        p = self.path.split("?")[0]
        if p in ("/v2/", "/v2"): return self.reply(200, {"Content-Type": "application/json"}, b"{}")
        m = re.match(r"^/v2/(.+)/blobs/(sha256:[0-9a-f]{64})$", p)
        if m:
            f = ROOT + "/blobs/" + m.group(2)
            if not os.path.exists(f): return self.reply(404)
            size = os.path.getsize(f)
            self.send_response(200)
            self.send_header("Docker-Content-Digest", m.group(2))
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(size)); self.end_headers()
            if body:
                with open(f, "rb") as fh:
                    while True:
                        b = fh.read(1 << 20)
                        if not b: break
                        self.wfile.write(b)
            return
        m = re.match(r"^/v2/(.+)/manifests/(.+)$", p)
        if m:
            ref = m.group(2)
            f = ROOT + "/manifests/" + (ref if ref.startswith("sha256:") else m.group(1).replace("/", "_") + ":" + ref)
            if not os.path.exists(f): return self.reply(404)
            data = open(f, "rb").read()
            return self.reply(200, {"Content-Type": open(f + ".type").read(), "Docker-Content-Digest": "sha256:" + hashlib.sha256(data).hexdigest()}, data)
        self.reply(404)
    def do_POST(self):
        m = re.match(r"^/v2/(.+)/blobs/uploads/?$", self.path.split("?")[0])
        if not m: return self.reply(404)
        u = str(uuid.uuid4())
        with open(ROOT + "/up/" + u, "wb") as f: self.body_to(f)
        self.reply(202, {"Location": "/v2/%s/blobs/uploads/%s" % (m.group(1), u), "Range": "0-0", "Docker-Upload-UUID": u})
    def do_PATCH(self):
        m = re.match(r"^/v2/(.+)/blobs/uploads/([0-9a-f-]+)$", self.path.split("?")[0])
        if not m: return self.reply(404)
        f = ROOT + "/up/" + m.group(2)
        with open(f, "ab") as fh: self.body_to(fh)
        size = os.path.getsize(f)
        self.reply(202, {"Location": "/v2/%s/blobs/uploads/%s" % (m.group(1), m.group(2)), "Range": "0-%d" % max(size - 1, 0), "Docker-Upload-UUID": m.group(2)})
    def do_PUT(self):
        path, _, q = self.path.partition("?")
        m = re.match(r"^/v2/(.+)/blobs/uploads/([0-9a-f-]+)$", path)
        if m:
            f = ROOT + "/up/" + m.group(2)
            with open(f, "ab") as fh: self.body_to(fh)
            d = re.search(r"digest=(sha256(?:%3A|:)[0-9a-f]{64})", q).group(1).replace("%3A", ":")
            os.rename(f, ROOT + "/blobs/" + d)
            return self.reply(201, {"Location": "/v2/%s/blobs/%s" % (m.group(1), d), "Docker-Content-Digest": d})
        m = re.match(r"^/v2/(.+)/manifests/(.+)$", path)
        if m:
            import io
            buf = io.BytesIO(); self.body_to(buf); data = buf.getvalue()
            d = "sha256:" + hashlib.sha256(data).hexdigest()
            for name in (d, m.group(1).replace("/", "_") + ":" + m.group(2)):
                open(ROOT + "/manifests/" + name, "wb").write(data)
                open(ROOT + "/manifests/" + name + ".type", "w").write(self.headers.get("Content-Type", "application/vnd.docker.distribution.manifest.v2+json"))
            return self.reply(201, {"Location": "/v2/%s/manifests/%s" % (m.group(1), d), "Docker-Content-Digest": d})
        self.reply(404)

ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
