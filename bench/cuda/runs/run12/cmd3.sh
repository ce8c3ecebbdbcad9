# Run 12, call 2 (session 10; cmd1.sh's ncu was not run, cmd2.sh was call 1): decode's residual
# epilogues (a) as cuda::residual_deferred (GEM_CUDA_RES_SPLIT=128|256: many blocks, one block
# reduction, the next norm's factor applied by the Q4_0 products from per-warp partial sums;
# kernel test DeferredResidualFeedsProducts, backend test DeferredResidualDecodeMatchesOneTile)
# and (b) the one-block kernel with 8 or 16 elements per thread (GEM_CUDA_RES_PER: fewer warps
# per block reduction). Tests, 12B and 31B tg128 at depths 0, 4096, 32768 per line, the norm
# kernel tests again with GEM_CUDA_RES_PER=16, and the synthetic 12B parity with RES_SPLIT=256.
SWEEP_FILE=bench/cuda/runs/run12/sweep3_lines.txt SWEEP_31B=1 SWEEP_DEPTHS=0,4096,32768 bash bench/cuda/h200_run.sh sweep > $OUT/run.log 2>&1
source bench/cuda/device_env.sh
GEM_CUDA_RES_PER=16 timeout 60 build-dev/tests/cuda/cuda_kernels_test --gtest_filter=CudaNorm.* > $OUT/norm_per16.txt 2>&1
echo "norm kernel tests with GEM_CUDA_RES_PER=16: rc=$?" | tee -a $OUT/summary.txt
GEM_CUDA_RES_SPLIT=256 GEM_CUDA_SYNTH_12B=$M/g12b.gguf GEM_SHARED_DIR=$PWD/.device/shared timeout 120 build-dev/tests/cuda/cuda_backend_test --gtest_filter=*Synthetic12B* > $OUT/synth12b_split.txt 2>&1
echo "synthetic 12B parity with GEM_CUDA_RES_SPLIT=256: rc=$?" | tee -a $OUT/summary.txt
grep -E "PASSED|FAILED|sweep|tg128|copy|parity|rc=" $OUT/summary.txt
