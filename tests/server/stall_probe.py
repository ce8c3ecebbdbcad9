#!/usr/bin/env python3
"""Holds N stalled connections open against a running gem serve (or any server) and measures
/health and chat latency meanwhile: the figure recorded in bench/results/server.md.

  stall_probe.py PORT [N=256] [SAMPLES=20]

A third of the connections are silent, a third sent half a request line, a third sent headers
and part of a body. Every probe has a 10 s timeout; a probe that times out counts as 10 s.
"""
import json
import socket
import statistics
import sys
import time

port = int(sys.argv[1])
n = int(sys.argv[2]) if len(sys.argv) > 2 else 256
samples = int(sys.argv[3]) if len(sys.argv) > 3 else 20
TIMEOUT = 10.0

body = json.dumps({"messages": [{"role": "user", "content": "Say hello"}], "max_tokens": 8})
post = ("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n{body}")


def request(raw: bytes) -> float:
    t0 = time.monotonic()
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        s.settimeout(TIMEOUT)
        s.sendall(raw)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        s.close()
        if not data.startswith(b"HTTP/1.1 200"):
            return TIMEOUT
    except OSError:
        return TIMEOUT
    return time.monotonic() - t0


held = []
for i in range(n):
    s = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    if i % 3 == 1:
        s.sendall(b"GET /health HTTP/1.1\r\nHo")
    elif i % 3 == 2:
        s.sendall(post.encode()[: len(post) - 20])
    held.append(s)

health = [request(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n") for _ in range(samples)]
chat = [request(post.encode()) for _ in range(max(3, samples // 4))]
alive = 0
for s in held:
    s.setblocking(False)
    try:
        alive += 0 if s.recv(1, socket.MSG_PEEK) == b"" else 1
    except BlockingIOError:
        alive += 1
    except OSError:
        pass
    s.close()


def fmt(xs):
    xs = sorted(xs)
    return (f"median {statistics.median(xs) * 1e3:.1f} ms, p90 {xs[int(len(xs) * 0.9) - 1] * 1e3:.1f} ms, "
            f"max {xs[-1] * 1e3:.1f} ms ({sum(1 for x in xs if x >= TIMEOUT)} of {len(xs)} timed out)")


print(f"{n} stalled connections opened, {alive} still open at the end")
print(f"/health: {fmt(health)}")
print(f"chat (non-streamed, 8 tokens, time to response headers): {fmt(chat)}")
