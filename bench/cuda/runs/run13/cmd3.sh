# Run 13, call 3: the table run at 836fac3 (lean decode attention, residual clusters of 8).
bash bench/cuda/h200_run.sh all > $OUT/run.log 2>&1
grep -E "PASSED|FAILED|copy|parity|rc=" $OUT/summary.txt
