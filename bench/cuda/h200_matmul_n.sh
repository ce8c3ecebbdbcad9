#!/usr/bin/env bash
# One GPU-machine call for the n-token products (src/backend/cuda/matmul_n.cuh), run from the
# repository root: builds only matmul_n_test and gem_matmul_n_bench, runs the test, then the
# benchmark. Logs, the test's output and the benchmark's table and CSV go to $OUT (the device
# tool's return folder) or /tmp/gem-out.
#   bash bench/cuda/h200_matmul_n.sh [all|test|bench] [benchmark arguments, e.g. --quick]
# MMN_PREBUILT may name a folder holding both binaries built elsewhere: they are used when they
# load on this machine, else the script builds them here.
set -u
mode=${1:-all}
[ $# -gt 0 ] && shift
OUT=${OUT:-/tmp/gem-out}
mkdir -p "$OUT"
source bench/cuda/device_deps.sh
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/summary.txt"; }

nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem,driver_version --format=csv | tee -a "$OUT/summary.txt"

TEST=build-mmn/tests/cuda/matmul_n_test
BENCH=build-mmn/bin/gem_matmul_n_bench
if [ -n "${MMN_PREBUILT:-}" ] && "$MMN_PREBUILT/matmul_n_test" --gtest_list_tests >/dev/null 2>&1 &&
   ! ldd "$MMN_PREBUILT/gem_matmul_n_bench" | grep -q "not found"; then
  log "using the binaries of $MMN_PREBUILT"
  TEST=$MMN_PREBUILT/matmul_n_test
  BENCH=$MMN_PREBUILT/gem_matmul_n_bench
else
  log "configure"
  cmake -S . -B build-mmn -G Ninja -DCMAKE_BUILD_TYPE=Release -DGEM_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DGEM_BUILD_BENCH=ON -DGEM_WERROR=OFF >"$OUT/build.log" 2>&1 ||
    { log "configure failed"; tail -30 "$OUT/build.log"; exit 1; }
  log "build"
  cmake --build build-mmn -j16 --target matmul_n_test gem_matmul_n_bench >>"$OUT/build.log" 2>&1 ||
    { log "build failed"; grep -E "error|FAILED" "$OUT/build.log" | head -20; exit 1; }
  log "built"
fi
# Registers, shared memory and spills of the products' kernels.
cuobjdump --dump-resource-usage "$BENCH" 2>/dev/null | grep -A1 -E "mma_kernel|dp4a_kernel|matvec_q_kernel" |
  grep -oE "(Function [^ ]+|REG:[0-9]+|STACK:[0-9]+|SHARED:[0-9]+|LOCAL:[0-9]+)" | paste - - - - - >"$OUT/resources.txt"

if [ "$mode" = all ] || [ "$mode" = test ]; then
  log "matmul_n_test"
  timeout 120 "$TEST" >"$OUT/test_full.txt" 2>&1
  echo "test rc=$?" | tee -a "$OUT/summary.txt"
  { grep -E -A6 "Failure" "$OUT/test_full.txt" | head -80; grep -E "^\[ +(OK|FAILED|PASSED|SKIPPED) " "$OUT/test_full.txt"; } >"$OUT/test.txt"
  tail -4 "$OUT/test.txt" | tee -a "$OUT/summary.txt"
  head -c 200000 "$OUT/test_full.txt" >"$OUT/test_head.txt"
  rm -f "$OUT/test_full.txt"
fi
if [ "$mode" = all ] || [ "$mode" = bench ]; then
  log "gem_matmul_n_bench $*"
  timeout 150 "$BENCH" --csv "$OUT/bench.csv" "$@" 2>&1 | tee "$OUT/bench.txt" | tail -n 40
fi
log "done"
