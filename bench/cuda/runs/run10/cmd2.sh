# Run 10, call 2: the split tensor-core decode (GEM_CUDA_ATTN_MMA=2, new default) and decode
# buckets on by default: tests (backend also with buckets off and with the old MMA form);
# 12B/31B tg128 @ d0,4096,32768 (one context) per sweep2_lines.txt; 12B timelines at d32768
# without PDL (clean per-kernel durations) per trace2_lines.txt.
SWEEP_FILE=bench/cuda/runs/run10/sweep2_lines.txt SWEEP_31B=1 SWEEP_DEPTHS=0,4096,32768 bash bench/cuda/h200_run.sh sweep > $OUT/run.log 2>&1
for cfg in GEM_CUDA_DECODE_BUCKETS=0 GEM_CUDA_ATTN_MMA=1; do
  env $cfg GEM_SHARED_DIR=$PWD/.device/shared timeout 120 build-dev/tests/cuda/cuda_backend_test --gtest_filter=-*Synthetic* > $OUT/bt_$cfg.txt 2>&1
  echo "backend tests $cfg: rc=$? $(grep -c Failure $OUT/bt_$cfg.txt) failures" | tee -a $OUT/summary.txt
done
TRACE_DEPTH=32768 TRACE_FILE=bench/cuda/runs/run10/trace2_lines.txt bash bench/cuda/trace_steps.sh > /dev/null
grep -E "PASSED|FAILED|sweep|tg128|backend tests|copy" $OUT/summary.txt
grep -E "===|step:|attention|residual|matvec" $OUT/trace.txt | head -60
