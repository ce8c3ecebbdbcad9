#!/usr/bin/env bash
# Raw SSE and HTTP details with curl against gem serve (scripted backend), run through
# `gem agent ... -- bash curl_test.sh` (OPENAI_BASE_URL points at the server).
set -euo pipefail
BASE="${OPENAI_BASE_URL:?run me through gem agent}"
ROOT="${BASE%/v1}"
fail() { echo "FAIL: $*" >&2; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# Raw SSE: data lines, role chunk first, finish chunk, usage chunk with empty choices, [DONE] last.
curl -sN "$BASE/chat/completions" -H 'Content-Type: application/json' -H 'Accept: application/json' \
  -d '{"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"Say hello"}]}' \
  -D "$tmp/h" > "$tmp/sse"
grep -qi '^content-type: text/event-stream' "$tmp/h" || fail "no text/event-stream header"
grep -qi '^transfer-encoding: chunked' "$tmp/h" || fail "not chunked"
grep -v '^$' "$tmp/sse" | grep -v '^:' | grep -qv '^data: ' && fail "a non-data, non-comment line"
[ "$(grep '^data: ' "$tmp/sse" | tail -1)" = "data: [DONE]" ] || fail "[DONE] is not last"
head -1 "$tmp/sse" | grep -q '"delta":{"content":null,"role":"assistant"}' || grep -m1 '^data: ' "$tmp/sse" | grep -q '"role":"assistant"' || fail "first chunk is not the role chunk"
grep -q '"finish_reason":"stop"' "$tmp/sse" || fail "no finish chunk"
grep -q '"choices":\[\],' "$tmp/sse" || fail "no usage chunk with empty choices"
grep -q '"cached_tokens"' "$tmp/sse" || fail "no cached_tokens"
# Each event is one data line followed by a blank line.
awk 'BEGIN{prev="x"} /^data: /{ if (prev != "" && NR > 1) bad=1 } {prev=$0} END{exit bad}' "$tmp/sse" || fail "events not separated by blank lines"
echo "ok: raw SSE"

# Expect: 100-continue on a large body is answered at once (no 1 s stall).
python3 - "$tmp/big.json" <<'PY'
import json, sys
text = "Say hello. " + "lorem ipsum " * 90000
json.dump({"messages": [{"role": "user", "content": text}], "max_tokens": 1}, open(sys.argv[1], "w"))
PY
start=$(date +%s%N)
code=$(curl -s -o "$tmp/big.out" -w '%{http_code}' -v -H 'Expect: 100-continue' -H 'Content-Type: application/json' \
  --data-binary @"$tmp/big.json" "$BASE/chat/completions" 2> "$tmp/big.err")
ms=$(( ($(date +%s%N) - start) / 1000000 ))
grep -q '100 Continue' "$tmp/big.err" || fail "no 100 Continue"
# The body is over the context of the test server: a 400 exceed_context_size_error, not a 5xx.
[ "$code" = 400 ] || fail "large body: HTTP $code"
grep -q exceed_context_size_error "$tmp/big.out" || fail "no exceed_context_size_error"
echo "ok: Expect: 100-continue ($ms ms)"

# Errors are JSON with the OpenAI shape.
code=$(curl -s -o "$tmp/e" -w '%{http_code}' "$ROOT/nope")
[ "$code" = 404 ] && grep -q '"not_found_error"' "$tmp/e" || fail "404 shape"
code=$(curl -s -o "$tmp/e" -w '%{http_code}' -H 'Content-Type: application/json' -d '{"messages":' "$BASE/chat/completions")
[ "$code" = 400 ] && grep -q '"invalid_request_error"' "$tmp/e" || fail "400 shape"
code=$(curl -s -o "$tmp/e" -w '%{http_code}' "$ROOT/props")
[ "$code" = 200 ] && grep -q '"vision":false' "$tmp/e" || fail "/props"
code=$(curl -s -o "$tmp/e" -w '%{http_code}' "$ROOT/health")
[ "$code" = 200 ] || fail "/health"
echo "ok: errors and metadata"
