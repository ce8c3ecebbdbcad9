# Run 12, call 3 (session 10): where a decode step's time goes at depth 32768, per kernel, from
# ncu (clocks left alone, kernels serialised: each kernel's own time and DRAM bytes; no PDL
# overlap). The profiler starts at the first step at position >= 32768
# (GEM_CUDA_PROFILE_FROM_POS). 12B: two whole steps (~1000 launches); 31B: the attention and
# merge launches of one step. Before it, the 12B at depth 32768 with 2, 3 and 4 decode splits
# per SM (the full layers' split count; run 10 measured 1 and 2 only). No tests: the code is
# run 11's defaults (tested in call 1) with the measured-slower knobs removed.
bash bench/cuda/h200_run.sh build > $OUT/run.log 2>&1
source bench/cuda/device_env.sh
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
$GEM synth --profile 12b -q -o $M/g12b.gguf
for s in 2 3 4 2; do
  echo "12B GEM_CUDA_SPLITS_PER_SM=$s" | tee -a $OUT/summary.txt
  GEM_CUDA_SPLITS_PER_SM=$s $GEM bench -m $M/g12b.gguf -p 0 -n 128 -d 32768 -r 2 --backend cuda 2>&1 | grep "^|" | tail -1 | tee -a $OUT/summary.txt
done
GEM_CUDA_PROFILE_FROM_POS=32768 timeout 200 $NCU --clock-control none --csv --profile-from-start off \
  --launch-count 1000 --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
  $GEM bench -m $M/g12b.gguf -p 0 -n 3 -d 32768 -r 1 --backend cuda > /tmp/ncu_12b.csv 2> $OUT/ncu_12b.err
echo "ncu 12b rc=$?" | tee -a $OUT/summary.txt
python3 bench/cuda/ncu_steps.py /tmp/ncu_12b.csv --compact $OUT/ncu_12b_d32768_compact.csv > $OUT/ncu_12b_d32768.txt 2>&1
$GEM synth --profile 31b -q -o $M/g31b.gguf
GEM_CUDA_PROFILE_FROM_POS=32768 timeout 200 $NCU --clock-control none --csv --profile-from-start off \
  --kernel-name regex:"attention_(decode|merge)" --launch-count 40 \
  --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
  $GEM bench -m $M/g31b.gguf -p 0 -n 2 -d 32768 -r 1 --backend cuda > /tmp/ncu_31b.csv 2> $OUT/ncu_31b.err
echo "ncu 31b rc=$?" | tee -a $OUT/summary.txt
python3 bench/cuda/ncu_steps.py /tmp/ncu_31b.csv --compact $OUT/ncu_31b_attn_compact.csv > $OUT/ncu_31b_attn_d32768.txt 2>&1
cat $OUT/ncu_12b_d32768.txt $OUT/ncu_31b_attn_d32768.txt | head -80
grep -E "SPLITS|tg128|rc=" $OUT/summary.txt
