#!/usr/bin/env bash
# Timeline of decode steps inside the CUDA graph (nsys, graph nodes traced one by one), on the
# synthetic 12B, once per line of $NSYS_FILE (environment settings): each kernel's duration and
# the gap from the previous kernel's end to its start, summarised by bench/cuda/nsys_steps.py.
# Run on the device after bench/cuda/h200_run.sh (reuses build-dev and /tmp/models/g12b.gguf).
set -u
OUT=${OUT:-/tmp/gem-out}
export PATH=/usr/local/cuda/bin:$PATH
DEPS=$PWD/.device/deps
export LD_LIBRARY_PATH=$DEPS/lib:${LD_LIBRARY_PATH:-}
GEM=build-dev/bin/gem; M=/tmp/models
MODEL=${NSYS_MODEL:-12b}
[ -x $GEM ] || { echo "build-dev/bin/gem missing: run bench/cuda/h200_run.sh build first"; exit 1; }
[ -f $M/g$MODEL.gguf ] || $GEM synth --profile $MODEL -q -o $M/g$MODEL.gguf
NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys /usr/local/cuda/nsight-systems*/bin/nsys 2>/dev/null | head -1)
[ -n "$NSYS" ] || { echo "nsys not found"; ls /opt/nvidia /usr/local/cuda 2>&1 | head; exit 1; }
echo "nsys: $NSYS"
n=0
while IFS= read -r cfg; do
  [ -z "$cfg" ] && continue
  n=$((n + 1))
  echo "=== $MODEL: $cfg" | tee -a "$OUT/nsys.txt"
  env $cfg timeout 200 "$NSYS" profile --cuda-graph-trace=node -t cuda -o /tmp/nsys_$n --force-overwrite true \
    $GEM bench -m $M/g$MODEL.gguf -p 0 -n 16 -d "${NSYS_DEPTH:-0}" -r 1 --backend cuda > "$OUT/nsys_run_$n.txt" 2>&1
  "$NSYS" stats --report cuda_gpu_trace --format csv --output /tmp/nsys_$n /tmp/nsys_$n.nsys-rep > /dev/null 2>&1
  csv=$(ls /tmp/nsys_${n}_cuda_gpu_trace*.csv 2>/dev/null | head -1)
  [ -n "$csv" ] || { echo "no trace csv"; tail -5 "$OUT/nsys_run_$n.txt"; continue; }
  python3 bench/cuda/nsys_steps.py "$csv" | tee -a "$OUT/nsys.txt"
done < "$NSYS_FILE"
