# Run 9, call 4: the backend tests under GEM_CUDA_PDL=1 with the products' weight preload on and
# off (call 3: decode wrong on the tiny fixtures under PDL=1), full output; then 12B/31B tg128
# @ d0 per line of sweep4_lines.txt.
SWEEP_FILE=bench/cuda/runs/run9/sweep4_lines.txt SWEEP_31B=1 bash bench/cuda/h200_run.sh sweep > $OUT/run.log 2>&1
for pre in 1 0; do
  for pdl in 1 prefill; do
    GEM_SHARED_DIR=$PWD/.device/shared GEM_CUDA_PDL=$pdl GEM_CUDA_MV_PRELOAD=$pre timeout 120 build-dev/tests/cuda/cuda_backend_test --gtest_filter=-*Synthetic* > $OUT/bt_pdl${pdl}_pre$pre.txt 2>&1
    echo "backend tests PDL=$pdl PRELOAD=$pre: rc=$? $(grep -c Failure $OUT/bt_pdl${pdl}_pre$pre.txt) failures" | tee -a $OUT/summary.txt
  done
done
GEM_SHARED_DIR=$PWD/.device/shared GEM_CUDA_PDL=1 GEM_CUDA_MV_EARLY_PF=0 timeout 120 build-dev/tests/cuda/cuda_backend_test --gtest_filter=-*Synthetic* > $OUT/bt_pdl1_noef.txt 2>&1
echo "backend tests PDL=1 EARLY_PF=0: rc=$? $(grep -c Failure $OUT/bt_pdl1_noef.txt) failures" | tee -a $OUT/summary.txt
grep -E "PASSED|FAILED|sweep|tg128|backend tests" $OUT/summary.txt
