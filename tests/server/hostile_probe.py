#!/usr/bin/env python3
"""Issue 26's hostile-client cases against a `gem serve` binary, one line each: PASS or FAIL.
Run against the code before the fix (e.g. a build of 90eff72) every case FAILS; against the
current build every case PASSES (ctest runs it so: server_hostile_probe).

  hostile_probe.py GEM MODEL.gguf [--expect-fail]

With --expect-fail the exit status is 0 when every case failed (a check of the old binary)."""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time

gem, model = sys.argv[1], sys.argv[2]
expect_fail = "--expect-fail" in sys.argv
tmp = tempfile.mkdtemp()
script = os.path.join(tmp, "script.json")
with open(script, "w") as f:
    json.dump({"token_delay_ms": 20, "entries": [
        {"match": "Say hello", "output": "Hello there, friend!<turn|>"}]}, f)
procs = []


def start(*extra, key=None):
    env = dict(os.environ)
    if key:
        env["GEM_API_KEY"] = key
    log = open(os.path.join(tmp, f"serve{len(procs)}.log"), "w+")
    p = subprocess.Popen([gem, "serve", "-m", model, "--backend", "scripted:" + script, "-c", "1024",
                          "--port", "0", *extra], stderr=log, env=env)
    procs.append(p)
    for _ in range(300):
        log.seek(0)
        text = log.read()
        m = re.search(r"listening on http://127.0.0.1:(\d+)", text)
        if m and "ready in" in text:
            return p, int(m.group(1)), log
        if p.poll() is not None:
            break
        time.sleep(0.1)
    raise SystemExit(f"{gem}: did not start")


def exchange(port, raw, timeout=5.0, until_close=False):
    """Sends raw bytes; returns what came back within timeout (b'' on refusal/timeout)."""
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        s.settimeout(timeout)
        s.sendall(raw)
        data = b""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            if not chunk:
                break
            data += chunk
            if not until_close and b"\r\n\r\n" in data:
                head, _, rest = data.partition(b"\r\n\r\n")
                m = re.search(rb"(?i)content-length: (\d+)", head)
                if m and len(rest) >= int(m.group(1)):
                    break
        s.close()
        return data
    except OSError:
        return b""


def post(body, extra=b"", ctype=b"application/json", version=b"1.1"):
    if isinstance(body, str):
        body = body.encode()
    return (b"POST /v1/chat/completions HTTP/" + version + b"\r\nHost: 127.0.0.1\r\nContent-Type: " +
            ctype + b"\r\n" + extra + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


def status(data):
    m = re.match(rb"HTTP/1\.\d (\d+)", data)
    return int(m.group(1)) if m else 0


results = []


def check(name, ok, detail=""):
    results.append(ok)
    print(f"{'PASS' if ok else 'FAIL'}: {name}{' (' + detail + ')' if detail else ''}", flush=True)


hello = json.dumps({"messages": [{"role": "user", "content": "Say hello"}], "max_tokens": 4})
p, port, log = start()

# 1. Nesting: 100,000 deep in tool_calls arguments.
deep = '{"a":' * 100000 + "1" + "}" * 100000
body = json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None,
                   "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": deep}}]},
                   {"role": "tool", "tool_call_id": "c", "content": "x"}]})
