# Run 9, call 2: tests (matvec variants 10/11 with block-row and next-product prefetches), then
# 12B/31B tg128 @ d0 per line of sweep2_lines.txt (parity with GEM_CUDA_L2PF_MB=16
# GEM_CUDA_MV_SELFPF=1 in the environment), then 12B step timelines per trace2_lines.txt.
export GEM_CUDA_L2PF_MB=16 GEM_CUDA_MV_SELFPF=1
SWEEP_FILE=bench/cuda/runs/run9/sweep2_lines.txt SWEEP_31B=1 bash bench/cuda/h200_run.sh sweep > $OUT/run.log 2>&1
unset GEM_CUDA_L2PF_MB GEM_CUDA_MV_SELFPF
TRACE_FILE=bench/cuda/runs/run9/trace2_lines.txt bash bench/cuda/trace_steps.sh > /dev/null
grep -E "PASSED|FAILED|sweep|tg128" $OUT/summary.txt
grep -E "===|step:|matvec|residual|attention|prologue|quantize" $OUT/trace.txt
