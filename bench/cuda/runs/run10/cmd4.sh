# Run 10, call 4: build only (tests ran in call 3 on the same code); 12B and 31B tg128 @ d32768
# per line of sweep4_lines.txt (split tensor-core form, shapes 16x4 and 32x2, 1 or 2 splits per
# SM, against the whole-S form).
bash bench/cuda/h200_run.sh build > $OUT/run.log 2>&1
source bench/cuda/device_env.sh
$GEM synth --profile 12b -q -o $M/g12b.gguf; $GEM synth --profile 31b -q -o $M/g31b.gguf
while IFS= read -r line; do
  for p in 12b 31b; do
    echo "$p $line $(env $line $GEM bench -m $M/g$p.gguf -p 0 -n 128 -d 32768 -r 2 --backend cuda 2>&1 | grep -E '^\| gemma' | cut -d'|' -f8,9,10)" | tee -a $OUT/sweep4.txt
  done
done < bench/cuda/runs/run10/sweep4_lines.txt
