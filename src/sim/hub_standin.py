#!/usr/bin/python3
"""The stand-in Hugging Face Hub of a simulated cluster (`spark-launch sim up`).

No Hub is reachable from the simulated nodes, so the sim serves, on its own management
network, the small part of the Hub API that spark-launch uses to resolve and stage a model,
in the shapes huggingface.co answers with:

- GET /api/models/ORG/NAME/revision/REV?blobs=true: `sha` (the commit), `gated: false`,
  `siblings` with `rfilename`, `size` and `blobId` (the git blob sha1 of each file); an
  unknown repo answers 401 with `X-Error-Code: RepoNotFound`, an unknown revision 404 with
  `RevisionNotFound`, as the Hub does for anonymous requests.
- GET|HEAD /ORG/NAME/resolve/COMMIT/PATH (COMMIT or `main`): the file, with `ETag`; with
  `Range: bytes=A-B` the part asked for (206, `Content-Range`).

    hub_standin.py ADDRESS PORT FOLDER

FOLDER holds one folder per repo, FOLDER/ORG/NAME/, with the repo's files (`main` is the only
revision; the commit is the sha1 of the files' names and blob ids). Everything is read once at
the start, then the process drops to the user `nobody` and serves from memory. One line per
request on stdout.
"""
import hashlib
import json
import os
import pwd
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def git_blob(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def load(root):
    repos = {}
    for org in sorted(os.listdir(root)):
        for name in sorted(os.listdir(os.path.join(root, org))):
            base = os.path.join(root, org, name)
            files = {}
            for dirpath, _, names in os.walk(base):
                for n in names:
                    full = os.path.join(dirpath, n)
                    with open(full, "rb") as f:
                        files[os.path.relpath(full, base)] = f.read()
            listing = "".join("%s %s\n" % (p, git_blob(d)) for p, d in sorted(files.items()))
            commit = hashlib.sha1(listing.encode()).hexdigest()
            repos["%s/%s" % (org, name)] = {"commit": commit, "files": files}
    return repos


class Hub(BaseHTTPRequestHandler):
    repos = {}

    def log_message(self, fmt, *args):
        print("%s %s" % (self.address_string(), fmt % args), flush=True)

    def answer(self, status, body=b"", headers=(), head=False):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def error(self, status, code, head=False):
        self.answer(status, json.dumps({"error": code}).encode(),
                    [("X-Error-Code", code), ("Content-Type", "application/json")], head)

    def do_HEAD(self):
        self.serve(head=True)

    def do_GET(self):
        self.serve(head=False)

    def serve(self, head):
        path = self.path.split("?", 1)[0]
        if path.startswith("/api/models/"):
            rest = path[len("/api/models/"):]
            repo_id, _, rev = rest.partition("/revision/")
            repo = self.repos.get(repo_id)
            if repo is None:
                return self.error(401, "RepoNotFound", head)
            if rev not in ("main", repo["commit"]):
                return self.error(404, "RevisionNotFound", head)
            siblings = [{"rfilename": p, "size": len(d), "blobId": git_blob(d)}
                        for p, d in sorted(repo["files"].items())]
            body = json.dumps({"id": repo_id, "sha": repo["commit"], "gated": False,
                               "private": False, "siblings": siblings}).encode()
            return self.answer(200, body, [("Content-Type", "application/json")], head)
        repo_id, sep, rest = path.lstrip("/").partition("/resolve/")
        repo = self.repos.get(repo_id) if sep else None
        if repo is None:
            return self.error(404, "RepoNotFound", head)
        rev, _, file_path = rest.partition("/")
        if rev not in ("main", repo["commit"]):
            return self.error(404, "RevisionNotFound", head)
        data = repo["files"].get(file_path)
        if data is None:
            return self.error(404, "EntryNotFound", head)
        headers = [("ETag", '"%s"' % git_blob(data)), ("X-Repo-Commit", repo["commit"])]
        ranged = self.headers.get("Range", "")
        if ranged.startswith("bytes="):
            first, _, last = ranged[len("bytes="):].partition("-")
            try:
                a = int(first or 0)
                b = min(int(last) if last else len(data) - 1, len(data) - 1)
            except ValueError:
                return self.error(416, "RangeNotSatisfiable", head)
            if a > b:
                return self.error(416, "RangeNotSatisfiable", head)
            headers.append(("Content-Range", "bytes %d-%d/%d" % (a, b, len(data))))
            return self.answer(206, data[a:b + 1], headers, head)
        return self.answer(200, data, headers, head)


def main():
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    address, port, root = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    Hub.repos = load(root)
    server = ThreadingHTTPServer((address, port), Hub)
    if os.getuid() == 0:
        nobody = pwd.getpwnam("nobody")
        os.setgroups([])
        os.setgid(nobody.pw_gid)
        os.setuid(nobody.pw_uid)
    print("serving %s on http://%s:%d" % (", ".join(sorted(Hub.repos)), address, port), flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
