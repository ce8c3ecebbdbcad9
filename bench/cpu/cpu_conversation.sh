#!/usr/bin/env bash
# The server-path benchmark of issue 28 on the CPU (the H200 form: bench/server/h200_conversation.sh):
#   bench/cpu/cpu_conversation.sh MODEL.gguf [THREADS] [LLAMA_SERVER]
# gem bench's decode at the conversation's depth, then the agent conversation
# (bench/server/conversation.py) through `gem serve --backend cpu`: non-streamed greedy,
# streamed greedy, streamed with the server's default sampling; then through llama-server
# (-np 1, same threads, same context) when its path is given. A CPU-sized conversation: FIRST
# tokens of first message (default 1000), three follow-ups of 34, GEN generated tokens (default
# 32), so the generation runs at about FIRST + 200 positions; gem bench runs at DEPTH (default
# 1200) with the same GEN. Every engine run is stamped with the UTC time and the load average.
# Run time on a 2-vCPU host with the synthetic 12B: about 6 min without llama-server.
set -u
model=$1 threads=${2:-2} llama_server=${3:-}
gem=${GEM:-build/bin/gem}
first=${FIRST:-1000} gen=${GEN:-32} depth=${DEPTH:-1200} ctx=${CTX:-4096} port=${PORT:-8093}
stamp() { echo "## $(date -u +%T) load: $(cut -d' ' -f1-3 /proc/loadavg) :: $*"; }
echo "# commit $(git rev-parse --short HEAD), $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)), threads $threads, model $model, first $first, gen $gen, bench depth $depth"

serve_and_talk() {  # label, then the server command; $CONV_ARGS: conversation.py's options
  local label=$1; shift
  local log; log=$(mktemp /tmp/gem-conv-XXXXXX.log)
  "$@" > "$log" 2>&1 &
  local pid=$!
  for _ in $(seq 600); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 1; done
  stamp "$label ${CONV_ARGS:-}"
  python3 bench/server/conversation.py --url "http://127.0.0.1:$port" --label "$label" \
    --first "$first" --gen "$gen" ${CONV_ARGS:-}
  kill $pid; wait $pid 2>/dev/null
  rm -f "$log"
}

stamp "gem bench tg$gen @ d$depth"
"$gem" bench -m "$model" -p 0 -n "$gen" -d "$depth" -r 1 --backend cpu -t "$threads" 2>&1 | grep "|"
serve_and_talk gem "$gem" serve -m "$model" --backend cpu -t "$threads" -c "$ctx" --port "$port"
CONV_ARGS=--stream serve_and_talk gem-stream "$gem" serve -m "$model" --backend cpu -t "$threads" \
  -c "$ctx" --port "$port"
CONV_ARGS="--stream --sampled" serve_and_talk gem-stream-sampled "$gem" serve -m "$model" \
  --backend cpu -t "$threads" -c "$ctx" --port "$port"
if [ -n "$llama_server" ]; then
  serve_and_talk llama-server "$llama_server" -m "$model" -t "$threads" -c "$ctx" -np 1 \
    --port "$port"
fi
stamp done
