# Run 12, call 1 (prepared in session 9): tests, then ncu of one 12B decode step's attention
# kernels at depth 32768 with the warp-stall, memory and occupancy sections. The profiler starts
# at that depth (GEM_CUDA_PROFILE_FROM_POS; run 11 call 2 counted launches and profiled the
# warm-up instead). 96 launches = one step's attention + merge over the 48 layers.
bash bench/cuda/h200_run.sh test > $OUT/run.log 2>&1
source bench/cuda/device_env.sh
mkdir -p $M && $GEM synth --profile 12b -q -o $M/g12b.gguf
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
GEM_CUDA_PROFILE_FROM_POS=32768 timeout 400 $NCU --clock-control none --profile-from-start off \
  --kernel-name regex:"attention_(decode|merge)" --launch-count 96 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
  --section Occupancy --section LaunchStats \
  $GEM bench -m $M/g12b.gguf -p 0 -n 2 -d 32768 -r 1 --backend cuda > $OUT/ncu_attn_sections.txt 2>&1
echo "ncu rc=$? $(wc -l < $OUT/ncu_attn_sections.txt) lines"
grep -E "PASSED|FAILED" $OUT/summary.txt
grep -E "attention_decode|attention_merge|Duration|DRAM Throughput|Achieved Occupancy" $OUT/ncu_attn_sections.txt | head -60
