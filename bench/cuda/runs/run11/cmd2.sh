# Run 11, call 2 (prepared in session 8; after call 1 on the same machine, which left build-dev
# and /tmp/models there): ncu of one 12B decode step's attention kernels at depth 32768 with the
# warp-stall, memory and occupancy sections — why the sliding layers' attention moves 8.4 MB of
# K/V in 6.7 µs (run 10).
source bench/cuda/device_env.sh
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
GEM_CUDA_PDL=0 timeout 400 $NCU --clock-control none --kernel-name regex:"attention_(decode|merge)" \
  --launch-skip 192 --launch-count 96 --section SpeedOfLight --section MemoryWorkloadAnalysis \
  --section WarpStateStats --section Occupancy --section LaunchStats \
  $GEM bench -m $M/g12b.gguf -p 0 -n 4 -d 32768 -r 1 --backend cuda > $OUT/ncu_attn_sections.txt 2>&1
echo "ncu rc=$? $(wc -l < $OUT/ncu_attn_sections.txt) lines"
grep -E "attention_decode_kernel|Duration|DRAM Throughput|Achieved Occupancy|Stall" $OUT/ncu_attn_sections.txt | head -60
