#!/usr/bin/env python3
"""Streams one completion from an OpenAI-style server and prints what it measured as JSON.

Used by llamacpp_proof.sh to show tokens arriving one by one and to time them, with nothing
but the standard library (the GPU machine has no network and few packages to rely on).

Usage: llamacpp_stream.py BASE_URL MODEL PROMPT MAX_TOKENS
prints {"ttft_s": ..., "tokens": N, "decode_tok_s": ..., "text": "...", "chunks": N}
"""

import http.client
import json
import sys
import time
import urllib.parse


def main():
    base, model, prompt, max_tokens = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    url = urllib.parse.urlparse(base)
    conn = http.client.HTTPConnection(url.hostname, url.port or 80, timeout=120)
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "stream": True,
        "ignore_eos": True,
        "temperature": 0.8,
    }
    start = time.monotonic()
    conn.request(
        "POST",
        url.path.rstrip("/") + "/completions",
        body=json.dumps(body),
        headers={"Content-Type": "application/json"},
    )
    resp = conn.getresponse()
    if resp.status != 200:
        print(json.dumps({"error": f"HTTP {resp.status}: {resp.read()[:300]!r}"}))
        sys.exit(1)
    first = None
    last = None
    chunks = 0
    text = []
    usage_tokens = None
    for raw in resp:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            break
        msg = json.loads(data)
        if msg.get("usage"):
            usage_tokens = msg["usage"].get("completion_tokens")
        for choice in msg.get("choices", []):
            piece = choice.get("text") or ""
            if piece:
                now = time.monotonic()
                if first is None:
                    first = now
                last = now
                chunks += 1
                text.append(piece)
    tokens = usage_tokens or chunks
    out = {
        "ttft_s": round(first - start, 4) if first else None,
        "tokens": tokens,
        "chunks": chunks,
        "decode_tok_s": round((tokens - 1) / (last - first), 1)
        if first and last and last > first and tokens > 1
        else None,
        "text": "".join(text)[:200],
    }
    print(json.dumps(out))
    sys.exit(0 if chunks > 1 else 1)


if __name__ == "__main__":
    main()
