#!/usr/bin/env bash
# gem vs llama.cpp on the CPU, same file, same threads, back to back (issues 4 and 27):
#   bench/cpu/side_by_side.sh MODEL.gguf LLAMA_BENCH [THREADS]
# For each depth (DEPTHS, default "0 4096"): pp128, pp512 and tg16 with gem, then with
# llama.cpp (llama-bench -d: each test fills the depth first, untimed), one repetition each
# (REPS=n for more). Around every engine run it prints the UTC time, the load average and the
# host's read bandwidth (gem_cpu_matmul_bench, 1 and 2 threads), so each figure has a bandwidth
# and a load from the same minutes; after each run the engine's CPU seconds (user + sys: on a
# shared machine the CPU time an engine got matters as much as its wall time) and wall time.
# GEM_CPU_ISA=avx2 in the environment forces gem's AVX2 path (llama.cpp keeps its native build).
# SKIP_D4096=1 is DEPTHS=0, ONLY_D4096=1 is DEPTHS=4096.
# Run time on the 2-vCPU Zen 5 host, idle, synthetic 12B: depth 0 about 6 min (both engines,
# gem's 7.2 GB repack included), depth 4096 about 35 min (each engine fills 4096 tokens three
# times, once per test).
set -eu
model=$1 llama=$2 threads=${3:-2}
reps=${REPS:-1}
gem=${GEM:-build/bin/gem}
mbench=${MATMUL_BENCH:-build/bench/cpu/gem_cpu_matmul_bench}
depths=${DEPTHS:-0 4096}
[ "${SKIP_D4096:-0}" = 1 ] && depths=0
[ "${ONLY_D4096:-0}" = 1 ] && depths=4096
stamp() { echo "## $(date -u +%T) load: $(cut -d' ' -f1-3 /proc/loadavg) :: $*"; }
timed() { /usr/bin/time -f "## cpu: %U s user + %S s sys, %e s wall, max RSS %M KB" "$@"; }
bandwidth() {
  if [ -x "$mbench" ]; then
    stamp "read bandwidth"
    "$mbench" --threads "$threads" --only none 2>&1 | grep -E "^bandwidth"
  fi
}
echo "# commit $(git rev-parse --short HEAD), $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)), threads $threads, model $model, depths $depths, reps $reps, GEM_CPU_ISA=${GEM_CPU_ISA:-}"
echo "# cpu flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|fma|f16c|avx512f|avx512bw|avx512vl|avx512_vnni|avx512_bf16|avx_vnni)$' | tr '\n' ' ')"
for d in $depths; do
  bandwidth
  stamp "gem pp128,pp512,tg16 @ d$d"
  timed "$gem" bench -m "$model" -p 128,512 -n 16 -d "$d" -r "$reps" --backend cpu -t "$threads" 2>&1 |
    grep -E "\||kernels|packed|## cpu"
  bandwidth
  stamp "llama.cpp pp128,pp512,tg16 @ d$d"
  timed "$llama" -m "$model" -t "$threads" -p 128,512 -n 16 -d "$d" -r "$reps" 2>&1 | grep -E "\||## cpu"
done
bandwidth
stamp "done"
