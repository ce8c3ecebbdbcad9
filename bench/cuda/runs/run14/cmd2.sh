# Run 14, call 2 (session 12): the attention parts padded to D + 4 floats so that the merge
# reads them as float4, four elements a thread (GEM_CUDA_MERGE_VEC, default 1; 0 = the one-element
# form before, for the comparison; run 12: the 12B's full-layer merge of 264 splits 14.1 µs for
# 8.7 MB), with the kernel and backend tests; then the decode attention's K/V stage loader
# compiled with `#pragma unroll 1` (GEM_CUDA_LOADER_UNROLL1, a second build: PTX of the sliding
# kernel 1,458 -> 934 instructions) against the default build, measured right after each other.
SWEEP_FILE=bench/cuda/runs/run14/sweep2_lines.txt SWEEP_31B=1 SWEEP_DEPTHS=0,4096,32768 bash bench/cuda/h200_run.sh sweep > $OUT/run.log 2>&1
grep -E "PASSED|FAILED|sweep|tg128|copy|parity" $OUT/summary.txt
source bench/cuda/device_env.sh
cmake -S . -B build-u1 -G Ninja -DCMAKE_BUILD_TYPE=Release -DGEM_CUDA=ON -DGEM_BUILD_BENCH=OFF -DGEM_WERROR=OFF \
  -DGEM_SHARED_DIR="$PWD/.device/shared" -DCMAKE_CUDA_FLAGS=-DGEM_CUDA_LOADER_UNROLL1 > $OUT/u1-build.log 2>&1
cmake --build build-u1 -j16 --target gem >> $OUT/u1-build.log 2>&1 || { tail -20 $OUT/u1-build.log; exit 1; }
for p in 12b 31b; do
  for b in build-u1 build-dev build-u1; do
    echo "tg $p: $b" | tee -a $OUT/unroll.txt
    $b/bin/gem bench -m $M/g$p.gguf -p 0 -n 128 -d 0,4096,32768 -r 2 --backend cuda 2>&1 | grep -E "^\| gemma" | tee -a $OUT/unroll.txt
  done
done
