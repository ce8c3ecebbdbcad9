# Run 14, call 6 (the session's last ~4 device minutes): the full layers' decode split count at
# depth 32768 now that the merge is 4-8x wider (run 12 call 3 measured 2/3/4 per SM with the
# one-element merge: 2 best). gem only, built without the tests; 12B then 31B, figures written as
# they come (the call may end at the device budget).
OUT=${OUT:-/tmp/gem-out}
export PATH=/usr/local/cuda/bin:$PATH
DEPS=$PWD/.device/deps
export PKG_CONFIG_PATH=$DEPS/lib/pkgconfig CMAKE_PREFIX_PATH=$DEPS LD_LIBRARY_PATH=$DEPS/lib:${LD_LIBRARY_PATH:-}
sed -i "s#^prefix=.*#prefix=$DEPS#" $DEPS/lib/pkgconfig/cpp-httplib.pc
cmake -S . -B build-dev -G Ninja -DCMAKE_BUILD_TYPE=Release -DGEM_CUDA=ON -DGEM_BUILD_BENCH=OFF -DGEM_WERROR=OFF \
  -DGEM_SHARED_DIR="$PWD/.device/shared" > $OUT/build.log 2>&1
cmake --build build-dev -j16 --target gem >> $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
GEM=build-dev/bin/gem M=/tmp/models; mkdir -p $M
for p in 12b 31b; do
  $GEM synth --profile $p -q -o $M/g$p.gguf
  for s in 2 1 3 4 2; do
    [ $p = 31b ] && [ $s != 2 ] && [ $s != 3 ] && continue
    echo "splits $p: GEM_CUDA_SPLITS_PER_SM=$s" | tee -a $OUT/splits.txt
    GEM_CUDA_SPLITS_PER_SM=$s $GEM bench -m $M/g$p.gguf -p 0 -n 128 -d 32768 -r 2 --backend cuda 2>&1 | grep -E "^\| gemma" | tee -a $OUT/splits.txt
  done
done
