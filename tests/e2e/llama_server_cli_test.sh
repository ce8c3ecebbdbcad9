#!/usr/bin/env bash
# llama-server command lines against `gem serve` (issue 25): the common command line starts gem
# unchanged (with -m and the tiny model on the CPU), its flags take llama-server's meaning
# (checked through /props, /metrics, /slots, the key and a chat turn), the tuning-only flags each
# print a notice, bad and unknown flags are errors naming the flag (and the nearest known one),
# --help groups the options, and /props answers with "is_loading" while a slow load runs.
set -euo pipefail
GEM="$1"; MODEL="$2"; SCRIPT="$3"
fail() { echo "FAIL: $*" >&2; exit 1; }
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT

# Starts `gem serve ARGS` in the background on a free port; sets PORT (from its "listening" line).
n_serve=0
serve() {
  n_serve=$((n_serve + 1))
  local log="$tmp/serve.$n_serve.log"
  "$GEM" serve --port 0 "$@" > "$log" 2>&1 &
  pids+=($!)
  PORT=""
  for _ in $(seq 100); do
    PORT=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$log" | head -1)
    [ -n "$PORT" ] && break
    sleep 0.05
  done
  [ -n "$PORT" ] || fail "gem serve did not start: $(cat "$log")"
  LOG="$log"
}
wait_ready() {
  for _ in $(seq 200); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/health")" = 200 ] && return 0
    sleep 0.05
  done
  fail "never ready: $(cat "$LOG")"
}

# 1. The command line users bring from llama-server.
echo "sk-test-key" > "$tmp/key"
serve -m "$MODEL" --jinja -ngl 99 -fa on -ctk f16 -ctv f16 -np 4 -n 512 --temp 0.7 --top-k 40 \
  --top-p 0.95 --min-p 0.05 --seed 42 --repeat-penalty 1.1 --reasoning-format deepseek \
  --reasoning-budget -1 --chat-template-kwargs '{"enable_thinking":false}' --metrics --slots \
  --no-webui --api-key-file "$tmp/key" -c 1024 -t 2 -b 2048 -ub 128 --alias gem-cli \
  --slot-save-path "$tmp/slots"
wait_ready
for n in "-ngl is ignored" "-fa is ignored" "--jinja/--no-jinja are ignored" "slots: 4 (-np)" "-b is ignored" \
         "--slot-save-path is ignored"; do
  grep -qF -- "$n" "$LOG" || fail "no notice \"$n\": $(cat "$LOG")"
done
auth=(-H "Authorization: Bearer sk-test-key")
[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/props")" = 401 ] || fail "/props without the key"
curl -s "${auth[@]}" "http://127.0.0.1:$PORT/props" > "$tmp/props"
python3 - "$tmp/props" <<'PY' || fail "/props: $(cat "$tmp/props")"
import json, sys
p = json.load(open(sys.argv[1]))
s = p["default_generation_settings"]
q = s["params"]
assert s["n_ctx"] == 1024, s
assert p["total_slots"] == 4, p  # -np 4: four slots, each of -c 1024
assert abs(q["temperature"] - 0.7) < 1e-6 and q["top_k"] == 40 and abs(q["top_p"] - 0.95) < 1e-6, q
assert abs(q["min_p"] - 0.05) < 1e-6 and q["seed"] == 42 and abs(q["repeat_penalty"] - 1.1) < 1e-6, q
assert q["n_predict"] == 512 and q["enable_thinking"] is False and q["reasoning_format"] == "deepseek", q
assert p["endpoint_metrics"] is True and p["endpoint_slots"] is True and p["is_loading"] is False, p
assert p["model_alias"] == "gem-cli", p
PY
curl -s "${auth[@]}" "http://127.0.0.1:$PORT/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"messages":[{"role":"user","content":"hi"}],"max_tokens":5}' > "$tmp/chat"
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["usage"]["completion_tokens"] <= 5, r' "$tmp/chat" ||
  fail "chat: $(cat "$tmp/chat")"
