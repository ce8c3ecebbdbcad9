# Run 13, call 1 (prepared in session 10): (a) the residual epilogues as clusters of 2, 4 or 8
# blocks per row (GEM_CUDA_RES_CLUSTER; run 12 call 6 found the one-block kernel partly
# issue-bound on its SM, 30 warps with "not selected" as the top stall); (b) the CUDA-core decode
# attention's lean form (GEM_CUDA_ATTN_LEAN=1: fewer instructions per warp; the sliding layers
# run on it). Kernel tests (RmsNormAndQ8Copy and ResidualEpilogues run every cluster form against
# the CPU; DecodeKernelSharesKvTilesAcrossTheGroup the lean form), backend tests
# (ClusteredResidualDecodeMatchesOneTile, LeanDecodeAttentionMatchesOneTile), 12B and 31B tg128
# at depths 0, 4096, 32768 per line, then the synthetic 12B parity with both on. ~9 min with
# the tests: clusters of 8 are tested but left out of the sweep (add a call if 4 wins).
SWEEP_FILE=bench/cuda/runs/run13/sweep1_lines.txt SWEEP_31B=1 SWEEP_DEPTHS=0,4096,32768 bash bench/cuda/h200_run.sh sweep > $OUT/run.log 2>&1
source bench/cuda/device_env.sh
GEM_CUDA_ATTN_LEAN=1 GEM_CUDA_RES_CLUSTER=4 GEM_CUDA_SYNTH_12B=$M/g12b.gguf GEM_SHARED_DIR=$PWD/.device/shared timeout 120 build-dev/tests/cuda/cuda_backend_test --gtest_filter=*Synthetic12B* > $OUT/synth12b_lean_cluster4.txt 2>&1
echo "synthetic 12B parity with GEM_CUDA_ATTN_LEAN=1 GEM_CUDA_RES_CLUSTER=4: rc=$?" | tee -a $OUT/summary.txt
grep -E "PASSED|FAILED|sweep|tg128|copy|parity" $OUT/summary.txt
