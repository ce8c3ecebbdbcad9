#!/usr/bin/env bash
# One GPU-machine session for the CUDA backend (run from the repository root on the device;
# bench/cuda/make_device_dir.sh builds the .device/ folder it carries):
#   bench/cuda/h200_run.sh [all|test|quick|dev|extra|build|sweep]
# test: build, CUDA kernel + end-to-end tests on the tiny fixtures. quick: test, then the 12B's
# decode figure (gem only). dev: the 12B's decode (PDL on/off), prefill, parity and an ncu
# per-kernel profile of decode steps. extra: gem serve on cuda (curl smoke) and ncu of the
# decode attention at depth 32768. all: also gem synth 12B/31B,
# gem bench and llama-bench (built from .device/llama.cpp in the background) on the same files,
# then the synthetic 12B/31B CUDA-vs-CPU checks. sweep: test, then gem bench on the 12B (and the
# 31B when SWEEP_31B=1) once per line of $SWEEP_FILE (environment settings, e.g.
# "GEM_CUDA_RES_CLUSTER=4"; the overrides cuda::tuning_from_env reads), decode at the depths of $SWEEP_DEPTHS (default 0) and prefill at the
# sizes of $SWEEP_P (default none), then the 12B parity.
# Logs go to $OUT (the device tool's return folder) or /tmp/gem-out.
set -u
mode=${1:-test}
OUT=${OUT:-/tmp/gem-out}
mkdir -p "$OUT"
J=$(nproc)
source bench/cuda/device_deps.sh
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/summary.txt"; }

nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem,driver_version --format=csv | tee -a "$OUT/summary.txt"

if [ "$mode" = all ] && [ -d .device/llama.cpp ]; then
  (cmake -S .device/llama.cpp -B /tmp/llama-build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
     -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF \
     -DLLAMA_OPENSSL=OFF -DCMAKE_BUILD_TYPE=Release >/tmp/llama-cfg.log 2>&1 &&
   cmake --build /tmp/llama-build -j14 --target llama-bench >/tmp/llama-build.log 2>&1;
   echo "llama build rc=$?" >>/tmp/llama-build.log) &
  llama_pid=$!
  with_llama=1
  GJ=4
else
  with_llama=0
  GJ=$J
fi

