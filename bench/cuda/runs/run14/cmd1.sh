# Run 14, call 1 (prepared in session 11): the kernel and backend tests of the code changed after
# run 13's last call, none of it run on a GPU yet — the q8 activations use the CPU's formula
# q = rn(v·127/max|v|) (7d425ee; the norm and residual kernel tests now require the CPU's q
# exactly), the fused prologue removed from the decode attention kernels (35e241c) and their
# first K/V copies from one call site (55128d1): PTX 39-60 % smaller — then 12B and 31B tg128 at
# depths 0, 4096, 32768 with the defaults (compare with run 13 call 3: 12B 351.9 / 324.2 / 310.7,
# 31B 160.1 / 150.9 / 139.3) and once more with one-block residual epilogues, then the
# synthetic 12B parity.
SWEEP_FILE=bench/cuda/runs/run14/sweep1_lines.txt SWEEP_31B=1 SWEEP_DEPTHS=0,4096,32768 bash bench/cuda/h200_run.sh sweep > $OUT/run.log 2>&1
grep -E "PASSED|FAILED|sweep|tg128|copy|parity" $OUT/summary.txt
