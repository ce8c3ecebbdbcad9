#!/usr/bin/env bash
# Issue 22's figures on the GPU machine (run from the repository root there, .device/deps carried
# as for bench/cuda/h200_run.sh), in steps that fit a call each:
#   bash bench/cuda/h200_batched.sh build   gem, the CUDA tests and the test models; the CUDA
#                                           backend, n-token product, matvec and profiler tests
#                                           (FILTER=gtest-filter limits the backend test)
#   bash bench/cuda/h200_batched.sh 12b     gem synth 12b; gem bench -p 1,2,4,8,16,32,64,512
#                                           -n 128 and --parallel 1..32 -p 512 -n 128; gem profile
#                                           (decode, 8 rows) at depth 0 and 32768
#   bash bench/cuda/h200_batched.sh 31b     the same for the 31B
#   bash bench/cuda/h200_batched.sh serve   issue 28: bench/server/h200_conversation.sh, 12B, no llama
#   bash bench/cuda/h200_batched.sh llama-12b|llama-31b   llama.cpp on the same file, the same
#                                           tests: llama-bench -p 1,2,4,8,16,32,512 -n 128 and
#                                           llama-batched-bench -npp 512 -ntg 128 -npl 1..32
#                                           (binaries from .device/llbin.tar.xz, or built
#                                           there from .device/llama.cpp in about 3 minutes)
#   bash bench/cuda/h200_batched.sh side-12b|side-31b   gem and llama.cpp in one call on one file
#                                           (gem built by the build step): short evals at depth
#                                           (-p 8,32 -n 0 -d 0,4096,16384 -r 3, gem bench and
#                                           llama-bench -fa 1) and batched decode (--parallel 8,32
#                                           -p 512 -n 128 against llama-batched-bench -npl 8,32)
#   bash bench/cuda/h200_batched.sh qat-12b|qat-31b   the same file with a Q6_K head, as Google's
#                                           QAT files tie (gem synth --embedding q6_k): gem bench
#                                           -p 1,8,32 -n 128, gem profile --rows 1 --verify 8
#                                           (the head's µs and bytes/s), gem bench --mtp (its
#                                           assistant, forced 1.0, -v), then llama-bench with the
#                                           same tests
# Logs in $OUT (the device tool's return folder) or /tmp/gem-out.
set -u
step=${1:-build}
OUT=${OUT:-/tmp/gem-out}
mkdir -p "$OUT"
source bench/cuda/device_deps.sh
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/batched.txt"; }
B=build-dev
GEM=$B/bin/gem
M=/tmp/models
mkdir -p $M

# The llama.cpp steps: the synthetic file $p (unless the step made its own, $1) and llama.cpp's
# binaries in $L.
llama_ready() {
  [ -n "${1:-}" ] || [ -f $M/g$p.gguf ] || { log "synth $p"; $GEM synth --profile $p -q -o $M/g$p.gguf >/dev/null 2>&1; }
  LLAMA_TARGETS="llama-bench llama-batched-bench"
  source bench/server/device_build.sh  # llama_pid (GEM is set: gem is not rebuilt)
  [ -n "${llama_pid:-}" ] && wait $llama_pid
  L=/tmp/llama-build/bin
  [ -x $L/llama-bench ] || { log "no llama.cpp binaries (carry .device/llbin.tar.xz)"; exit 1; }
}

case $step in
build)
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee -a "$OUT/batched.txt"
  cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DGEM_CUDA=ON -DGEM_BUILD_BENCH=OFF \
    -DGEM_WERROR=OFF >"$OUT/build.log" 2>&1 &&
    cmake --build $B -j16 --target gem gem_test_models cuda_backend_test matmul_n_test \
      cuda_profile_test speculative_cuda_test drafter_cuda_test cuda_kernels_test >>"$OUT/build.log" 2>&1 || { log "build failed"; grep -E "error" "$OUT/build.log" | head; exit 1; }
  log "built"
  (cd $B && timeout 120 ./tests/cuda/cuda_kernels_test --gtest_filter='CudaMatvec*:CudaDequant*' 2>&1 | grep -E "^\[  (FAILED|PASSED|  OK)|Failure|gpu " | head -30) | tee -a "$OUT/batched.txt"
  for t in matmul_n_test cuda_profile_test; do
    (cd $B && timeout 150 ./tests/cuda/$t 2>&1 | grep -E "^\[  (FAILED|PASSED|  OK)|Failure|Expected|Which" | head -40) | tee -a "$OUT/batched.txt"
  done
  (cd $B && timeout 240 ./tests/cuda/cuda_backend_test --gtest_filter="${FILTER:-*}" >"$OUT/cuda_backend_test.log" 2>&1)
  grep -E "^\[ +(OK|FAILED|PASSED) +\]" "$OUT/cuda_backend_test.log" | tee -a "$OUT/batched.txt"
  grep -E "Failure|first difference" "$OUT/cuda_backend_test.log" | head -20 | tee -a "$OUT/batched.txt"
  ;;
