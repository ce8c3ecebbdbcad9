#!/usr/bin/env bash
# gem agent: the command sees the endpoints, its exit status comes back, signals are forwarded,
# and the server is gone afterwards.
set -euo pipefail
GEM="$1"; MODEL="$2"; SCRIPT="$3"
fail() { echo "FAIL: $*" >&2; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

"$GEM" agent -m "$MODEL" --backend "scripted:$SCRIPT" --alias gem-agent -c 512 -- \
  bash -c 'echo "$OPENAI_BASE_URL" > '"$tmp"'/url; [ "$HAX_LLAMACPP_BASE_URL" = "$OPENAI_BASE_URL" ] && [ -n "$OPENAI_API_KEY" ] &&
           curl -sf "$OPENAI_BASE_URL/models" > '"$tmp"'/models && exit 7' && st=0 || st=$?
[ "$st" = 7 ] || fail "exit status $st, expected the command's 7"
grep -q '"id":"gem-agent"' "$tmp/models" || fail "/v1/models from the command: $(cat "$tmp/models")"
url=$(cat "$tmp/url")
case "$url" in http://127.0.0.1:*/v1) ;; *) fail "OPENAI_BASE_URL=$url";; esac
curl -s --max-time 2 "${url%/v1}/health" >/dev/null && fail "server still answering after the command ended"
echo "ok: agent exit status, environment, cleanup"

# A signal to gem agent reaches the command (it exits 128+15 here via its trap).
"$GEM" agent -m "$MODEL" --backend "scripted:$SCRIPT" -c 512 -- \
  bash -c 'trap "echo got-term > '"$tmp"'/sig; exit 143" TERM; echo ready > '"$tmp"'/ready; while true; do sleep 0.1; done' &
pid=$!
for _ in $(seq 100); do [ -f "$tmp/ready" ] && break; sleep 0.1; done
[ -f "$tmp/ready" ] || fail "command never started"
kill -TERM "$pid"
wait "$pid" && st=0 || st=$?
[ "$st" = 143 ] || fail "exit status after SIGTERM: $st"
grep -q got-term "$tmp/sig" || fail "SIGTERM not forwarded"
echo "ok: signal forwarding"

# A model that cannot be loaded: gem agent reports it and exits at once, however early the
# failure comes relative to the server's start (the failure raced the listen loop and hung).
for i in $(seq 20); do
  timeout -s KILL 20 "$GEM" agent -m "$tmp/missing.gguf" --backend "scripted:$SCRIPT" -c 512 -- true \
    > "$tmp/missing.out" 2>&1 && st=0 || st=$?
  [ "$st" = 137 ] && fail "gem agent hung on a missing model (run $i)"
  [ "$st" = 0 ] && fail "gem agent exited 0 on a missing model"
  grep -q "missing.gguf" "$tmp/missing.out" || fail "no message naming the model: $(cat "$tmp/missing.out")"
done
echo "ok: an unloadable model ends gem agent at once"
