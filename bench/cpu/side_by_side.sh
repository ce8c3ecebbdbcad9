#!/usr/bin/env bash
# gem vs llama.cpp on the CPU, same file, same threads, back to back (issue 4's table):
#   bench/cpu/side_by_side.sh MODEL.gguf LLAMA_BENCH [THREADS]
# pp128 and pp512 at depth 0, tg16 at depth 0 and 4096 (each engine fills 4096 tokens first,
# ~15 min apiece on 2 cores; SKIP_D4096=1 leaves that pair out), one repetition each. Run it on an otherwise idle machine; it prints
# the read bandwidth measured in the same minutes and the load average before each run.
set -eu
model=$1 llama=$2 threads=${3:-2}
gem=${GEM:-build/bin/gem}
mbench=${MATMUL_BENCH:-build/bench/cpu/gem_cpu_matmul_bench}
stamp() { echo "## $(date -u +%T) load: $(cut -d' ' -f1-3 /proc/loadavg) :: $*"; }
echo "# commit $(git rev-parse --short HEAD), $(nproc) cores, threads $threads, model $model"
if [ -x "$mbench" ]; then
  stamp "read bandwidth"
  "$mbench" --threads "$threads" --only none 2>&1 | grep bandwidth
fi
stamp "gem pp128,pp512 tg16 @ d0"
"$gem" bench -m "$model" -p 128,512 -n 16 -d 0 -r 1 --backend cpu -t "$threads" 2>&1 | grep "|"
stamp "llama.cpp pp128,pp512 tg16 @ d0"
"$llama" -m "$model" -t "$threads" -p 128,512 -n 16 -d 0 -r 1 2>&1 | grep "|"
if [ "${SKIP_D4096:-0}" = 1 ]; then stamp "done (d4096 skipped)"; exit 0; fi
stamp "gem tg16 @ d4096"
"$gem" bench -m "$model" -p 0 -n 16 -d 4096 -r 1 --backend cpu -t "$threads" 2>&1 | grep "|"
stamp "llama.cpp tg16 @ d4096"
"$llama" -m "$model" -t "$threads" -p 0 -n 16 -d 4096 -r 1 2>&1 | grep "|"
stamp "done"
