# Run 12, call 2 (prepared in session 9): the register products with 8 Q4_0 blocks per lane and
# round (GEM_CUDA_MV_UNROLL=8; the gated product 4 per matrix): the 31B's 168-block rows then
# take one round instead of two (kernel test variant 10 covers it). 12B and 31B tg128 at depths
# 0, 4096, 32768, the default before and after.
SWEEP_FILE=bench/cuda/runs/run12/sweep2_lines.txt SWEEP_31B=1 SWEEP_DEPTHS=0,4096,32768 bash bench/cuda/h200_run.sh sweep > $OUT/run.log 2>&1
grep -E "PASSED|FAILED|sweep|tg128|copy" $OUT/summary.txt
