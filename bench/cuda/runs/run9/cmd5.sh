# Run 9, call 5: the full run at the new defaults (GEM_CUDA_PDL=1, products preload their first
# weights before pdl_wait, plain activation loads): tests, gem and llama.cpp on the same files,
# synthetic 12B/31B parity.
bash bench/cuda/h200_run.sh all > $OUT/run.log 2>&1
grep -E "PASSED|FAILED|copy" $OUT/summary.txt; cat $OUT/gem_12b.txt $OUT/gem_31b.txt $OUT/llama_12b.txt $OUT/llama_31b.txt 2>/dev/null | grep -E "tg|pp"
