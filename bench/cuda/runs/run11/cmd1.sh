# Run 11, call 1 (prepared in session 8, not run yet; bench/cuda/make_device_dir.sh builds the
# carried .device/: carry .device/deps and .device/shared): tests (new: the merge in 32-element
# chunks, the early exit of empty decode splits, the prologue fused into the decode attention —
# kernel test FusedPrologueMatchesSeparateKernels, backend test FusedPrologueDecodeMatchesOneTile
# —, the sliding layers' groups of 2 on the tensor-core forms); 12B/31B tg128 @ d0,4096,32768
# per line of sweep1_lines.txt (~8 min in all).
SWEEP_FILE=bench/cuda/runs/run11/sweep1_lines.txt SWEEP_31B=1 SWEEP_DEPTHS=0,4096,32768 bash bench/cuda/h200_run.sh sweep > $OUT/run.log 2>&1
grep -E "PASSED|FAILED|sweep|tg128|copy" $OUT/summary.txt
