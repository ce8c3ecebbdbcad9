# Run 13, call 4 (the session's last ~4 minutes of device time): the sliding layers' cluster
# attention (GEM_CUDA_RING_CLUSTER=8|16, prepared this session): build gem and the backend test
# only, the backend test ClusteredRingAttentionDecodeMatchesOneTile, then 12B (then 31B) tg128 at
# depths 0 and 32768 per setting. The kernel tests' cluster cases are left for the next session.
set -u
export PATH=/usr/local/cuda/bin:$PATH
DEPS=$PWD/.device/deps
sed -i "s#^prefix=.*#prefix=$DEPS#" $DEPS/lib/pkgconfig/cpp-httplib.pc
export PKG_CONFIG_PATH=$DEPS/lib/pkgconfig CMAKE_PREFIX_PATH=$DEPS LD_LIBRARY_PATH=$DEPS/lib
sed -i -E 's/,-[a-z][a-z]+"/"/g; s/"-[a-z][a-z]+,/"/g; s/,-[a-z][a-z]+,/,/g' src/cli/*.cc
cmake -S . -B build-dev -G Ninja -DCMAKE_BUILD_TYPE=Release -DGEM_CUDA=ON -DGEM_BUILD_BENCH=OFF -DGEM_WERROR=OFF \
  -DGEM_SHARED_DIR="$PWD/.device/shared" > $OUT/build.log 2>&1
cmake --build build-dev -j16 --target cuda_backend_test gem >> $OUT/build.log 2>&1 || { tail -20 $OUT/build.log; exit 1; }
echo "built $(date +%T)" | tee $OUT/summary.txt
GEM=build-dev/bin/gem
F=.device/shared/fixtures
[ -f $F/tiny-q4_0.gguf ] || $GEM synth --profile tiny -q -o $F/tiny-q4_0.gguf
GEM_SHARED_DIR=$PWD/.device/shared timeout 60 build-dev/tests/cuda/cuda_backend_test \
  --gtest_filter='*ClusteredRing*' 2>&1 | grep -vE "^gem info" | tail -30 > $OUT/backend_test.txt
tail -3 $OUT/backend_test.txt | tee -a $OUT/summary.txt
for p in 12b 31b; do
  $GEM synth --profile $p -q -o /tmp/g$p.gguf
  for c in 0 8 16 0; do
    echo "sweep $p GEM_CUDA_RING_CLUSTER=$c" | tee -a $OUT/summary.txt
    GEM_CUDA_RING_CLUSTER=$c $GEM bench -m /tmp/g$p.gguf -p 0 -n 128 -d 0,32768 -r 1 --backend cuda 2>&1 \
      | grep -E "^\| gemma|rror" | tee -a $OUT/summary.txt
  done
done
