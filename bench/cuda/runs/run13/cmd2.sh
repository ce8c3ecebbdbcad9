# Run 13, call 2 (prepared in session 10; after call 1, whose tests cover these settings:
# DecodeKernelSharesKvTilesAcrossTheGroup with 16-key splits on every decode form, backend test
# ShortRingSplitsDecodeMatchesOneTile): more, shorter splits for the sliding layers only —
# 16-key splits (GEM_CUDA_SPLIT_MIN_KEYS=16: one tile per CUDA-core block) at 4 or 8 blocks per
# SM (GEM_CUDA_RING_SPLITS_PER_SM; the full layers keep 2). Run 12's ncu found the sliding
# attention's blocks latency-bound with ~2 blocks per SM; the 12B's sliding layers are capped
# at 32-33 splits today. No tests here (call 1 ran them on the same code); 12B and 31B tg128 at
# depths 0, 4096, 32768 per line.
bash bench/cuda/h200_run.sh build > $OUT/run.log 2>&1
source bench/cuda/device_env.sh
for p in 12b 31b; do
  $GEM synth --profile $p -q -o $M/g$p.gguf
  while IFS= read -r line; do
    [ -z "$line" ] && continue
    echo "sweep $p: $line" | tee -a $OUT/sweep.txt
    env $line $GEM bench -m $M/g$p.gguf -p 0 -n 128 -d 0,4096,32768 -r 2 --backend cuda 2>&1 \
      | grep -E "^\|" | tail -3 | tee -a $OUT/sweep.txt
  done < bench/cuda/runs/run13/sweep2_lines.txt
done
