# Run 9, call 1: tests, then 12B/31B tg128 @ d0 per line of sweep1_lines.txt (L2 prefetch
# budgets; parity with GEM_CUDA_L2PF_MB=24 in the environment), then 12B step timelines.
export GEM_CUDA_L2PF_MB=24
SWEEP_FILE=bench/cuda/runs/run9/sweep1_lines.txt SWEEP_31B=1 bash bench/cuda/h200_run.sh sweep > $OUT/run.log 2>&1
TRACE_FILE=bench/cuda/runs/run9/trace1_lines.txt bash bench/cuda/trace_steps.sh > /dev/null
grep -E "PASSED|FAILED|sweep|tg128" $OUT/summary.txt
grep -E "===|step:|matvec|residual|attention|prologue|quantize|l2_pref" $OUT/trace.txt
