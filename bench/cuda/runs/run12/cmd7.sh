# Run 12, call 6 (session 10): where the sliding decode attention's blocks spend their ~8.5 µs
# (call 5): warp stall reasons per issued instruction and the source lines with the most stall
# samples, for one launch of attention_decode_kernel<256, __half, 1> and one of the residual
# epilogue, 12B at depth 32768 (-lineinfo builds). No tests (no code change since call 3).
bash bench/cuda/h200_run.sh build > $OUT/run.log 2>&1
source bench/cuda/device_env.sh
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
$NCU --version | tail -1
$GEM synth --profile 12b -q -o $M/g12b.gguf
for k in attention_decode_kernel residual_kernel; do
  GEM_CUDA_PROFILE_FROM_POS=32768 timeout 100 $NCU --clock-control none --profile-from-start off \
    --kernel-name regex:"$k" --launch-count 1 --section SourceCounters --section WarpStateStats \
    --metrics regex:"smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
    --import-source yes -o /tmp/$k \
    $GEM bench -m $M/g12b.gguf -p 0 -n 2 -d 32768 -r 1 --backend cuda > /tmp/$k.log 2>&1
  echo "$k ncu rc=$?"
  $NCU --import /tmp/$k.ncu-rep --page details > $OUT/${k}_details.txt 2>&1
  $NCU --import /tmp/$k.ncu-rep --page raw --csv > /tmp/${k}_raw.csv 2>&1
  python3 - /tmp/${k}_raw.csv > $OUT/${k}_stalls.txt <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
hdr, val = rows[0], rows[-1]
out = []
for h, v in zip(hdr, val):
    if "issue_stalled" in h and "per_issue_active" in h:
        try: out.append((float(v.replace(",", "")), h))
        except ValueError: pass
for v, h in sorted(out, reverse=True)[:14]: print(f"{v:8.3f}  {h}")
PY
  $NCU --import /tmp/$k.ncu-rep --page source --csv --print-source cuda > /tmp/${k}_src.csv 2>$OUT/${k}_src.err
  echo "source page rc=$? $(wc -l < /tmp/${k}_src.csv) lines"
  head -c 3000000 /tmp/${k}_src.csv > $OUT/${k}_src.csv
  cat $OUT/${k}_stalls.txt
done
