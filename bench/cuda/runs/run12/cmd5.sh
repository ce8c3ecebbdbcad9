# Run 12, call 4 (session 10): the 31B at depths 4096 and 32768 with 2, 3 and 4 decode splits per
# SM (call 3's ncu: its sliding attention runs 17 splits of ~60 keys at 1.28 TB/s; 4 per SM
# gives 33 splits of 32 keys, and more splits to the full layers). No tests (no code change).
bash bench/cuda/h200_run.sh build > $OUT/run.log 2>&1
source bench/cuda/device_env.sh
$GEM synth --profile 31b -q -o $M/g31b.gguf
for s in 2 3 4 2; do
  echo "31B GEM_CUDA_SPLITS_PER_SM=$s" | tee -a $OUT/sweep.txt
  GEM_CUDA_SPLITS_PER_SM=$s $GEM bench -m $M/g31b.gguf -p 0 -n 128 -d 4096,32768 -r 2 --backend cuda 2>&1 | grep "^|" | tail -2 | tee -a $OUT/sweep.txt
done
