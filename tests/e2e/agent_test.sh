#!/usr/bin/env bash
# gem agent: the command sees the endpoints (OpenAI-style and hax's, with HAX_PROVIDER=llamacpp
# unless the user chose a provider), its exit status comes back, signals are forwarded, and the
# server is gone afterwards. With a real hax on PATH, `hax -p` runs against it (else skipped).
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

# The environment the command sees, variable by variable.
"$GEM" agent -m "$MODEL" --backend "scripted:$SCRIPT" -c 512 -- \
  bash -c 'env | grep -E "^(HAX_|OPENAI_)" | sort > '"$tmp"'/env'
grep -qx 'HAX_PROVIDER=llamacpp' "$tmp/env" || fail "HAX_PROVIDER not llamacpp: $(cat "$tmp/env")"
base=$(sed -n 's/^OPENAI_BASE_URL=//p' "$tmp/env")
case "$base" in http://127.0.0.1:*/v1) ;; *) fail "OPENAI_BASE_URL=$base";; esac
grep -qx "HAX_LLAMACPP_BASE_URL=$base" "$tmp/env" || fail "HAX_LLAMACPP_BASE_URL differs from OPENAI_BASE_URL"
grep -q '^OPENAI_API_KEY=.' "$tmp/env" || fail "no OPENAI_API_KEY"
grep -q '^HAX_LLAMACPP_API_KEY=' "$tmp/env" && fail "HAX_LLAMACPP_API_KEY without a key"
# A provider the user chose is kept, even an empty one (hax reads a set variable as a choice).
HAX_PROVIDER=openai-compatible "$GEM" agent -m "$MODEL" --backend "scripted:$SCRIPT" -c 512 -- \
  bash -c 'echo "[$HAX_PROVIDER]" > '"$tmp"'/provider'
[ "$(cat "$tmp/provider")" = "[openai-compatible]" ] || fail "user's HAX_PROVIDER replaced: $(cat "$tmp/provider")"
HAX_PROVIDER= "$GEM" agent -m "$MODEL" --backend "scripted:$SCRIPT" -c 512 -- \
  bash -c 'echo "[${HAX_PROVIDER-unset}]" > '"$tmp"'/provider'
[ "$(cat "$tmp/provider")" = "[]" ] || fail "empty HAX_PROVIDER replaced: $(cat "$tmp/provider")"
# With a key: both clients get it.
"$GEM" agent -m "$MODEL" --backend "scripted:$SCRIPT" -c 512 --api-key sekrit -- \
  bash -c 'env | grep -E "^(HAX_LLAMACPP_API_KEY|OPENAI_API_KEY)=" | sort > '"$tmp"'/keys'
grep -qx 'HAX_LLAMACPP_API_KEY=sekrit' "$tmp/keys" && grep -qx 'OPENAI_API_KEY=sekrit' "$tmp/keys" ||
  fail "keys: $(cat "$tmp/keys")"
echo "ok: HAX_PROVIDER=llamacpp unless chosen, OpenAI and hax endpoints, keys"

# A real hax, where this machine has one: one prompt through its llama.cpp provider.
if command -v hax >/dev/null 2>&1; then
  "$GEM" agent -m "$MODEL" --backend "scripted:$SCRIPT" -c 4096 -- \
    timeout 60 hax -p "Say hello" > "$tmp/hax.out" 2> "$tmp/hax.err" || fail "hax -p failed: $(cat "$tmp/hax.err")"
  grep -q "Hello there, friend!" "$tmp/hax.out" || fail "hax output: $(cat "$tmp/hax.out") $(cat "$tmp/hax.err")"
  echo "ok: a real hax answered through gem agent"
else
  echo "skipped: no hax binary on PATH (the real-client check runs where one is installed)"
fi

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
