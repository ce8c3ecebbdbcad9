#!/usr/bin/env bash
# Timeline of decode steps inside the CUDA graph (CUPTI kernel records through the injection
# library of bench/cuda/kernel_trace.sh, carried in .device/trace; the GPU machine has no nsys)
# on the synthetic $TRACE_MODEL (default 12b), once per line of $TRACE_FILE (environment
# settings) at depth $TRACE_DEPTH (default 0): each kernel's duration and the gap from the
# previous kernel's end to its start, summarised by bench/cuda/trace_steps.py.
# Run on the device after bench/cuda/h200_run.sh (reuses build-dev and /tmp/models).
source bench/cuda/device_env.sh
MODEL=${TRACE_MODEL:-12b}
LIB=$PWD/.device/trace/libgem_kernel_trace.so
[ -f "$LIB" ] || { echo "$LIB missing: run bench/cuda/kernel_trace.sh here and carry .device/trace"; exit 1; }
[ -f $M/g$MODEL.gguf ] || $GEM synth --profile $MODEL -q -o $M/g$MODEL.gguf
n=0
while IFS= read -r cfg; do
  [ -z "$cfg" ] && continue
  n=$((n + 1))
  echo "=== $MODEL d${TRACE_DEPTH:-0}: $cfg" | tee -a "$OUT/trace.txt"
  env $cfg CUDA_INJECTION64_PATH=$LIB GEM_KERNEL_TRACE=/tmp/trace_$n.csv timeout 300 \
    $GEM bench -m $M/g$MODEL.gguf -p 0 -n 16 -d "${TRACE_DEPTH:-0}" -r 1 --backend cuda \
    2>&1 | grep -E "^\| gemma" | tee -a "$OUT/trace.txt"
  python3 bench/cuda/trace_steps.py /tmp/trace_$n.csv | tee -a "$OUT/trace.txt"
done < "$TRACE_FILE"
