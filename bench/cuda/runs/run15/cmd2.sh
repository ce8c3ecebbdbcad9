# Run 15, call 2 (prepared in session 12 as call 1; session 13 put the shared-K/V decode first):
# where the 12B's decode step goes at depth 32768 now (ncu, kernels serialised, one profile of ~2
# steps as in run 12 call 3, to compare the float4 merge's 32-element chunks with run 12's 14.1 µs
# per full-layer merge), then the instruction-level profile of the full layers' split
# tensor-core attention (run 12: 31.3 µs for 67 MB = 2.15 TB/s on the 12B, against 3.26 TB/s for
# the 31B's longer splits) and of the merge. SHARED sets GEM_CUDA_ATTN_SHARED_KV for all of it
# (default 1: the form call 1 measures; the profile then shows its own bytes/s).
export GEM_CUDA_ATTN_SHARED_KV=${SHARED:-1}
bash bench/cuda/h200_run.sh build > $OUT/run.log 2>&1
source bench/cuda/device_env.sh
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
$GEM synth --profile 12b -q -o $M/g12b.gguf
GEM_CUDA_PROFILE_FROM_POS=32768 timeout 200 $NCU --clock-control none --csv --profile-from-start off \
  --launch-count 1000 --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
  $GEM bench -m $M/g12b.gguf -p 0 -n 3 -d 32768 -r 1 --backend cuda > /tmp/ncu_12b.csv 2> $OUT/ncu_12b.err
echo "ncu 12b rc=$?"
python3 bench/cuda/ncu_steps.py /tmp/ncu_12b.csv --compact $OUT/ncu_12b_d32768_compact.csv > $OUT/ncu_12b_d32768.txt 2>&1
head -40 $OUT/ncu_12b_d32768.txt
bash bench/cuda/ncu_sass.sh attention_decode_mma2_kernel $M/g12b.gguf 32768
# The 12B's layers 0-4 are sliding, layer 5 full: its merge is the step's sixth.
bash bench/cuda/ncu_sass.sh attention_merge_kernel $M/g12b.gguf 32768 5
