# Run 10, call 5: the full run at the new defaults (decode buckets from 1024 keys; full layers
# at >= 16384 visible keys on the split tensor-core form, 32-key tiles x 2 stages): tests, gem
# and llama.cpp de3ff815 (CUDA, -fa 1) on the same files, synthetic 12B/31B parity; then the
# backend tests with the split form forced on every full layer.
bash bench/cuda/h200_run.sh all > $OUT/run.log 2>&1
GEM_CUDA_ATTN_MMA=2 GEM_SHARED_DIR=$PWD/.device/shared timeout 120 build-dev/tests/cuda/cuda_backend_test --gtest_filter=-*Synthetic* > $OUT/bt_mma2.txt 2>&1
echo "backend tests GEM_CUDA_ATTN_MMA=2: rc=$? $(grep -c Failure $OUT/bt_mma2.txt) failures" | tee -a $OUT/summary.txt
grep -E "PASSED|FAILED|copy|backend tests|llama build" $OUT/summary.txt; cat $OUT/gem_12b.txt $OUT/gem_31b.txt $OUT/llama_12b.txt $OUT/llama_31b.txt 2>/dev/null | grep -E "tg|pp"