# Whole bodies first: `curl | grep -q` under pipefail fails when grep stops reading early.
curl -s "${auth[@]}" "http://127.0.0.1:$PORT/metrics" > "$tmp/metrics"
grep -q '^llamacpp:tokens_predicted_total' "$tmp/metrics" || fail "/metrics: $(cat "$tmp/metrics")"
curl -s "${auth[@]}" "http://127.0.0.1:$PORT/slots" > "$tmp/slots.json"
grep -q '"n_ctx":1024' "$tmp/slots.json" || fail "/slots: $(cat "$tmp/slots.json")"
[ "$(curl -s -o /dev/null -w '%{http_code}' "${auth[@]}" "http://127.0.0.1:$PORT/")" = 404 ] || fail "--no-webui: / is not 404"
kill "${pids[-1]}"; wait "${pids[-1]}" 2>/dev/null || true
echo "ok: a llama-server command line starts gem unchanged; its flags take effect"

# 2. Errors name the flag (and, when unknown, the nearest known one).
expect_error() {  # expect_error "text in the message" ARGS...
  local want="$1"; shift
  if "$GEM" serve "$@" > "$tmp/err" 2>&1; then fail "gem serve $* succeeded"; fi
  grep -qF -- "$want" "$tmp/err" || fail "gem serve $*: no \"$want\" in: $(cat "$tmp/err")"
}
expect_error "unknown option --ctx-sise (nearest: --ctx-size)" -m "$MODEL" --ctx-sise 512
expect_error "unknown option --temperature (nearest: --temp)" -m "$MODEL" --temperature 0.5
expect_error "unknown option -ngll (nearest: -ngl)" -m "$MODEL" -ngll 99
expect_error "unknown option --top_k (nearest: --top-k)" -m "$MODEL" --top_k 3
expect_error "gem's KV cache holds f32, f16 (the default) or f16-full" -m "$MODEL" -ctk q8_0 -ctv q8_0 --port 0
expect_error "-ctk f16 and -ctv f32: gem stores K and V in one type" -m "$MODEL" -ctk f16 -ctv f32 --port 0
expect_error "--flash-attn: maybe not in" -m "$MODEL" -fa maybe
expect_error "--reasoning-format: xml not in" -m "$MODEL" --reasoning-format xml
expect_error "--chat-template-kwargs nope: expected a JSON object" -m "$MODEL" --chat-template-kwargs nope --port 0
expect_error "enable_thinking: expected true or false" -m "$MODEL" --chat-template-kwargs '{"enable_thinking":"no"}' --port 0
expect_error "-n -5: expected -1" -m "$MODEL" -n -5 --port 0
expect_error "--top-p 2: expected 0-1" -m "$MODEL" --top-p 2 --port 0
expect_error "--reasoning-budget -3" -m "$MODEL" --reasoning-budget -3 --port 0
expect_error "--parallel 0: expected 1-256" -m "$MODEL" -np 0 --port 0
expect_error "--parallel 100000: expected 1-256" -m "$MODEL" -np 100000 --port 0
echo "ok: bad and unknown flags are errors naming the flag"

# 3. --help groups the options.
"$GEM" serve --help > "$tmp/help"
for g in "Model and context:" "Network and access:" "Request defaults" "Endpoints and slots:" \
         "Limits and timeouts:" "Accepted for llama-server command lines"; do
  grep -qF "$g" "$tmp/help" || fail "--help has no group \"$g\""
done
echo "ok: --help groups"

# 4. /props while a slow load runs: 200 with "is_loading" and the header's n_ctx; /health 503.
python3 - "$SCRIPT" "$tmp/slow.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1])); s["load_delay_ms"] = 3000
json.dump(s, open(sys.argv[2], "w"))
PY
serve -m "$MODEL" --backend "scripted:$tmp/slow.json" -c 768
seen_loading=0
for _ in $(seq 100); do
  code=$(curl -s -o "$tmp/props" -w '%{http_code}' "http://127.0.0.1:$PORT/props")
  [ "$code" = 200 ] || fail "/props while loading: HTTP $code"
  # The context comes from -c at once, the chat template once the GGUF header is read (a moment
  # later on a slow machine: the sanitizer build): wait for both while is_loading holds.
  if grep -q '"is_loading":true' "$tmp/props" && grep -q '"n_ctx":768' "$tmp/props" &&
     grep -q '"chat_template":"{%' "$tmp/props"; then seen_loading=1; break; fi
  grep -q '"is_loading":false' "$tmp/props" && break
  sleep 0.05
done
[ "$seen_loading" = 1 ] || fail "/props never said is_loading with n_ctx and the chat template: $(cat "$tmp/props")"
[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/health")" = 503 ] || fail "/health while loading"
curl -s "http://127.0.0.1:$PORT/v1/models" > "$tmp/models.json"
grep -q '"n_ctx":768' "$tmp/models.json" || fail "/v1/models while loading: $(cat "$tmp/models.json")"
wait_ready
curl -s "http://127.0.0.1:$PORT/props" > "$tmp/props"
grep -q '"is_loading":false' "$tmp/props" || fail "/props after loading: $(cat "$tmp/props")"
echo "ok: /props answers while loading (is_loading, n_ctx, chat template); /health 503 until ready"
