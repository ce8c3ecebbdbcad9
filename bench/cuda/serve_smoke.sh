#!/usr/bin/env bash
# `gem serve --backend cuda` on a fixture model, driven with curl (run on the GPU machine):
#   bench/cuda/serve_smoke.sh GEM MODEL [BACKEND, default cuda]
# Checks what a client relies on with a real (random-weight) model: /health, /v1/models, a
# streamed completion (role chunk, content, finish "length" at max_tokens, usage, [DONE] last),
# a non-streamed one, and prefix reuse on the device backend: the second turn of a conversation
# reports its first turn as cached_tokens and evaluates only the new tokens.
set -euo pipefail
GEM=${1:?gem binary}
MODEL=${2:?model}
BACKEND=${3:-cuda}
fail() { echo "FAIL: $*" >&2; kill "$pid" 2>/dev/null; exit 1; }
tmp=$(mktemp -d)
"$GEM" serve -m "$MODEL" --backend "$BACKEND" --port 18080 -c 2048 --alias smoke > "$tmp/log" 2>&1 &
pid=$!
for _ in $(seq 100); do curl -sf http://127.0.0.1:18080/health > /dev/null && break; sleep 0.2; done
curl -sf http://127.0.0.1:18080/health > /dev/null || { cat "$tmp/log"; fail "server did not come up"; }
B=http://127.0.0.1:18080/v1
curl -sf "$B/models" | grep -q '"id":"smoke"' || fail "/v1/models"
curl -sN "$B/chat/completions" -H 'Content-Type: application/json' \
  -d '{"stream":true,"max_tokens":12,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"Say hello"}]}' > "$tmp/sse"
grep -m1 '^data: ' "$tmp/sse" | grep -q '"role":"assistant"' || fail "no role chunk first"
[ "$(grep '^data: ' "$tmp/sse" | tail -1)" = "data: [DONE]" ] || fail "[DONE] is not last"
grep -q '"finish_reason":"length"' "$tmp/sse" || grep -q '"finish_reason":"stop"' "$tmp/sse" || fail "no finish chunk"
grep -q '"completion_tokens":' "$tmp/sse" || fail "no usage"
echo "ok: streamed completion on $BACKEND ($(grep -c '^data: ' "$tmp/sse") events)"
long=$(python3 -c 'print(" ".join(["word%d" % i for i in range(300)]))')
body1=$(python3 -c 'import json,sys; print(json.dumps({"max_tokens":8,"temperature":0,"messages":[{"role":"user","content":sys.argv[1]}]}))' "$long")
r1=$(curl -sf "$B/chat/completions" -H 'Content-Type: application/json' -d "$body1") || fail "turn 1"
answer=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["choices"][0]["message"]["content"] or "")' "$r1")
p1=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["usage"]["prompt_tokens"])' "$r1")
body2=$(python3 -c 'import json,sys; print(json.dumps({"max_tokens":8,"temperature":0,"messages":[{"role":"user","content":sys.argv[1]},{"role":"assistant","content":sys.argv[2]},{"role":"user","content":"and then?"}]}))' "$long" "$answer")
r2=$(curl -sf "$B/chat/completions" -H 'Content-Type: application/json' -d "$body2") || fail "turn 2"
cached=$(python3 -c 'import json,sys; u=json.loads(sys.argv[1])["usage"]; print(u.get("prompt_tokens_details",{}).get("cached_tokens",0))' "$r2")
p2=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["usage"]["prompt_tokens"])' "$r2")
echo "turn 1: $p1 prompt tokens; turn 2: $p2 prompt tokens, $cached cached"
[ "$cached" -ge "$((p1 - 8))" ] || fail "turn 2 reused only $cached of turn 1's $p1 tokens"
# Same request again, greedy: the same answer (the restored cache is exact).
r3=$(curl -sf "$B/chat/completions" -H 'Content-Type: application/json' -d "$body2") || fail "turn 2 again"
a2=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["choices"][0]["message"]["content"])' "$r2")
a3=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["choices"][0]["message"]["content"])' "$r3")
[ "$a2" = "$a3" ] || fail "regenerated greedy answer differs: '$a2' vs '$a3'"
echo "ok: prefix reuse on $BACKEND (regeneration identical)"
kill "$pid"; wait "$pid" 2>/dev/null || true
echo "serve smoke: all ok"
