# Run 14, call 1 (prepared in session 11): the kernel and backend tests of 7d425ee and after —
# the q8 activations now use the CPU's formula q = rn(v·127/max|v|) (not yet run on a GPU; the
# norm and residual kernel tests now require the CPU's q exactly) — then 12B and 31B tg128 at
# depths 0, 4096, 32768 with the defaults (compare with run 13 call 3: 12B 351.9 / 324.2 / 310.7,
# 31B 160.1 / 150.9 / 139.3) and once more with one-block residual epilogues, then the
# synthetic 12B parity.
SWEEP_FILE=bench/cuda/runs/run14/sweep1_lines.txt SWEEP_31B=1 SWEEP_DEPTHS=0,4096,32768 bash bench/cuda/h200_run.sh sweep > $OUT/run.log 2>&1
grep -E "PASSED|FAILED|sweep|tg128|copy|parity" $OUT/summary.txt
