# Run 13, call 2: call 1's two kernel-test failures were the tests' own (the expected path
# ignored GEM_CUDA_ATTN_MMA=0; the fused prologue's f32 tolerance was relative to a value that
# RoPE can cancel to near zero): those two tests again with the fixes. Then, with the lean
# attention on (call 1: 12B +2.4-3.6 %), the sliding layers' 16-key splits at 4 or 8 blocks
# per SM and the residual clusters of 4 and 8; 12B and 31B tg128 at depths 0, 4096, 32768.
bash bench/cuda/h200_run.sh build > $OUT/run.log 2>&1
source bench/cuda/device_env.sh
timeout 200 build-dev/tests/cuda/cuda_kernels_test \
  --gtest_filter='CudaAttention.DecodeKernelSharesKvTilesAcrossTheGroup:CudaAttention.FusedPrologueMatchesSeparateKernels' \
  2>&1 | grep -vE "^gem info" > /tmp/kt.txt
{ grep -E -A6 "Failure" /tmp/kt.txt | head -60; tail -12 /tmp/kt.txt; } > $OUT/kernels_test.txt
tail -4 $OUT/kernels_test.txt
for p in 12b 31b; do
  $GEM synth --profile $p -q -o $M/g$p.gguf
  while IFS= read -r line; do
    [ -z "$line" ] && continue
    echo "sweep $p: $line" | tee -a $OUT/sweep.txt
    env $line $GEM bench -m $M/g$p.gguf -p 0 -n 128 -d 0,4096,32768 -r 2 --backend cuda 2>&1 \
      | grep -E "^\|" | tail -3 | tee -a $OUT/sweep.txt
  done < bench/cuda/runs/run13/sweep2_lines.txt
done
