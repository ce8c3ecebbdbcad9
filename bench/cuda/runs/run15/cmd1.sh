# Run 15, call 1 (session 13): the full layers' split tensor-core decode reading only K's rotated
# quarter besides V (AttnArgs::k_shared_w: V is the raw K projection and the proportional RoPE
# turns 64 of 256 pairs, so K = V ⊙ w_k on the other dims; 5/8 of the K/V bytes). Kernel tests of
# the attention (GTEST_FILTER) and the backend tests, then 12B and 31B decode at depths 4096 and
# 32768 per line of sweep1_lines.txt (shared on by default; off; the 16-key shapes, which now fit
# two blocks per SM), then the synthetic 12B/31B parity, also with the split form from token 1.
GTEST_FILTER='CudaAttention.*' SWEEP_FILE=bench/cuda/runs/run15/sweep1_lines.txt SWEEP_31B=1 \
  SWEEP_DEPTHS=4096,32768 bash bench/cuda/h200_run.sh sweep > $OUT/run.log 2>&1
grep -E "PASSED|FAILED|sweep|tg128|copy|parity|identical" $OUT/summary.txt
source bench/cuda/device_env.sh
for p in 31B; do
  env GEM_SHARED_DIR=$PWD/.device/shared GEM_CUDA_SYNTH_$p=$M/g31b.gguf timeout 200 \
    build-dev/tests/cuda/cuda_backend_test --gtest_filter="*Synthetic$p*" 2>&1 | grep -v "^gem info" | tail -12 | tee $OUT/synth_31B.txt
done
