# Run 9, call 3: products load a round's weights before its activations, the first round's
# before pdl_wait; tests; 12B/31B tg128 @ d0 and d32768 per line of sweep3_lines.txt (PDL in
# decode on/off; parity with GEM_CUDA_PDL=1 in the environment); 12B step timelines.
export GEM_CUDA_PDL=1
SWEEP_FILE=bench/cuda/runs/run9/sweep3_lines.txt SWEEP_31B=1 SWEEP_DEPTHS=0,32768 bash bench/cuda/h200_run.sh sweep > $OUT/run.log 2>&1
unset GEM_CUDA_PDL
TRACE_FILE=bench/cuda/runs/run9/trace3_lines.txt bash bench/cuda/trace_steps.sh > /dev/null
grep -E "PASSED|FAILED|sweep|tg128" $OUT/summary.txt
grep -E "===|step:|matvec|residual|attention|prologue|quantize" $OUT/trace.txt