12b|31b)
  p=$step
  [ -f $M/g$p.gguf ] || { log "synth $p"; $GEM synth --profile $p -q -o $M/g$p.gguf >/dev/null 2>&1; }
  log "gem bench $p"
  $GEM bench -m $M/g$p.gguf --backend cuda -p 1,2,4,8,16,32,64,512 -n 128 -r 3 2>/dev/null | grep "|" | tee -a "$OUT/batched.txt"
  log "gem bench $p --parallel (llama-batched-bench's test)"
  $GEM bench -m $M/g$p.gguf --backend cuda --parallel 1,2,4,8,16,32 -p 512 -n 128 2>>"$OUT/profile.log" | grep "|" | tee -a "$OUT/batched.txt"
  for d in 0 32768; do
    log "gem profile $p at depth $d (decode step, 8-row eval)"
    $GEM profile -m $M/g$p.gguf --backend cuda -d $d -c $((d + 512)) --rows 1,8 -n 10 \
      --json-file "$OUT/profile_${p}_d$d.json" >"$OUT/profile_${p}_d$d.md" 2>>"$OUT/profile.log" ||
      log "profile $p d$d failed"
    cat "$OUT/profile_${p}_d$d.md" >>"$OUT/batched.txt"
    $GEM bench -m $M/g$p.gguf --backend cuda -p 0 -n 64 -d $d -c $((d + 512)) -r 2 2>/dev/null | grep "tg64" | tee -a "$OUT/batched.txt"
  done
  ;;
serve)
  GEM=$GEM WITH_LLAMA=0 MODELS=12b bash bench/server/h200_conversation.sh
  ;;
llama-12b|llama-31b)
  p=${step#llama-}
  llama_ready
  log "llama-bench $p"
  $L/llama-bench -m $M/g$p.gguf -ngl 99 -fa 1 -p 1,2,4,8,16,32,512 -n 128 -r 3 2>>"$OUT/llama.log" | grep "|" | tee -a "$OUT/batched.txt"
  log "llama-batched-bench $p"
  $L/llama-batched-bench -m $M/g$p.gguf -ngl 99 -fa on -c 24576 -npp 512 -ntg 128 -npl 1,2,4,8,16,32 \
    2>>"$OUT/llama.log" | grep "|" | tee -a "$OUT/batched.txt"
  ;;
side-12b|side-31b)
  p=${step#side-}
  llama_ready
  log "short evals at depth, $p: gem bench, then llama-bench"
  $GEM bench -m $M/g$p.gguf --backend cuda -p 8,32 -n 0 -d 0,4096,16384 -r 3 2>/dev/null | grep "|" | tee -a "$OUT/batched.txt"
  $L/llama-bench -m $M/g$p.gguf -ngl 99 -fa 1 -p 8,32 -n 0 -d 0,4096,16384 -r 3 2>>"$OUT/llama.log" | grep "|" | tee -a "$OUT/batched.txt"
  log "batched decode, $p: gem bench --parallel, then llama-batched-bench"
  $GEM bench -m $M/g$p.gguf --backend cuda --parallel 8,32 -p 512 -n 128 2>/dev/null | grep "|" | tee -a "$OUT/batched.txt"
  $L/llama-batched-bench -m $M/g$p.gguf -ngl 99 -fa on -c 24576 -npp 512 -ntg 128 -npl 8,32 \
    2>>"$OUT/llama.log" | grep "|" | tee -a "$OUT/batched.txt"
  ;;
qat-12b|qat-31b)
  p=${step#qat-}
  f=$M/g$p-q6k.gguf
  [ -f $f ] || { log "synth $p with a Q6_K head"; $GEM synth --profile $p --embedding q6_k -q -o $f >/dev/null 2>&1; }
  [ -f $M/mtp-g$p-q6k.gguf ] || $GEM synth --assistant-for $f -q -o $M/mtp-g$p-q6k.gguf >/dev/null 2>&1
  log "Q6_K head, $p: gem bench"
  $GEM bench -m $f --backend cuda -p 1,8,32 -n 128 -r 3 2>/dev/null | grep "|" | tee -a "$OUT/batched.txt"
  log "Q6_K head, $p: gem profile (decode step, 8-row verification)"
  $GEM profile -m $f --backend cuda --rows 1 --verify 8 -n 10 >"$OUT/profile_qat_$p.md" 2>>"$OUT/profile.log"
  grep -E "^\| (stage|head|all stages)|^forward" "$OUT/profile_qat_$p.md" | tee -a "$OUT/batched.txt"
  log "Q6_K head, $p: gem bench --mtp, forced 1.0"
  $GEM bench -m $f --backend cuda --mtp $M/mtp-g$p-q6k.gguf -p 512 -n 256 -r 3 --forced-acceptance 1 -v \
    2>/dev/null | grep -E "\||ms" | tee -a "$OUT/batched.txt"
  llama_ready $f
  log "Q6_K head, $p: llama-bench"
  $L/llama-bench -m $f -ngl 99 -fa 1 -p 1,8,32 -n 128 -r 3 2>>"$OUT/llama.log" | grep "|" | tee -a "$OUT/batched.txt"
  ;;
esac
log "$step done"
