# Run 8, call 4: tests (product variants with staged activations; q8 with warp reductions) and
# 12B parity with GEM_CUDA_MV_XSMEM=1 in the environment; 12B/31B tg128 @ d0 per line of
# sweep4_lines.txt; then 12B step timelines per line of trace4_lines.txt.
export GEM_CUDA_MV_XSMEM=1
SWEEP_FILE=bench/cuda/runs/run8/sweep4_lines.txt SWEEP_31B=1 bash bench/cuda/h200_run.sh sweep > $OUT/run.log 2>&1
unset GEM_CUDA_MV_XSMEM
TRACE_FILE=bench/cuda/runs/run8/trace4_lines.txt bash bench/cuda/trace_steps.sh > /dev/null
grep -E "PASSED|FAILED|sweep|tg128" $OUT/summary.txt
grep -E "===|step:|matvec|residual|attention|prologue|quantize" $OUT/trace.txt
