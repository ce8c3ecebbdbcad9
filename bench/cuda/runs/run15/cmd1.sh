# Run 15, call 1 (written in session 13, which had no GPU): two prepared changes, both off by
# default until measured.
# - GEM_CUDA_ATTN_SHARED_KV=1: the full layers' split tensor-core decode reads only K's rotated
#   quarter besides V (V is the raw K projection and the proportional RoPE turns 64 of 256 pairs,
#   so K = V ⊙ w_k on the other dims: 5/8 of the K/V bytes); with it the 16-key shapes fit two
#   blocks per SM (120 registers, 68-89 KB).
# - GEM_CUDA_RES_ONEPASS=1: each residual epilogue's two norms from one reduction
#   (Σa², Σx², Σx·u, Σu² together; 96 epilogues per 12B step).
# Kernel tests of the attention and the norms (GTEST_FILTER), the backend tests, then 12B and
# 31B tg128 at depths 0, 4096 and 32768 per line of sweep1_lines.txt, then the synthetic 12B
# parities (default, split form with shared K/V, one-pass residual) and the 31B's.
GTEST_FILTER='CudaAttention.*:CudaNorm.*' SWEEP_FILE=bench/cuda/runs/run15/sweep1_lines.txt SWEEP_31B=1 \
  SWEEP_DEPTHS=0,4096,32768 bash bench/cuda/h200_run.sh sweep > $OUT/run.log 2>&1
grep -E "PASSED|FAILED|sweep|tg128|copy|parity|identical" $OUT/summary.txt
source bench/cuda/device_env.sh
env GEM_SHARED_DIR=$PWD/.device/shared GEM_CUDA_SYNTH_31B=$M/g31b.gguf timeout 200 \
  build-dev/tests/cuda/cuda_backend_test --gtest_filter="*Synthetic31B*" 2>&1 | grep -v "^gem info" | tail -12 | tee $OUT/synth_31B.txt
