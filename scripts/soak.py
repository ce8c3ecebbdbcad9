#!/usr/bin/env python3
"""Soak test for `gem serve`: N requests (default 1000) from two concurrent clients, mixing
streamed, non-streamed, tool-call, disconnected and bad requests; reports the server's RSS before
and after (it must stay flat within 5 %) and fails on any unexpected answer.

    scripts/soak.py --gem build/bin/gem --model build/test-models/tiny-q4_0.gguf \
        [--backend scripted:tests/e2e/script.json | cpu] [--requests 1000] [--out FILE]

Standard library only. Writes a Markdown summary to --out (appends) when given.
"""
import argparse
import http.client
import json
import os
import random
import socket
import subprocess
import sys
import threading
import time

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def request(port, body, stream):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.request("POST", "/v1/chat/completions", body=body if isinstance(body, (bytes, str)) else json.dumps(body),
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read().decode("utf-8", "replace")
    conn.close()
    return resp.status, data


def hang_up(port, body, n_read):
    s = socket.create_connection(("127.0.0.1", port))
    raw = json.dumps(body).encode()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              + f"Content-Length: {len(raw)}\r\n\r\n".encode() + raw)
    got = 0
    while got < n_read:
        chunk = s.recv(min(4096, n_read - got))
        if not chunk:
            break
        got += len(chunk)
    s.close()


def check_stream(data):
    lines = [l for l in data.split("\n") if l and not l.startswith(":")]
    assert lines and lines[-1] == "data: [DONE]", "stream did not end with [DONE]"
    finish = None
    for l in lines[:-1]:
        chunk = json.loads(l[len("data: "):])
        for c in chunk.get("choices", []):
            finish = c.get("finish_reason") or finish
    assert finish in ("stop", "length", "tool_calls"), f"finish_reason {finish}"
    return finish


def one(port, rng, kind, counts, lock):
    user = rng.choice(["Say hello", "Count to ten", "What is the weather in Paris?", "Tell me something"])
    msgs = [{"role": "user", "content": user + " " + "x" * rng.randint(0, 200)}]
    if kind == "stream":
        st, data = request(port, {"stream": True, "stream_options": {"include_usage": True}, "messages": msgs,
                                  "max_tokens": rng.randint(1, 24)}, True)
        assert st == 200, f"stream: HTTP {st} {data[:200]}"
        check_stream(data)
    elif kind == "plain":
        st, data = request(port, {"messages": msgs, "max_tokens": rng.randint(1, 24), "seed": rng.randint(0, 99)}, False)
        assert st == 200, f"plain: HTTP {st} {data[:200]}"
        assert json.loads(data)["object"] == "chat.completion"
    elif kind == "tool":
        msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
        st, data = request(port, {"stream": rng.random() < 0.5, "messages": msgs, "tools": TOOLS, "max_tokens": 40}, False)
        assert st == 200, f"tool: HTTP {st} {data[:200]}"
    elif kind == "bad":
        body = rng.choice(['{', '{"messages":"x"}', '{"messages":[{"role":"user","content":5}]}',
                           '{"messages":[{"role":"user","content":"x"}],"temperature":"hot"}',
                           '{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}'])
        st, data = request(port, body, False)
        assert 400 <= st < 500, f"bad: HTTP {st}"
        assert "error" in json.loads(data)
    elif kind == "hangup":
        hang_up(port, {"stream": True, "messages": msgs, "max_tokens": 30}, rng.randint(0, 2000))
    with lock:
        counts[kind] = counts.get(kind, 0) + 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gem", default="build/bin/gem")
    ap.add_argument("--model", default="build/test-models/tiny-q4_0.gguf")
    ap.add_argument("--backend", default="scripted:tests/e2e/script.json")
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out")
    a = ap.parse_args()

    port_probe = socket.socket()
    port_probe.bind(("127.0.0.1", 0))
    port = port_probe.getsockname()[1]
    port_probe.close()
    server = subprocess.Popen([a.gem, "serve", "-m", a.model, "--backend", a.backend, "--port", str(port),
                               "-c", str(a.ctx), "-t", str(a.threads), "--queue", "4"],
                              stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                conn.request("GET", "/health")
                if conn.getresponse().status == 200:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        else:
            sys.exit("soak: server never became healthy")
        rng = random.Random(1)
        kinds = ["stream"] * 35 + ["plain"] * 25 + ["tool"] * 20 + ["bad"] * 12 + ["hangup"] * 8
        # Warm-up with the same mix and concurrency, so one-time allocations (per-thread malloc
        # arenas of the HTTP pool, the logits buffers, caches) are in the baseline RSS.
        def warm(seed):
            r = random.Random(seed)
            for _ in range(50):
                one(port, r, r.choice(kinds), {}, threading.Lock())
        warmers = [threading.Thread(target=warm, args=(s,)) for s in (3, 4)]
        for t in warmers:
            t.start()
        for t in warmers:
            t.join()
        rss_before = rss_kib(server.pid)
        counts, lock, errors = {}, threading.Lock(), []
        per_client = a.requests // 2
        t0 = time.time()

        def client(seed):
            r = random.Random(seed)
            for _ in range(per_client):
                try:
                    one(port, r, r.choice(kinds), counts, lock)
                except Exception as e:  # noqa: BLE001 - reported below
                    errors.append(repr(e))

        threads = [threading.Thread(target=client, args=(s,)) for s in (11, 22)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.time() - t0
        st, _ = request(port, {"messages": [{"role": "user", "content": "Say hello"}], "max_tokens": 2}, False)
        assert st == 200
        rss_after = rss_kib(server.pid)
        alive = server.poll() is None
    finally:
        server.terminate()
        server.wait(timeout=30)
    growth = (rss_after - rss_before) / rss_before * 100.0
    ok = alive and not errors and abs(growth) <= 5.0
    summary = (f"soak: {sum(counts.values())} requests in {elapsed:.1f} s from 2 clients "
               f"({', '.join(f'{k} {v}' for k, v in sorted(counts.items()))}); errors {len(errors)}; "
               f"RSS before {rss_before} KiB, after {rss_after} KiB ({growth:+.2f} %); "
               f"backend {a.backend}; {'PASS' if ok else 'FAIL'}")
    print(summary)
    for e in errors[:10]:
        print("  error:", e)
    if a.out:
        with open(a.out, "a") as f:
            f.write(f"- `{' '.join(sys.argv)}`: {summary}\n")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
