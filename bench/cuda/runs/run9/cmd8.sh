# Run 9, call 8: decode with a context sized for each depth alone (as llama-bench sizes it),
# not for the largest test of the run (calls 5 and 7: one 32,896-position context for all).
source bench/cuda/device_env.sh
for p in 12b 31b; do
  for d in 0 4096; do
    $GEM bench -m $M/g$p.gguf -p 0 -n 128 -d $d -r 3 --backend cuda 2>&1 | grep -E '^\| gemma' | tee -a $OUT/gem_tg_own_ctx.txt
  done
done
