#!/usr/bin/env bash
# Per-SASS-instruction profile of one decode-step kernel on the GPU machine, after
# bench/cuda/h200_run.sh build:   bench/cuda/ncu_sass.sh KERNEL_REGEX MODEL DEPTH
# One launch of a kernel matching KERNEL_REGEX in a decode step at DEPTH (SKIP matching launches
# skipped first, counted from the start: the bench's two warm-up steps at depth 0 come first,
# then the timed steps at DEPTH), with the SourceCounters and
# WarpStateStats sections; writes $OUT/<name>_details.txt and $OUT/<name>_sass.csv (the source
# page in its SASS view: the per-instruction counters; the CUDA view has none).
set -u
if [ $# -lt 3 ] || [ $# -gt 4 ] || ! [[ $3 =~ ^[0-9]+$ ]] || ! [[ ${4:-0} =~ ^[0-9]+$ ]]; then
  echo "usage: bench/cuda/ncu_sass.sh KERNEL_REGEX MODEL DEPTH [SKIP] (DEPTH and SKIP whole numbers; got: $*)" >&2
  exit 2
fi
kernel=$1 model=$2 depth=$3 skip=${4:-0}
[ -f "$model" ] || { echo "ncu_sass.sh: model $model: no such file" >&2; exit 2; }
source bench/cuda/device_env.sh
ncu_bin=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
name=$(echo "$kernel" | tr -c 'A-Za-z0-9_\n' '_')
rep=/tmp/sass_$name
sections=(--section SourceCounters --section WarpStateStats --import-source yes)
timeout 120 "$ncu_bin" --clock-control none \
  --kernel-name "regex:$kernel" --launch-skip "$skip" --launch-count 1 "${sections[@]}" \
  -o "$rep" "$GEM" bench -m "$model" -p 0 -n 2 -d "$depth" -r 1 --backend cuda > "$rep.log" 2>&1
echo "$kernel: ncu rc=$?"
"$ncu_bin" --import "$rep.ncu-rep" --page details > "$OUT/${name}_details.txt" 2>&1
"$ncu_bin" --import "$rep.ncu-rep" --page source --csv --print-source sass > "$rep.csv" 2> "$OUT/${name}_sass.err"
echo "$kernel: sass page $(wc -l < "$rep.csv") lines; header:"
head -1 "$rep.csv" | cut -c1-400
head -c 4000000 "$rep.csv" > "$OUT/${name}_sass.csv"
