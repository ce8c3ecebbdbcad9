# Run 14, call 3: the table run at 9312a7d (the q8 formula, the decode attention kernels' smaller
# code, prompt tiles' epilogues in one block, the float4 merge with its chunk rule).
bash bench/cuda/h200_run.sh all > $OUT/run.log 2>&1
grep -E "PASSED|FAILED|copy|parity|rc=" $OUT/summary.txt
