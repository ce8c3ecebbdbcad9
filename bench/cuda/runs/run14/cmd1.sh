# Run 14, call 1 (prepared in session 11): the kernel and backend tests of the code changed after
# run 13's last call, none of it run on a GPU yet — the q8 activations use the CPU's formula
# q = rn(v·127/max|v|) (7d425ee; the norm and residual kernel tests now require the CPU's q
# exactly), the fused prologue removed from the decode attention kernels (35e241c) and their
# first K/V copies from one call site (55128d1): PTX 39-60 % smaller; prompt tiles' residual
# epilogues back to one block per row (89e9e65) — then 12B and 31B tg128 at depths 0, 4096, 32768
# per line (the defaults, GEM_CUDA_PDL=1 being the default, first and last; clusters of 8 for
# prompt tiles too, run 13's table configuration: 12B 351.9 / 324.2 / 310.7, 31B 160.1 / 150.9 /
# 139.3; one-block epilogues everywhere), the synthetic 12B parity, then pp4096 per line
# separately (with -d 0: a pp4096 at depth 32768 would enlarge the tg tests' context; run 13:
# 11,033 and 4,549 with prompt clusters, run 11: 11,226 and 4,642 without).
SWEEP_FILE=bench/cuda/runs/run14/sweep1_lines.txt SWEEP_31B=1 SWEEP_DEPTHS=0,4096,32768 bash bench/cuda/h200_run.sh sweep > $OUT/run.log 2>&1
grep -E "PASSED|FAILED|sweep|tg128|copy|parity" $OUT/summary.txt
source bench/cuda/device_env.sh
for p in 12b 31b; do
  while IFS= read -r line; do
    echo "pp $p: $line" | tee -a $OUT/prefill.txt
    env $line $GEM bench -m $M/g$p.gguf -p 4096 -n 0 -r 3 --backend cuda 2>&1 | grep -E "^\| gemma" | tee -a $OUT/prefill.txt
  done < bench/cuda/runs/run14/sweep1_lines.txt
done
