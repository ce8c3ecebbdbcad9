#!/usr/bin/env bash
# Issue 23's CUDA figures on the GPU machine (run from the repository root there, .device/deps
# carried as for bench/cuda/h200_run.sh), in steps, one or several a call (in order:
# `bash bench/cuda/h200_mtp.sh build 12b 31b`; a fresh machine has no build):
#   bash bench/cuda/h200_mtp.sh build   gem, the test models and the CUDA MTP tests; runs the
#                                       drafter test (CUDA drafter vs CPU drafter, device-side
#                                       drafting, hidden rows) and the lossless test (greedy with
#                                       drafting = greedy without) on the tiny fixtures
#   bash bench/cuda/h200_mtp.sh 12b     gem synth 12b and its assistant (--assistant-for); the
#                                       same two tests on them; gem bench --mtp: plain decode, the
#                                       random assistant and forced acceptance 1.0/0.9/0.7/0.5 in
#                                       one run, with the round's parts (-v); then sampled
#                                       (--temp 0.8): plain and the random assistant; then
#                                       forced 1.0 with a Q8_0 assistant (--matrices q8_0, the
#                                       type of most public assistant files)
#   bash bench/cuda/h200_mtp.sh 31b     the same for the 31B
# Logs in $OUT (the device tool's return folder) or /tmp/gem-out: mtp.txt (the summary), build.log.
set -u
OUT=${OUT:-/tmp/gem-out}
mkdir -p "$OUT"
source bench/cuda/device_deps.sh
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/mtp.txt"; }
B=build-dev
GEM=$B/bin/gem
M=/tmp/models
mkdir -p $M
results() { grep -E "^\[  (FAILED|PASSED|  OK|SKIPPED)|Failure|Expected|Which|rel L2|drafted|DIFFERS|equals"; }

for step in "${@:-build}"; do
case $step in
build)
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee -a "$OUT/mtp.txt"
  cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DGEM_CUDA=ON -DGEM_BUILD_BENCH=OFF \
    -DGEM_WERROR=OFF >"$OUT/build.log" 2>&1 &&
    cmake --build $B -j16 --target gem gem_test_models drafter_cuda_test speculative_cuda_test \
      >>"$OUT/build.log" 2>&1 || { log "build failed"; grep -E "error" "$OUT/build.log" | head; exit 1; }
  log "built"
  for t in drafter_cuda_test speculative_cuda_test; do
    (cd $B && timeout 240 ./tests/cuda/$t 2>&1 | results | head -80) | tee -a "$OUT/mtp.txt"
  done
  ;;
12b|31b)
  p=$step
  P=$(echo $p | tr a-z A-Z)
  [ -f $M/g$p.gguf ] || { log "synth $p"; $GEM synth --profile $p -q -o $M/g$p.gguf >/dev/null 2>&1; }
  [ -f $M/mtp-g$p.gguf ] || { log "synth the $p assistant"; $GEM synth --assistant-for $M/g$p.gguf -q -o $M/mtp-g$p.gguf >/dev/null 2>&1; }
  export GEM_CUDA_SYNTH_$P=$M/g$p.gguf GEM_CUDA_SYNTH_${P}_MTP=$M/mtp-g$p.gguf
  log "drafter and lossless tests on the $p"
  for t in drafter_cuda_test speculative_cuda_test; do
    (cd $B && timeout 300 ./tests/cuda/$t --gtest_filter="*Synthetic$P" 2>&1 | results | head -60) | tee -a "$OUT/mtp.txt"
  done
  log "gem bench --mtp $p: plain, the random assistant, forced acceptance 1.0/0.9/0.7/0.5"
  $GEM bench -m $M/g$p.gguf --backend cuda -p 512 -n 256 -r 3 --mtp $M/mtp-g$p.gguf \
    --forced-acceptance 1,0.9,0.7,0.5 -v 2>>"$OUT/bench.log" | tee -a "$OUT/mtp.txt"
  log "gem bench --mtp $p sampled (--temp 0.8): plain and the random assistant"
  $GEM bench -m $M/g$p.gguf --backend cuda -p 512 -n 256 -r 3 --mtp $M/mtp-g$p.gguf \
    --temp 0.8 -v 2>>"$OUT/bench.log" | grep "temp" | tee -a "$OUT/mtp.txt"
  [ -f $M/mtp8-g$p.gguf ] || $GEM synth --assistant-for $M/g$p.gguf --matrices q8_0 -q -o $M/mtp8-g$p.gguf >/dev/null 2>&1
  log "gem bench --mtp $p with a Q8_0 assistant: forced acceptance 1.0"
  $GEM bench -m $M/g$p.gguf --backend cuda -p 512 -n 256 -r 3 --mtp $M/mtp8-g$p.gguf \
    --forced-acceptance 1 -v 2>>"$OUT/bench.log" | grep -E "forced|plain" | tee -a "$OUT/mtp.txt"
  ;;
*) log "unknown step $step (build, 12b, 31b)"; exit 2 ;;
esac
log "$step done"
done
