# Run 14, call 4 (the session's last device minutes): the decode attention's K/V stage loader
# with `#pragma unroll 1` (GEM_CUDA_LOADER_UNROLL1, a second build: the sliding kernel's PTX 1,458
# -> 934 instructions) against the default build of the same commit, alternating, 12B then 31B.
source bench/cuda/device_env.sh
DEPS=$PWD/.device/deps
export PKG_CONFIG_PATH=$DEPS/lib/pkgconfig CMAKE_PREFIX_PATH=$DEPS
sed -i "s#^prefix=.*#prefix=$DEPS#" $DEPS/lib/pkgconfig/cpp-httplib.pc
cmake -S . -B build-u1 -G Ninja -DCMAKE_BUILD_TYPE=Release -DGEM_CUDA=ON -DGEM_BUILD_BENCH=OFF -DGEM_WERROR=OFF \
  -DGEM_SHARED_DIR="$PWD/.device/shared" -DCMAKE_CUDA_FLAGS=-DGEM_CUDA_LOADER_UNROLL1 > $OUT/u1-build.log 2>&1
cmake --build build-u1 -j16 --target gem >> $OUT/u1-build.log 2>&1 || { tail -20 $OUT/u1-build.log; exit 1; }
cmake --build build-dev -j16 --target gem > $OUT/dev-build.log 2>&1 || { tail -20 $OUT/dev-build.log; exit 1; }
for p in 12b 31b; do
  [ -f $M/g$p.gguf ] || $GEM synth --profile $p -q -o $M/g$p.gguf
  for b in build-u1 build-dev build-u1 build-dev; do
    echo "tg $p: $b" | tee -a $OUT/unroll.txt
    $b/bin/gem bench -m $M/g$p.gguf -p 0 -n 128 -d 0,32768 -r 2 --backend cuda 2>&1 | grep -E "^\| gemma" | tee -a $OUT/unroll.txt
  done
done
