#!/usr/bin/env bash
# Builds the ignored folder .device/ that the GPU-machine scripts carry (the GPU image lacks
# gem's build dependencies), from this machine's Debian packages
# (scripts/setup.sh installs them) and npm:
#   .device/deps       GTest/GMock, CLI11, nlohmann-json, cpp-httplib (+ brotli/openssl/zlib
#                      headers its header includes, brotli runtime libraries), laid out as a prefix
#   .device/trace      the CUPTI kernel-trace library (bench/cuda/kernel_trace.sh)
#   .device/llama.cpp  llama.cpp's source at the fixtures' release (node-llama-cpp 3.22.1's
#                      bundle), pruned of models, docs, examples, the server's UI and other
#                      backends to fit a call's 64 MiB (28 MB): enough for llama-bench and
#                      llama-batched-bench, built on the GPU machine in about 3 minutes
#                      (bench/server/device_build.sh); llama-server needs the binaries below
# The tests' reference data travels with the tree (tests/data) and the build writes the test
# models, so nothing of the development reference folder is carried.
#   .device/llbin.tar.xz  llama.cpp's CUDA binaries built here ('llama-bin' only, not in 'all':
#                      about an hour on two cores; bench/server/device_build.sh unpacks them).
#                      The CUDA library alone packs to ~40 MB: with the tree (~19 MB without
#                      tests/data/outputs, which a call that needs no CPU-reference test can
#                      leave behind) and .device/deps one pack fits a call, so LLAMA_BINS picks
#                      its binaries: "bench" (llama-bench, llama-batched-bench), "server"
#                      (llama-server), default all three.
# Usage: bash bench/cuda/make_device_dir.sh [deps|trace|llama|llama-bin|all] (default all).
set -euo pipefail
cd "$(dirname "$0")/../.."
what=${1:-all}

if [ "$what" = all ] || [ "$what" = deps ]; then
  D=.device/deps
  rm -rf $D && mkdir -p $D
  for p in libgtest-dev libgmock-dev libcli11-dev nlohmann-json3-dev libcpp-httplib-dev libcpp-httplib0.11; do
    dpkg -L $p | grep "^/usr/" | while read -r f; do
      { [ -f "$f" ] || [ -L "$f" ]; } || continue
      case "$f" in */doc/*|/usr/src/*) continue ;; esac
      rel=${f#/usr/}
      mkdir -p "$D/$(dirname "$rel")"
      cp -a "$f" "$D/$rel"
    done
  done
  mkdir -p $D/lib/pkgconfig
  # h200_run.sh rewrites the prefix; the private requirements' .pc files are not on that machine.
  sed '/^Requires.private/d' $D/lib/x86_64-linux-gnu/pkgconfig/cpp-httplib.pc > $D/lib/pkgconfig/cpp-httplib.pc
  cp -a $D/lib/x86_64-linux-gnu/libcpp-httplib* $D/lib/
  cp -L /lib/x86_64-linux-gnu/libbrotli{common,dec,enc}.so.1 $D/lib/
  cp -r /usr/include/brotli /usr/include/openssl $D/include/
  cp /usr/include/x86_64-linux-gnu/openssl/* $D/include/openssl/
  cp /usr/include/zlib.h /usr/include/zconf.h $D/include/ 2>/dev/null || true
  [ -f /usr/include/x86_64-linux-gnu/zconf.h ] && cp /usr/include/x86_64-linux-gnu/zconf.h $D/include/
  du -sh $D
fi


if [ "$what" = all ] || [ "$what" = trace ]; then
  bash bench/cuda/kernel_trace.sh > /dev/null
  du -sh .device/trace
fi

if [ "$what" = all ] || [ "$what" = llama ]; then
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent node-llama-cpp@3.22.1 > /dev/null && tar xzf node-llama-cpp-3.22.1.tgz &&
   git clone -q package/llama/gitRelease.bundle llama.cpp)
  rm -rf .device/llama.cpp && mkdir -p .device/llama.cpp
  (cd "$tmp/llama.cpp" && git archive HEAD) | tar x -C .device/llama.cpp
  rm -rf "$tmp"
  L=.device/llama.cpp
  rm -rf $L/models $L/docs $L/benches $L/media $L/gguf-py $L/conversion $L/scripts $L/.github \
    $L/tools/ui $L/tests $L/examples/*/
  for b in et metal hexagon sycl vulkan opencl cann musa kompute webgpu zdnn rpc blas openvino virtgpu; do
    rm -rf $L/ggml/src/ggml-$b
  done
  du -sh $L
fi
if [ "$what" = llama-bin ]; then
  # llama.cpp's CUDA binaries (llama-bench, llama-batched-bench, llama-server) built here for
  # sm_90 against the driver stub (this machine has no GPU), stripped and packed under 64 MiB:
  # saves the ~7 minutes their build takes on the GPU machine. REF: a clone of the bundle above.
  case "${LLAMA_BINS:-all}" in
    all|bench|server) ;;
    *) echo "make_device_dir.sh: LLAMA_BINS is '$LLAMA_BINS'; expected bench, server or all" >&2
       exit 2 ;;
  esac
  REF=${REF:-/work/ref/llama.cpp}
  mkdir -p /tmp/cudastub && ln -sf /usr/local/cuda/lib64/stubs/libcuda.so /tmp/cudastub/libcuda.so.1
  cmake -S "$REF" -B "$REF/build-cuda" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DCMAKE_EXE_LINKER_FLAGS=-Wl,-rpath-link,/tmp/cudastub \
    -DCMAKE_SHARED_LINKER_FLAGS=-Wl,-rpath-link,/tmp/cudastub >/dev/null
  cmake --build "$REF/build-cuda" -j"$(nproc)" --target llama-bench llama-batched-bench llama-server
  rm -rf /tmp/llbin && mkdir -p /tmp/llbin
  B="$REF/build-cuda/bin"
  cp -a "$B"/libggml* "$B"/libllama.so* "$B"/libllama-common.so* /tmp/llbin/
  case "${LLAMA_BINS:-all}" in
    bench) cp -a "$B"/llama-bench "$B"/llama-batched-bench "$B"/libllama-bench-impl.so \
             "$B"/libllama-batched-bench-impl.so /tmp/llbin/ ;;
    server) cp -a "$B"/llama-server "$B"/libllama-server-impl.so "$B"/libmtmd.so* /tmp/llbin/ ;;
    all) cp -a "$B/." /tmp/llbin/ ;;
  esac
  find /tmp/llbin -type f -name '*.so*' -exec strip --strip-unneeded {} + 2>/dev/null || true
  tar cf - -C /tmp llbin | xz -9 -T"$(nproc)" > .device/llbin.tar.xz
  du -sh .device/llbin.tar.xz
fi
echo "carry: .device/deps (+ .device/trace for traces, .device/llama.cpp for 'all')"
