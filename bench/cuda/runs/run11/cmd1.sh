# Run 11, call 1 (prepared in session 8, not run yet; bench/cuda/make_device_dir.sh builds the
# carried .device/: carry .device/deps and .device/shared): tests (new: the merge in 32-element
# chunks, the early exit of empty decode splits, the prologue fused into the decode attention —
# kernel test FusedPrologueMatchesSeparateKernels, backend test FusedPrologueDecodeMatchesOneTile);
# 12B/31B tg128 @ d0,4096,32768 per line of sweep1_lines.txt; then ncu of one 12B decode step's
# attention kernels at depth 32768 with the warp-stall, memory and occupancy sections (why the
# sliding layers' attention moves 8.4 MB in 6.7 µs).
SWEEP_FILE=bench/cuda/runs/run11/sweep1_lines.txt SWEEP_31B=1 SWEEP_DEPTHS=0,4096,32768 bash bench/cuda/h200_run.sh sweep > $OUT/run.log 2>&1
source bench/cuda/device_env.sh
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
GEM_CUDA_PDL=0 timeout 300 $NCU --clock-control none --kernel-name regex:"attention_(decode|merge)" \
  --launch-skip 192 --launch-count 96 --section SpeedOfLight --section MemoryWorkloadAnalysis \
  --section WarpStateStats --section Occupancy --section LaunchStats \
  $GEM bench -m $M/g12b.gguf -p 0 -n 4 -d 32768 -r 1 --backend cuda > $OUT/ncu_attn_sections.txt 2>&1
echo "ncu rc=$?" | tee -a $OUT/summary.txt
grep -E "PASSED|FAILED|sweep|tg128|copy|ncu" $OUT/summary.txt
