# Run 14, call 2 (prepared in session 11): where the sliding layers' decode attention spends its
# instructions, per SASS instruction (run 12 call 6 exported the source page with
# --print-source cuda and got the source lines without any metric columns; the per-instruction
# counters come with the SASS view): one launch each of attention_decode_kernel<256, __half, 1>
# and of the residual epilogue, 12B at depth 32768, SourceCounters + WarpStateStats.
bash bench/cuda/h200_run.sh build > $OUT/run.log 2>&1
source bench/cuda/device_env.sh
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
$NCU --version | tail -1
$GEM synth --profile 12b -q -o $M/g12b.gguf
for k in attention_decode_kernel residual_kernel; do
  GEM_CUDA_PROFILE_FROM_POS=32768 timeout 100 $NCU --clock-control none --profile-from-start off \
    --kernel-name regex:"$k" --launch-count 1 --section SourceCounters --section WarpStateStats \
    --import-source yes -o /tmp/$k \
    $GEM bench -m $M/g12b.gguf -p 0 -n 2 -d 32768 -r 1 --backend cuda > /tmp/$k.log 2>&1
  echo "$k ncu rc=$?"
  $NCU --import /tmp/$k.ncu-rep --page source --csv --print-source sass > /tmp/${k}_sass.csv 2> $OUT/${k}_sass.err
  echo "sass page rc=$? $(wc -l < /tmp/${k}_sass.csv) lines; columns:"
  head -2 /tmp/${k}_sass.csv | cut -c1-600
  head -c 4000000 /tmp/${k}_sass.csv > $OUT/${k}_sass.csv
done
