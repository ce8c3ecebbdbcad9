#!/usr/bin/env bash
# Issue 24's load test on the GPU machine (run from the repository root there; carry
# .device/deps and .device/llama.cpp, made by bench/cuda/make_device_dir.sh): for each of
# $MODELS (default "12b 31b", `gem synth` files), bench/server/loadgen.py at $CLIENTS (default
# 1,4,8,16,32) concurrent streaming clients against `gem serve -np 32` and, with WITH_LLAMA=1
# (the default when .device/llama.cpp exists), against llama-server (-np 32, the same context per
# slot: -c 32*CTX, flash attention on, KV f16; LLAMA_KV="-kvu" by default, its unified cache, which
# llama-server itself picks when -np is left to it; with one stream per slot (LLAMA_KV="") a
# ubatch takes equal shares of consecutive sequence ids only (llama_batch_allocr::split_equal,
# sequential), so a step over many busy slots becomes several weight passes) on the same file; then the agent scenario
# (a ~30K-token main conversation whose turns alternate with 4 subagent requests) against
# `gem serve` at -np 1 (today's behaviour) and at the default -np, and llama-server -np 8
# (the same context per slot).
# After gem's table: 8 concurrent greedy requests against the same 8 alone (loadgen.py --check),
# the CUDA counterpart of tests/runtime/scheduler_test.cc's equality.
#   bash bench/server/h200_loadgen.sh        (logs and JSON in $OUT or /tmp/gem-out)
# Quick: MODELS=12b CLIENTS=1,8 REQS=1 bash bench/server/h200_loadgen.sh
# Parts (to fit 10-minute calls): PARTS="load" (the table), PARTS="agent" (the agent scenario);
# default both. GEM=path reuses a gem built by an earlier call.
set -u
OUT=${OUT:-/tmp/gem-out}
mkdir -p "$OUT"
source bench/cuda/device_deps.sh
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/loadgen.txt"; }
CTX=${CTX:-4096}         # context per slot for the throughput table (prompt 512 + gen 128 fit)
NP=${NP:-32}             # slots: the most clients of the table
CLIENTS=${CLIENTS:-1,4,8,16,32}
REQS=${REQS:-2}          # requests per client at each count
PROMPT=${PROMPT:-512}
GEN=${GEN:-128}
PARTS=${PARTS:-load agent}
SAMPLED=${SAMPLED:-}      # non-empty: the table's requests sample (loadgen.py --sampled)
BACKEND=${BACKEND:-cuda}  # a local smoke run: GEM=build/bin/gem BACKEND=cpu MODELS=tiny ...
M=/tmp/models
PORT=8091
LLAMA_KV=${LLAMA_KV--kvu}
mkdir -p $M
source bench/server/device_build.sh  # llama_pid, GEM

serve() {  # label, then the server command: starts it, waits for /health
  local label=$1; shift
  "$@" > "$OUT/server_$label.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 900); do curl -sf http://127.0.0.1:$PORT/health >/dev/null && return 0; sleep 1; done
  log "$label: server did not come up"; return 1
}
stop() { kill $server_pid; wait $server_pid 2>/dev/null; }
llama_ready() {  # llama-server's build is done and made the binary
  [ -n "${llama_pid:-}" ] || return 1
  wait $llama_pid 2>/dev/null
  [ -x /tmp/llama-build/bin/llama-server ] || { log "llama-server did not build (/tmp/llama-build.log)"; return 1; }
}
load() {  # label
  python3 bench/server/loadgen.py --url http://127.0.0.1:$PORT --clients $CLIENTS --requests $REQS \
    --prompt $PROMPT --gen $GEN --label "$1" --json "$OUT/load_$1.json" ${SAMPLED:+--sampled} 2>&1 | tee -a "$OUT/loadgen.txt"
  curl -s http://127.0.0.1:$PORT/metrics > "$OUT/metrics_$1.txt" || true
}
agent() {  # label
  python3 bench/server/loadgen.py --url http://127.0.0.1:$PORT --agent --main 30000 --turns 4 \
    --subagents 4 --label "$1" --json "$OUT/agent_$1.json" 2>&1 | tee -a "$OUT/loadgen.txt"
}

for p in ${MODELS:-12b 31b}; do
  [ -f $M/g$p.gguf ] || $GEM synth --profile $p -q -o $M/g$p.gguf
  case " $PARTS " in *" load "*)
  log "== $p: throughput, -np $NP, -c $CTX per slot, prompt $PROMPT, gen $GEN, clients $CLIENTS"
  # The check after the table: its prompts are the table's first ones, which a slot's prefix
  # cache would otherwise serve to the table (run 32 ran it first: 1-client TTFT 6.5 ms).
  serve "gem-$p" $GEM serve -m $M/g$p.gguf --backend $BACKEND -np $NP -c $CTX --port $PORT --metrics && {
    load "gem-$p"
    python3 bench/server/loadgen.py --url http://127.0.0.1:$PORT --check 8 --prompt $PROMPT --gen $GEN \
      --label "gem-$p" --json "$OUT/check_gem-$p.json" 2>&1 | tee -a "$OUT/loadgen.txt"
    stop; }
  log "== $p: one client at -np 1 (today's single-stream path)"
  serve "gem-$p-np1" $GEM serve -m $M/g$p.gguf --backend $BACKEND -np 1 -c $CTX --port $PORT && {
    CLIENTS=1 load "gem-$p-np1"; stop; }
  if llama_ready; then
    serve "llama-$p" /tmp/llama-build/bin/llama-server -m $M/g$p.gguf -ngl 99 -fa on -ctk f16 -ctv f16 \
      -np $NP -c $((CTX * NP)) $LLAMA_KV --port $PORT --metrics && { load "llama-$p"; stop; }
  fi
  ;; esac
  case " $PARTS " in *" agent "*)
  log "== $p: agent scenario (30K main conversation, 4 subagents between turns), -c 40960 per slot"
  serve "gem-$p-agent-np1" $GEM serve -m $M/g$p.gguf --backend $BACKEND -np 1 -c 40960 --port $PORT && {
    agent "gem-$p-agent-np1"; stop; }
  serve "gem-$p-agent" $GEM serve -m $M/g$p.gguf --backend $BACKEND -c 40960 --port $PORT --metrics && {
    agent "gem-$p-agent-default-np"; stop; }
  if llama_ready; then
    serve "llama-$p-agent" /tmp/llama-build/bin/llama-server -m $M/g$p.gguf -ngl 99 -fa on -ctk f16 \
      -ctv f16 -np 8 -c $((40960 * 8)) $LLAMA_KV --port $PORT && { agent "llama-$p-agent-np8"; stop; }
  fi
  ;; esac
done
log done
