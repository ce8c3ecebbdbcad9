# Run 10, call 3: the split tensor-core decode in four tile shapes (16x3 default, ~100 KB of
# shared memory, like the whole-S form): kernel tests run every shape; 12B tg128 @ d0,4096,32768
# per line of sweep3_lines.txt, the 31B for lines 1-3 and 6.
bash bench/cuda/h200_run.sh test > $OUT/run.log 2>&1
source bench/cuda/device_env.sh
$GEM synth --profile 12b -q -o $M/g12b.gguf; $GEM synth --profile 31b -q -o $M/g31b.gguf
n=0
while IFS= read -r line; do
  n=$((n + 1))
  for p in 12b 31b; do
    [ $p = 31b ] && { [ $n = 4 ] || [ $n = 5 ]; } && continue
    echo "sweep $p: $line" | tee -a $OUT/sweep3.txt
    env $line $GEM bench -m $M/g$p.gguf -p 0 -n 128 -d 0,4096,32768 -r 2 --backend cuda 2>&1 | grep -E "^\|" | tee -a $OUT/sweep3.txt
  done
done < bench/cuda/runs/run10/sweep3_lines.txt
grep -E "PASSED|FAILED|copy" $OUT/summary.txt
