# Run 11, call 3 (session 9): the decode attention's first K/V copies issued before pdl_wait by
# every block whose range does not hold the token (GEM_CUDA_ATTN_EARLY_KV, default on): kernel
# and backend tests (the backend suite runs under PDL, so a block that read the token's slot
# early would fail DecodeBucketsMatchOneTile), the backend tests again with the split
# tensor-core form forced, then 12B/31B tg128 @ d0,4096,32768 per line of sweep3_lines.txt.
SWEEP_FILE=bench/cuda/runs/run11/sweep3_lines.txt SWEEP_31B=1 SWEEP_DEPTHS=0,4096,32768 bash bench/cuda/h200_run.sh sweep > $OUT/run.log 2>&1
source bench/cuda/device_env.sh
GEM_CUDA_ATTN_MMA=2 GEM_SHARED_DIR=$PWD/.device/shared timeout 120 build-dev/tests/cuda/cuda_backend_test --gtest_filter=-*Synthetic* > $OUT/bt_mma2.txt 2>&1
echo "backend tests GEM_CUDA_ATTN_MMA=2: rc=$? $(grep -c Failure $OUT/bt_mma2.txt) failures" | tee -a $OUT/summary.txt
grep -E "PASSED|FAILED|sweep|tg128|copy|backend tests" $OUT/summary.txt
