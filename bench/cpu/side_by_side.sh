#!/usr/bin/env bash
# gem vs llama.cpp on the CPU, same file, same threads, back to back (issues 4 and 27):
#   bench/cpu/side_by_side.sh MODEL.gguf LLAMA_BENCH [THREADS]
# pp128 and pp512 and tg16 at depth 0, then tg16 at depth 4096 (each engine fills 4096 tokens
# first; SKIP_D4096=1 leaves that pair out, ONLY_D4096=1 runs only it), one repetition each
# (REPS=n for more). Prints the read bandwidth measured in the same minutes, the load average
# before each run and each engine's CPU seconds (user + sys; on a shared machine the CPU time an
# engine got matters as much as its wall time). GEM_CPU_ISA=avx2 in the environment forces
# gem's AVX2 path (llama.cpp keeps its native build).
set -eu
model=$1 llama=$2 threads=${3:-2}
reps=${REPS:-1}
gem=${GEM:-build/bin/gem}
mbench=${MATMUL_BENCH:-build/bench/cpu/gem_cpu_matmul_bench}
stamp() { echo "## $(date -u +%T) load: $(cut -d' ' -f1-3 /proc/loadavg) :: $*"; }
timed() { /usr/bin/time -f "## cpu: %U s user + %S s sys, %e s wall, max RSS %M KB" "$@"; }
echo "# commit $(git rev-parse --short HEAD), $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)), threads $threads, model $model, GEM_CPU_ISA=${GEM_CPU_ISA:-}"
if [ -x "$mbench" ]; then
  stamp "read bandwidth"
  "$mbench" --threads "$threads" --only none 2>&1 | grep -E "bandwidth|path"
fi
if [ "${ONLY_D4096:-0}" != 1 ]; then
  stamp "gem pp128,pp512 tg16 @ d0"
  timed "$gem" bench -m "$model" -p 128,512 -n 16 -d 0 -r "$reps" --backend cpu -t "$threads" 2>&1 | grep -E "\||kernels|packed|## cpu"
  stamp "llama.cpp pp128,pp512 tg16 @ d0"
  timed "$llama" -m "$model" -t "$threads" -p 128,512 -n 16 -d 0 -r "$reps" 2>&1 | grep -E "\||## cpu"
fi
if [ "${SKIP_D4096:-0}" = 1 ]; then stamp "done (d4096 skipped)"; exit 0; fi
stamp "gem tg16 @ d4096"
timed "$gem" bench -m "$model" -p 0 -n 16 -d 4096 -r "$reps" --backend cpu -t "$threads" 2>&1 | grep -E "\||kernels|## cpu"
stamp "llama.cpp tg16 @ d4096"
timed "$llama" -m "$model" -t "$threads" -p 0 -n 16 -d 4096 -r "$reps" 2>&1 | grep -E "\||## cpu"
stamp "done"
