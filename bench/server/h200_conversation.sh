#!/usr/bin/env bash
# The server-path benchmark of issue 28 on the GPU machine (run from the repository root there;
# carry .device/deps and .device/llama.cpp, made by bench/cuda/make_device_dir.sh): for each of
# $MODELS (default "12b 31b"), gem bench's decode at the conversation's depth, then the agent
# conversation (bench/server/conversation.py: ~29,200-token first turn, three follow-ups,
# 256 generated tokens) through `gem serve` (default KV cache f16; non-streamed greedy, streamed
# greedy, streamed with the server's default sampling; WITH_F32=1 adds the f32 cache) and through
# llama-server (-ngl 99 -fa on -np 1, KV f16) — all on the same `gem synth` file.
#   bash bench/server/h200_conversation.sh        (logs in $OUT or /tmp/gem-out)
# WITH_LLAMA=0 leaves llama-server out (its CUDA build takes about seven minutes of a call).
set -u
OUT=${OUT:-/tmp/gem-out}
mkdir -p "$OUT"
source bench/cuda/device_deps.sh
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/conversation.txt"; }
CTX=40960
DEPTH=29300
M=/tmp/models
mkdir -p $M
source bench/server/device_build.sh  # llama_pid, GEM

serve_and_talk() {  # label, then the server command; $CONV_ARGS: conversation.py's options
  local label=$1; shift
  "$@" > "$OUT/server_$label.log" 2>&1 &
  local pid=$!
  for _ in $(seq 600); do curl -sf http://127.0.0.1:8090/health >/dev/null && break; sleep 1; done
  python3 bench/server/conversation.py --url http://127.0.0.1:8090 --label "$label" ${CONV_ARGS:-} \
    --json "$OUT/conv_$label.json" 2>&1 | tee -a "$OUT/conversation.txt"
  kill $pid; wait $pid 2>/dev/null
}

for p in ${MODELS:-12b 31b}; do
  [ -f $M/g$p.gguf ] || $GEM synth --profile $p -q -o $M/g$p.gguf
  log "gem bench $p at depth $DEPTH"
  $GEM bench -m $M/g$p.gguf -p 0 -n 128 -d $DEPTH -r 2 --backend cuda 2>&1 | grep "|" | tee -a "$OUT/conversation.txt"
  serve_and_talk "gem-$p" $GEM serve -m $M/g$p.gguf --backend cuda -c $CTX --port 8090
  CONV_ARGS=--stream serve_and_talk "gem-$p-stream" $GEM serve -m $M/g$p.gguf --backend cuda -c $CTX --port 8090
  # The server's default sampling (temperature 1, top-k 64, top-p 0.95: what hax gets), streamed.
  CONV_ARGS="--stream --sampled" serve_and_talk "gem-$p-stream-sampled" $GEM serve -m $M/g$p.gguf \
    --backend cuda -c $CTX --port 8090
  if [ "${WITH_F32:-0}" = 1 ]; then
    serve_and_talk "gem-$p-f32" $GEM serve -m $M/g$p.gguf --backend cuda -c $CTX --port 8090 --kv-type f32
  fi
  if [ -n "${llama_pid:-}" ]; then
    wait $llama_pid
    serve_and_talk "llama-server-$p" /tmp/llama-build/bin/llama-server -m $M/g$p.gguf -ngl 99 -fa on \
      -c $CTX -np 1 --port 8090
  fi
done
log done
