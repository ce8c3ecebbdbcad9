# Run 12, call 2 (prepared in session 9): (a) the register products with 8 Q4_0 blocks per lane
# and round (GEM_CUDA_MV_UNROLL=8; the gated product 4 per matrix): the 31B's 168-block rows
# then take one round instead of two (kernel test variant 10); (b) the gated product writing
# g's q8 form itself from blocks of 32 rows (GEM_CUDA_GATED_Q8=2|4: no quantize launch per
# layer; kernel test GatedWithQ8OutputMatchesGatedThenQuantize checks the bits, backend test
# GatedQ8DecodeMatchesOneTile). Tests, 12B and 31B tg128 at depths 0, 4096, 32768 per line (the
# default first and last), then the synthetic 12B parity with GEM_CUDA_GATED_Q8=4.
SWEEP_FILE=bench/cuda/runs/run12/sweep2_lines.txt SWEEP_31B=1 SWEEP_DEPTHS=0,4096,32768 bash bench/cuda/h200_run.sh sweep > $OUT/run.log 2>&1
source bench/cuda/device_env.sh
GEM_CUDA_GATED_Q8=4 GEM_CUDA_SYNTH_12B=$M/g12b.gguf GEM_SHARED_DIR=$PWD/.device/shared timeout 120 build-dev/tests/cuda/cuda_backend_test --gtest_filter=*Synthetic12B* > $OUT/synth12b_gq8.txt 2>&1
echo "synthetic 12B parity with GEM_CUDA_GATED_Q8=4: rc=$?" | tee -a $OUT/summary.txt
grep -E "PASSED|FAILED|sweep|tg128|copy|parity" $OUT/summary.txt
