#!/usr/bin/env bash
# ncu of the decode products (durations, DRAM throughput, occupancy, stall reasons) on the
# synthetic 12B, once per line of $NCU_FILE (the tuning overrides of cuda::tuning_from_env, e.g.
# "GEM_CUDA_PDL=0"; "GEM_CUDA_PDL=1" for the defaults). Run on the device after
# bench/cuda/h200_run.sh (reuses its build-dev and /tmp/models/g12b.gguf when present).
source bench/cuda/device_env.sh
[ -f $M/g12b.gguf ] || $GEM synth --profile 12b -q -o $M/g12b.gguf
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
reasons="long_scoreboard short_scoreboard barrier membar mio_throttle lg_throttle wait sleeping math_pipe_throttle dispatch_stall not_selected selected no_instruction branch_resolving drain imc_miss tex_throttle"
metrics=$(for r in $reasons; do printf "smsp__average_warps_issue_stalled_%s_per_issue_active.ratio," "$r"; done)
n=0
while IFS= read -r cfg; do
  [ -z "$cfg" ] && continue
  n=$((n + 1))
  echo "=== $cfg" | tee -a "$OUT/ncu.txt"
  # ~193 products per step: skip the warm-up step's, profile one layer's four and the next four.
  env $cfg timeout 200 "$NCU" --clock-control none --kernel-name regex:"matvec_(q_|gated)" \
    --launch-skip 200 --launch-count 8 --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section WarpStateStats --section Occupancy --section LaunchStats --section SchedulerStats \
    --metrics "${metrics%,}" \
    $GEM bench -m $M/g12b.gguf -p 0 -n 3 -d 0 -r 1 --backend cuda > "$OUT/ncu_raw_$n.txt" 2>&1
  grep -E "  void|Duration|DRAM Throughput|Achieved Occupancy|Registers Per|Grid Size|Block Size|Warp Cycles Per Issued|Eligible Warps|Dynamic Shared|stalled_(long|short|wait|mio)" \
    "$OUT/ncu_raw_$n.txt" | sed -E 's/\(const unsigned char.*\) \(/(/' >> "$OUT/ncu.txt"
done < "$NCU_FILE"
