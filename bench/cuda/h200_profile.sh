#!/usr/bin/env bash
# gem profile on the GPU machine (issue 21 item 6; run from the repository root there, with
# .device/deps carried as for bench/cuda/h200_run.sh): for each of $MODELS (default "12b 31b",
# gem synth files), at each of $DEPTHS (default "0 32768"): the stage profile of a decode step
# and of a 512-row prompt tile (table and JSON), gem bench's decode at the same depth and context
# for comparison, and, at the deepest depth, the decode step timed the two other ways
# (--timing graph-inline, eager); then the attention sweep; then batched decode steps of
# $PARALLEL sequences (default "8,16,32"; "" skips them) at depth 512, the shape of gem bench
# --parallel's test (-p 512 -n 128), beside one decode step there. Everything lands in $OUT.
#   bash bench/cuda/h200_profile.sh                 (MODELS=12b DEPTHS=0 to narrow it)
set -u
OUT=${OUT:-/tmp/gem-out}
mkdir -p "$OUT"
source bench/cuda/device_deps.sh
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/profile.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem \
  --format=csv >"$OUT/gpu.txt" 2>&1
cmake -S . -B build-dev -G Ninja -DCMAKE_BUILD_TYPE=Release -DGEM_CUDA=ON -DGEM_BUILD_BENCH=OFF \
  -DGEM_BUILD_TESTS=OFF -DGEM_WERROR=OFF >"$OUT/gem-build.log" 2>&1 &&
  cmake --build build-dev -j16 --target gem >>"$OUT/gem-build.log" 2>&1 || { log "gem build failed"; exit 1; }
GEM=build-dev/bin/gem
M=/tmp/models
mkdir -p $M
SAMPLES=${SAMPLES:-20}
DEPTHS=${DEPTHS:-0 32768}
deepest=0
for d in $DEPTHS; do [ "$d" -gt "$deepest" ] && deepest=$d; done

for p in ${MODELS:-12b 31b}; do
  if [ ! -f $M/g$p.gguf ]; then
    log "gem synth $p"
    $GEM synth --profile $p -q -o $M/g$p.gguf >>"$OUT/profile.txt" 2>&1 || { log "synth $p failed"; continue; }
  fi
  for d in $DEPTHS; do
    ctx=$((d + 512))  # the same context for profile and bench: the decode graphs depend on it
    log "gem profile $p at depth $d (decode step and 512-row prompt tile)"
    $GEM profile -m $M/g$p.gguf --backend cuda -d $d -c $ctx --rows 1,512 -n $SAMPLES \
      --json-file "$OUT/profile_${p}_d$d.json" >"$OUT/profile_${p}_d$d.md" 2>>"$OUT/profile_$p.log" ||
      log "gem profile $p d$d failed (see profile_$p.log)"
    cat "$OUT/profile_${p}_d$d.md" >>"$OUT/profile.txt"
    grep -E "^forward stages" "$OUT/profile_${p}_d$d.md" | tee -a "$OUT/profile.txt"
    log "gem bench $p decode at depth $d"
    $GEM bench -m $M/g$p.gguf --backend cuda -p 0 -n 64 -d $d -c $ctx -r 3 -o json \
      >"$OUT/bench_${p}_d$d.json" 2>>"$OUT/profile_$p.log" || log "gem bench $p d$d failed"
    python3 - "$OUT/bench_${p}_d$d.json" "$OUT/profile_${p}_d$d.json" <<'EOF' | tee -a "$OUT/profile.txt"
import json, sys
try:
    bench = json.load(open(sys.argv[1]))[0]
    prof = json.load(open(sys.argv[2]))
except Exception as e:  # a failed run above: say so, go on
    print(f"comparison skipped: {e}")
    sys.exit(0)
step_us = 1e6 / bench["median_tps"]
for p in prof["passes"]:
    if p["rows"] != 1:
        continue
    t = p["totals"]
    print(f"depth {p['depth']}: gem bench decode {step_us:.1f} us/token ({bench['median_tps']:.2f} t/s); "
          f"profile: plain step {t['plain_us']:.1f} us, stages {t['forward_us']:.1f} us "
          f"({100 * (t['forward_us'] / step_us - 1):+.1f} % vs bench)")
EOF
  done
  ctx=$((deepest + 512))
  for timing in graph-inline eager; do
    log "gem profile $p at depth $deepest, decode timed $timing"
    $GEM profile -m $M/g$p.gguf --backend cuda -d $deepest -c $ctx -n $SAMPLES --timing $timing \
      --json-file "$OUT/profile_${p}_d${deepest}_$timing.json" \
      >"$OUT/profile_${p}_d${deepest}_$timing.md" 2>>"$OUT/profile_$p.log" ||
      log "gem profile --timing $timing failed (see profile_$p.log)"
    grep -E "^timing|^forward stages" "$OUT/profile_${p}_d${deepest}_$timing.md" | tee -a "$OUT/profile.txt"
  done
  log "gem profile $p attention sweep"
  $GEM profile -m $M/g$p.gguf --backend cuda --attention-sweep 0,1024,4096,16384,32768 -c 32769 \
    -n 10 --json-file "$OUT/attention_$p.json" >"$OUT/attention_$p.md" 2>>"$OUT/profile_$p.log" ||
    log "attention sweep $p failed"
  cat "$OUT/attention_$p.md" >>"$OUT/profile.txt"
  if [ -n "${PARALLEL-8,16,32}" ]; then
    log "gem profile $p batched decode steps (--parallel ${PARALLEL-8,16,32}) at depth 512"
    $GEM profile -m $M/g$p.gguf --backend cuda -d 512 -c 1024 --rows 1 --parallel "${PARALLEL-8,16,32}" \
      -n $SAMPLES --json-file "$OUT/profile_${p}_parallel.json" >"$OUT/profile_${p}_parallel.md" \
      2>>"$OUT/profile_$p.log" || log "gem profile --parallel $p failed (see profile_$p.log)"
    cat "$OUT/profile_${p}_parallel.md" >>"$OUT/profile.txt"
  fi
done
log done
