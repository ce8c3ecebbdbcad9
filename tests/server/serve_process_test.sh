#!/usr/bin/env bash
# `gem serve` as a process (issue 26 cases 3, 4 and 7): a busy port and an out-of-range port are
# errors naming the port; SIGTERM mid-stream drains (exit 0) or, past --shutdown-timeout, ends
# the stream with an error event and [DONE] (exit 3); a second signal exits at once (143); the
# key comes from --api-key-file or GEM_API_KEY and the Bearer scheme is case-insensitive.
# Usage: serve_process_test.sh GEM MODEL.gguf
set -uo pipefail
gem=$1
model=$2
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; for f in "$tmp"/*.log; do echo "--- $f"; tail -20 "$f"; done >&2; exit 1; }

cat > "$tmp/script.json" <<'JSON'
{"token_delay_ms": 100, "entries": [
  {"match": "Say hello", "output": "Hello there, friend!<turn|>"}
]}
JSON

# start NAME ARGS...: starts gem serve on a free port; sets $pid and $port once /health is 200.
start() {
  local name=$1
  shift
  "$gem" serve -m "$model" --backend "scripted:$tmp/script.json" -c 1024 --port 0 "$@" \
    2> "$tmp/$name.log" &
  pid=$!
  pids+=("$pid")
  port=""
  for _ in $(seq 1 300); do
    port=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$tmp/$name.log" | head -1)
    if [[ -n $port ]] && grep -q "ready in" "$tmp/$name.log"; then return 0; fi
    kill -0 "$pid" 2>/dev/null || fail "$name: gem serve exited early"
    sleep 0.1
  done
  fail "$name: gem serve did not become ready"
}

# wait_exit PID SECONDS: sets $st to the exit status, or "timeout".
wait_exit() {
  local p=$1 limit=$2
  for _ in $(seq 1 $((limit * 10))); do
    if ! kill -0 "$p" 2>/dev/null; then
      wait "$p"
      st=$?
      return
    fi
    sleep 0.1
  done
  st=timeout
}

# Sampled from pseudo-random logits (no script entry matches): ignore_eos, so that an end-of-turn
# token among them cannot end the stream early.
body_long='{"messages":[{"role":"user","content":"anything"}],"stream":true,"max_tokens":400,"ignore_eos":true}'
body_short='{"messages":[{"role":"user","content":"Say hello"}],"stream":true}'

# 1. Busy port: the second server fails and names the port (before: SO_REUSEPORT, silent split).
start a --shutdown-timeout 1
"$gem" serve -m "$model" --backend "scripted:$tmp/script.json" --port "$port" 2> "$tmp/busy.log" &
bpid=$!
pids+=("$bpid")
wait_exit "$bpid" 30
[[ $st != timeout && $st != 0 ]] || fail "a second server on busy port $port: status $st"
grep -q "port $port" "$tmp/busy.log" || fail "busy port error does not name port $port"
grep -qi "in use" "$tmp/busy.log" || fail "busy port error does not say it is in use"
echo "ok: busy port $port refused: $(grep -i 'in use' "$tmp/busy.log" | head -1)"

# 2. Out-of-range port (before: 70000 bound 4464).
"$gem" serve -m "$model" --backend "scripted:$tmp/script.json" --port 70000 2> "$tmp/range.log"
st=$?
[[ $st != 0 ]] || fail "--port 70000 accepted"
grep -q "70000" "$tmp/range.log" && grep -q "out of range" "$tmp/range.log" || fail "--port 70000: $(cat "$tmp/range.log")"
echo "ok: --port 70000 refused"

# 3. SIGTERM mid-stream past the grace period: error event, [DONE], exit 3.
curl -sN --max-time 60 "http://127.0.0.1:$port/v1/chat/completions" -d "$body_long" > "$tmp/cut.sse" &
cpid=$!
sleep 1.5
kill -TERM "$pid"
t0=$(date +%s)
wait_exit "$pid" 30
wait "$cpid"
[[ $st == 3 ]] || fail "SIGTERM past the grace period: exit $st, expected 3"
(( $(date +%s) - t0 <= 15 )) || fail "shutdown took too long"
grep -q '^data: {"error":' "$tmp/cut.sse" || fail "cut stream has no error event: $(tail -3 "$tmp/cut.sse")"
[[ $(grep '^data: ' "$tmp/cut.sse" | tail -1) == "data: [DONE]" ]] || fail "cut stream does not end with [DONE]"
echo "ok: SIGTERM mid-stream -> error event, [DONE], exit 3"

# 4. SIGTERM with a stream that finishes within the grace period: complete answer, exit 0.
start b --shutdown-timeout 20
curl -sN --max-time 60 "http://127.0.0.1:$port/v1/chat/completions" -d "$body_short" > "$tmp/drain.sse" &
cpid=$!
sleep 0.5
kill -TERM "$pid"
wait_exit "$pid" 30
wait "$cpid"
[[ $st == 0 ]] || fail "clean drain: exit $st, expected 0"
grep -q '"finish_reason":"stop"' "$tmp/drain.sse" || fail "drained stream has no finish chunk"
[[ $(grep '^data: ' "$tmp/drain.sse" | tail -1) == "data: [DONE]" ]] || fail "drained stream has no [DONE]"
grep -q '"error"' "$tmp/drain.sse" && fail "drained stream has an error"
echo "ok: SIGTERM drains a running stream, exit 0"

# 5. A second signal exits at once (before: ignored).
start c --shutdown-timeout 60
curl -sN --max-time 60 "http://127.0.0.1:$port/v1/chat/completions" -d "$body_long" > /dev/null &
cpid=$!
sleep 1
kill -TERM "$pid"
sleep 0.5
kill -0 "$pid" 2>/dev/null || fail "exited on the first signal despite a 60 s grace period"
kill -TERM "$pid"
wait_exit "$pid" 5
[[ $st == 143 ]] || fail "second SIGTERM: exit $st, expected 143"
kill "$cpid" 2>/dev/null
wait "$cpid" 2>/dev/null
echo "ok: second signal exits at once (143)"

# 6. Key from a file and from the environment; the scheme in any case; refusals logged.
echo "file-key-789" > "$tmp/key"
start d --api-key-file "$tmp/key"
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/v1/models")
[[ $code == 401 ]] || fail "no key: $code"
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: bearer file-key-789" "http://127.0.0.1:$port/v1/models")
[[ $code == 200 ]] || fail "bearer (lower case) with the file's key: $code"
grep -q "127.0.0.1:[0-9]* GET /v1/models -> 401" "$tmp/d.log" || fail "401 not logged with the client address"
grep -q "file-key-789" "$tmp/d.log" && fail "the key appears in the log"
ps -o args= -p "$pid" | grep -q "file-key-789" && fail "the key is visible in ps"
kill -TERM "$pid"; wait_exit "$pid" 20
GEM_API_KEY=env-key-321 start e
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer env-key-321" "http://127.0.0.1:$port/v1/models")
[[ $code == 200 ]] || fail "GEM_API_KEY: $code"
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/v1/models")
[[ $code == 401 ]] || fail "GEM_API_KEY set but no key sent: $code"
kill -TERM "$pid"; wait_exit "$pid" 20
echo "ok: --api-key-file, GEM_API_KEY, case-insensitive Bearer"
echo "all serve process checks passed"
