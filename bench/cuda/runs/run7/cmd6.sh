# sweep 6 (register products with bulk L2 prefetches under PDL) + the SASS of matvec.cu
export SWEEP_FILE=bench/cuda/runs/run7/sweep6_lines.txt
bash bench/cuda/h200_run.sh sweep > $OUT/run.log 2>&1
CUOBJ=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
$CUOBJ -sass build-dev/src/backend/cuda/CMakeFiles/gem_backend_cuda.dir/matvec.cu.o > $OUT/matvec.sass 2>&1
grep -E "PASSED|FAILED|sweep|tg128|copy" $OUT/summary.txt | sed -E 's/\| gemma4 12B \| 6.71 GiB \| 11.91 B \| cuda \| f16 \| 512 //'
grep -B3 -A10 "Failure" $OUT/kernels_test.txt | head -30
