# Run 12, call 5 (session 10): why the small kernels of a decode step take what they take, for
# the next session's design: ncu sections (speed of light, memory, warp states, occupancy,
# launch, scheduler) of the 12B's first six layers' attention, merge, prologue, q8 and residual
# launches in a step at depth 32768 (profiler started by position; five sliding layers and the
# first full one). No tests (no code change since call 3).
bash bench/cuda/h200_run.sh build > $OUT/run.log 2>&1
source bench/cuda/device_env.sh
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
$GEM synth --profile 12b -q -o $M/g12b.gguf
GEM_CUDA_PROFILE_FROM_POS=32768 timeout 220 $NCU --clock-control none --profile-from-start off \
  --kernel-name regex:"attention_(decode|merge)|residual|prologue|quantize" --launch-count 36 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
  --section Occupancy --section LaunchStats --section SchedulerStats \
  $GEM bench -m $M/g12b.gguf -p 0 -n 2 -d 32768 -r 1 --backend cuda > $OUT/ncu_small_sections.txt 2>&1
echo "ncu rc=$? $(wc -l < $OUT/ncu_small_sections.txt) lines"
grep -E "^  [a-z_]+.*\(|Duration|DRAM Throughput|Achieved Occupancy|Warp Cycles Per Issued" $OUT/ncu_small_sections.txt | head -120
