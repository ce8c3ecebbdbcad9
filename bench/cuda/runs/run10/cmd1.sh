# Run 10, call 1: tests; backend tests with the decode buckets on; 12B/31B tg128 @ d0,4096,32768
# (one context) per line of sweep1_lines.txt (buckets off/on); 12B step timelines at d0 and d32768.
SWEEP_FILE=bench/cuda/runs/run10/sweep1_lines.txt SWEEP_31B=1 SWEEP_DEPTHS=0,4096,32768 bash bench/cuda/h200_run.sh sweep > $OUT/run.log 2>&1
GEM_SHARED_DIR=$PWD/.device/shared GEM_CUDA_DECODE_BUCKETS=1 timeout 120 build-dev/tests/cuda/cuda_backend_test --gtest_filter=-*Synthetic* > $OUT/bt_buckets.txt 2>&1
echo "backend tests BUCKETS=1: rc=$? $(grep -c Failure $OUT/bt_buckets.txt) failures" | tee -a $OUT/summary.txt
for d in 0 32768; do TRACE_DEPTH=$d TRACE_FILE=bench/cuda/runs/run10/trace1_lines.txt bash bench/cuda/trace_steps.sh > /dev/null; done
grep -E "PASSED|FAILED|sweep|tg128|backend tests|copy" $OUT/summary.txt
grep -E "===|step:|matvec|residual|attention|prologue|quantize|merge|norm|head|sample" $OUT/trace.txt | head -80
