# Run 15, call 1 (session 13): the full layers' split tensor-core decode reading only K's rotated
# quarter besides V (AttnArgs::k_shared_w: V is the raw K projection and the proportional RoPE
# turns 64 of 256 pairs, so K = V ⊙ w_k on the other dims; 5/8 of the K/V bytes). Kernel tests of
# the attention (GTEST_FILTER) and the backend tests, then 12B and 31B decode at depths 4096 and
# 32768 per line of sweep1_lines.txt (defaults; GEM_CUDA_ATTN_SHARED_KV=1, off by default until
# measured; with it the 16-key shapes, which then fit two blocks per SM (120 registers, 89 KB), and
# 1 or 4 splits per SM), then the synthetic 12B/31B parity, also with the split form from token 1
# and the shared K/V (Synthetic*SplitDecode). Written in session 13, which had no GPU.
GTEST_FILTER='CudaAttention.*' SWEEP_FILE=bench/cuda/runs/run15/sweep1_lines.txt SWEEP_31B=1 \
  SWEEP_DEPTHS=4096,32768 bash bench/cuda/h200_run.sh sweep > $OUT/run.log 2>&1
grep -E "PASSED|FAILED|sweep|tg128|copy|parity|identical" $OUT/summary.txt
source bench/cuda/device_env.sh
env GEM_SHARED_DIR=$PWD/.device/shared GEM_CUDA_SYNTH_31B=$M/g31b.gguf timeout 200 \
  build-dev/tests/cuda/cuda_backend_test --gtest_filter="*Synthetic31B*" 2>&1 | grep -v "^gem info" | tail -12 | tee $OUT/synth_31B.txt