r = exchange(port, post(body), timeout=20)
alive = status(exchange(port, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")) == 200
check("deep nesting -> 400 naming the limit, server alive", status(r) == 400 and b"limit of" in r and alive,
      f"status {status(r)}, alive {alive}")
if not alive:
    p, port, log = start()

# 2. 40 slow senders, then /health within a second.
slow = []
for i in range(40):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{" if i % 2
              else b"GET /health HTTP/1.1\r\nX-Slow: ")
    slow.append(s)
time.sleep(0.5)
t0 = time.monotonic()
r = exchange(port, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", timeout=3)
dt = time.monotonic() - t0
check("40 stalled connections: /health within 1 s", status(r) == 200 and dt < 1.0, f"{dt * 1e3:.0f} ms, status {status(r)}")
for s in slow:
    s.close()
time.sleep(0.5)

# 3. Content-Length: -5 answered at once.
t0 = time.monotonic()
r = exchange(port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: -5\r\n\r\n{}", timeout=3)
check("Content-Length -5 -> 400 at once", status(r) == 400, f"status {status(r)} after {time.monotonic() - t0:.1f} s")

# 4. Pipelining: three requests in one write, three answers in order.
r = exchange(port, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" + post(hello) +
             b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", timeout=10, until_close=True)
statuses = [int(x) for x in re.findall(rb"HTTP/1\.1 (\d+)", r)]
check("pipelined requests answered in order", statuses == [200, 200, 200] and r.find(b"chat.completion") < r.find(b'"list"'),
      f"statuses {statuses}")

# 5. HTTP/1.0 stream is not chunked.
r = exchange(port, post(json.dumps({"messages": [{"role": "user", "content": "Say hello"}], "stream": True}),
                        version=b"1.0"), timeout=10, until_close=True)
head = r.split(b"\r\n\r\n")[0].lower()
check("HTTP/1.0 stream not chunked", status(r) == 200 and b"chunked" not in head and b"[DONE]" in r,
      f"status {status(r)}, chunked {b'chunked' in head}")

# 6. Form-typed body over 8 KiB.
big = json.dumps({"messages": [{"role": "user", "content": "Say hello"}], "max_tokens": 4, "pad": "a" * 20000})
r = exchange(port, post(big, ctype=b"application/x-www-form-urlencoded"), timeout=10)
check("curl -d (form type) 20 KB body read as JSON", status(r) == 200, f"status {status(r)}")

# 7. Cross-site and rebinding.
r1 = exchange(port, post(hello, extra=b"Origin: http://evil.example\r\n", ctype=b"text/plain"))
r2 = exchange(port, b"GET /props HTTP/1.1\r\nHost: evil.example:%d\r\n\r\n" % port)
check("foreign Origin and non-loopback Host refused", status(r1) == 403 and status(r2) == 403,
      f"origin {status(r1)}, host {status(r2)}")

# 8. Port out of range, busy port.
far = subprocess.Popen([gem, "serve", "-m", model, "--backend", "scripted:" + script, "--port", "70000"],
                       stderr=subprocess.PIPE, text=True)
procs.append(far)
try:
    rc = far.wait(timeout=10)
    err = far.stderr.read()
except subprocess.TimeoutExpired:  # it started serving (on 70000 mod 65536)
    rc, err = None, ""
check("--port 70000 refused naming it", rc not in (None, 0) and "70000" in err, f"exit {rc}")
busy = subprocess.Popen([gem, "serve", "-m", model, "--backend", "scripted:" + script, "--port", str(port)],
                        stderr=subprocess.PIPE, text=True)
procs.append(busy)
try:
    rc = busy.wait(timeout=10)
    err = busy.stderr.read()
except subprocess.TimeoutExpired:
    rc, err = None, ""
check("busy port refused naming it", rc not in (None, 0) and str(port) in err, f"exit {rc}")

# 9. SIGTERM mid-stream: error event and [DONE]; exit status 3. The prompt matches no script
# entry, so the tokens are sampled from pseudo-random logits: ignore_eos keeps an end-of-turn
# token among them from ending the stream inside the grace period (it did, once in CI).
s = socket.create_connection(("127.0.0.1", port), timeout=30)
s.sendall(post(json.dumps({"messages": [{"role": "user", "content": "go"}], "stream": True, "max_tokens": 500,
                           "ignore_eos": True})))
time.sleep(1.0)
p.send_signal(signal.SIGTERM)
data = b""
s.settimeout(15)
try:
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
except OSError:
    pass
try:
    rc = p.wait(timeout=15)
except subprocess.TimeoutExpired:
    rc = None
check("SIGTERM mid-stream: error event, [DONE], exit 3", b'data: {"error"' in data and b"[DONE]" in data and rc == 3,
      f"error event {b'error' in data}, [DONE] {b'[DONE]' in data}, exit {rc}")

# 10. Key from the environment, lower-case scheme, failures logged with the client address.
p, port, log = start(key="probe-key-1")
ok = status(exchange(port, b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: bearer probe-key-1\r\n\r\n"))
bad = status(exchange(port, b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"))
time.sleep(0.3)
log.seek(0)
text = log.read()
logged = re.search(r"127\.0\.0\.1:\d+ GET /v1/models -> 401", text) is not None
check("GEM_API_KEY, 'bearer', 401 logged with address", ok == 200 and bad == 401 and logged and "probe-key-1" not in text,
      f"bearer {ok}, none {bad}, logged {logged}")

for q in procs:
    if q.poll() is None:
        q.kill()
n_pass = sum(results)
print(f"{n_pass} of {len(results)} cases pass")
if expect_fail:
    sys.exit(0 if n_pass == 0 else 1)
sys.exit(0 if n_pass == len(results) else 1)