# Work-around on the device copy only: CLI11 2.1 rejects the one-dash long name "-ctk" that a
# CLI file in progress declares (gem aborts at start-up); drop that alias for this run.
sed -i -E 's/,-[a-z][a-z]+"/"/g; s/"-[a-z][a-z]+,/"/g; s/,-[a-z][a-z]+,/,/g' src/cli/*.cc
log "configure gem"
cmake -S . -B build-dev -G Ninja -DCMAKE_BUILD_TYPE=Release -DGEM_CUDA=ON -DGEM_BUILD_BENCH=OFF -DGEM_WERROR=OFF \
  >"$OUT/gem-build.log" 2>&1 || { log "configure failed"; tail -30 "$OUT/gem-build.log"; exit 1; }
log "build gem"
cmake --build build-dev -j"$GJ" --target cuda_kernels_test cuda_backend_test gem gem_test_models >>"$OUT/gem-build.log" 2>&1 \
  || { log "build failed"; grep -E "error|FAILED" "$OUT/gem-build.log" | head -20; }
log "built"
GEM=build-dev/bin/gem
F=build-dev/test-models   # written by the build (target gem_test_models); tests/data travels with the tree
M=/tmp/models
mkdir -p $M
# The synthetic model's CUDA-vs-CPU check (first 16 greedy tokens, top-20): parity 12B|31B,
# on $M/g12b.gguf or $M/g31b.gguf.
parity() {
  local lp
  lp=$(echo "$1" | tr B b)
  log "synthetic $1 vs CPU"
  env "GEM_CUDA_SYNTH_$1=$M/g$lp.gguf" timeout 120 \
    build-dev/tests/cuda/cuda_backend_test --gtest_filter="*Synthetic$1*" 2>&1 | grep -v "^gem info" | tail -25 > "$OUT/synth_$1.txt"
  tail -5 "$OUT/synth_$1.txt" | tee -a "$OUT/summary.txt"
}

# Measured copy bandwidth (bytes read + written), 4 GiB buffers, median of 20.
python3 - <<'PY' 2>&1 | tee -a "$OUT/summary.txt"
import torch
n = 4 << 30
a = torch.empty(n, dtype=torch.uint8, device="cuda"); b = torch.empty_like(a); a.random_(0, 255)
for _ in range(3): b.copy_(a)
ts = []
for _ in range(20):
    s, e = torch.cuda.Event(True), torch.cuda.Event(True)
    s.record(); b.copy_(a); e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e) / 1e3)
ts.sort(); t = ts[len(ts) // 2]
print(f"copy bandwidth: {2 * n / t / 1e12:.3f} TB/s (median of 20, 4 GiB, read+write)")
PY

[ "$mode" = build ] && { log "built (build mode: no tests)"; exit 0; }
if [ "$mode" != extra ]; then
log "kernel tests"
build-dev/tests/cuda/cuda_kernels_test 2>&1 | grep -vE "^gem info" > /tmp/kernels_full.txt
# The first failures' messages, then the end of the run (the summary).
{ grep -E -A4 "Failure" /tmp/kernels_full.txt | head -60; tail -40 /tmp/kernels_full.txt; } > "$OUT/kernels_test.txt"
tail -4 "$OUT/kernels_test.txt" | tee -a "$OUT/summary.txt"
log "backend tests"
timeout 240 build-dev/tests/cuda/cuda_backend_test \
  --gtest_filter=-*Synthetic* 2>&1 | grep -vE "^gem info" | tail -120 > "$OUT/backend_test.txt"
tail -8 "$OUT/backend_test.txt" | tee -a "$OUT/summary.txt"
fi
if [ "$mode" = quick ]; then
  # A short device budget: one decode figure on the 12B, no llama.cpp.
  log "synth 12b"
  $GEM synth --profile 12b -q -o $M/g12b.gguf
  log "gem bench 12b"
  $GEM bench -m $M/g12b.gguf -p 0 -n 128 -d 0 -r 3 --backend cuda 2>&1 | grep -v "^gem info" | tee "$OUT/gem_12b.txt"
  parity 12B
  log "done"
  exit 0
fi
if [ "$mode" = sweep ]; then
  models="12b"
  [ "${SWEEP_31B:-0}" = 1 ] && models="12b 31b"
  for p in $models; do
    log "synth $p"
    $GEM synth --profile $p -q -o $M/g$p.gguf
    while IFS= read -r line; do
      [ -z "$line" ] && continue
      log "sweep $p: $line"
      env $line $GEM bench -m $M/g$p.gguf -p "${SWEEP_P:-0}" -n 128 -d "${SWEEP_DEPTHS:-0}" -r 2 --backend cuda 2>&1 \
        | grep -E "^\|" | tee -a "$OUT/summary.txt"
    done < "$SWEEP_FILE"
  done
  parity 12B
  log "done"
  exit 0
fi
if [ "$mode" = extra ]; then
  # gem serve on the device backend (curl smoke), then the decode attention kernels at depth
  # 32768 on the 12B under ncu (their own bytes/s; the warm-up's two steps at depth 0, 192
  # attention and merge launches, skipped).
  log "serve smoke (cuda)"
  bash bench/cuda/serve_smoke.sh $GEM $F/tiny-q4_0.gguf cuda 2>&1 | tee "$OUT/serve_smoke.txt"
  log "synth 12b"
  $GEM synth --profile 12b -q -o $M/g12b.gguf
  log "ncu attention at depth 32768"
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  timeout 300 $NCU --clock-control none --csv \
    --kernel-name regex:"attention_(decode|merge)" --launch-skip 192 --launch-count 192 \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
    $GEM bench -m $M/g12b.gguf -p 0 -n 2 -d 32768 -r 1 --backend cuda > "$OUT/ncu_attn_12b.csv" 2> "$OUT/ncu_attn_12b.err"
  echo "ncu rc=$? lines=$(wc -l < "$OUT/ncu_attn_12b.csv")" | tee -a "$OUT/summary.txt"
  log "done"
  exit 0
fi
if [ "$mode" = dev ]; then
  # Development run: the 12B's figures with PDL on and off, prefill, the CPU parity check, and
  # one per-kernel profile of decode steps (ncu, clocks left alone) for bench/cuda/ncu_steps.py.
  log "synth 12b"
  $GEM synth --profile 12b -q -o $M/g12b.gguf
  log "gem bench 12b decode"
  $GEM bench -m $M/g12b.gguf -p 0 -n 128 -d 0,4096,32768 -r 2 --backend cuda 2>&1 | grep -v "^gem info" | tee "$OUT/gem_12b_tg.txt"
  log "gem bench 12b decode, PDL off"
  GEM_CUDA_PDL=0 $GEM bench -m $M/g12b.gguf -p 0 -n 128 -d 0 -r 2 --backend cuda 2>&1 | grep -v "^gem info" | tee "$OUT/gem_12b_tg_nopdl.txt"
  log "gem bench 12b prefill"
  $GEM bench -m $M/g12b.gguf -p 512,4096 -n 0 -r 2 --backend cuda 2>&1 | grep -v "^gem info" | tee "$OUT/gem_12b_pp.txt"
  parity 12B
  log "ncu decode steps"
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  GEM_CUDA_PDL=0 timeout 240 $NCU --clock-control none --csv --launch-count 1900 \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
    $GEM bench -m $M/g12b.gguf -p 0 -n 3 -d 0 -r 1 --backend cuda > "$OUT/ncu_12b.csv" 2> "$OUT/ncu_12b.err"
  echo "ncu rc=$? lines=$(wc -l < "$OUT/ncu_12b.csv")" | tee -a "$OUT/summary.txt"
  log "done"
  exit 0
fi
[ "$mode" = all ] || exit 0

for p in 12b 31b; do
  log "synth $p"
  $GEM synth --profile $p -q -o $M/g$p.gguf
done
# Nothing else runs while anything is measured (gem's decode measured while llama.cpp compiled
# on 14 cores read 1.4 % low).
if [ "$with_llama" = 1 ]; then
  log "waiting for llama.cpp build"
  wait $llama_pid
  tail -3 /tmp/llama-build.log | tee -a "$OUT/summary.txt"
fi
for p in 12b 31b; do
  log "gem bench $p"
  $GEM bench -m $M/g$p.gguf -p 512,4096 -n 0 -r 3 --backend cuda 2>&1 | grep -v "^gem info" | tee "$OUT/gem_$p.txt"
  $GEM bench -m $M/g$p.gguf -p 0 -n 128 -d 0,4096,32768 -r 3 --backend cuda 2>&1 | grep -v "^gem info" | tee -a "$OUT/gem_$p.txt"
done
for p in 12B 31B; do parity $p; done
[ "$with_llama" = 1 ] || { log "done"; exit 0; }
LB=/tmp/llama-build/bin/llama-bench
for p in 12b 31b; do
  log "llama-bench $p"
  $LB -m $M/g$p.gguf -ngl 99 -r 3 -fa 1 -p 512,4096 -n 0 2>&1 | grep "|" | tee "$OUT/llama_$p.txt"
  $LB -m $M/g$p.gguf -ngl 99 -r 2 -fa 1 -p 0 -n 128 -d 0,4096,32768 2>&1 | grep "|" | tee -a "$OUT/llama_$p.txt"
done
log "done"
