# Sourced by the bench/server/h200_*.sh scripts (after `log` is defined, with $OUT set): unpacks
# llama.cpp's binaries when .device/llbin.tar.xz is carried, else starts the CUDA build of
# LLAMA_TARGETS (default llama-server; bench/cuda/h200_batched.sh asks for llama-bench and
# llama-batched-bench: 3 min 17 s on the GPU machine's 16 cores) in the background when
# .device/llama.cpp is carried (either unless WITH_LLAMA is 0; llama_pid: wait for it before
# using /tmp/llama-build/bin), and builds gem with CUDA into build-dev unless GEM names a gem
# built already (bench/cuda/h200_batched.sh). llama-server needs tools/ui, which
# make_device_dir.sh prunes from .device/llama.cpp: the server steps take .device/llbin.tar.xz.
if [ -f .device/llbin.tar.xz ] && [ "${WITH_LLAMA:-1}" = 1 ]; then
  # Binaries built on the development machine (bench/cuda/make_device_dir.sh llama-bin).
  (mkdir -p /tmp/llama-build && tar xJf .device/llbin.tar.xz -C /tmp/llama-build &&
   rm -rf /tmp/llama-build/bin && mv /tmp/llama-build/llbin /tmp/llama-build/bin) &
  llama_pid=$!
  export LD_LIBRARY_PATH=/tmp/llama-build/bin:${LD_LIBRARY_PATH:-}
elif [ -d .device/llama.cpp ] && [ "${WITH_LLAMA:-1}" = 1 ]; then
  llama_targets=${LLAMA_TARGETS:-llama-server}
  llama_server=OFF
  case " $llama_targets " in *" llama-server "*) llama_server=ON ;; esac
  if [ $llama_server = ON ] && [ ! -d .device/llama.cpp/tools/ui ]; then
    log "device_build.sh: llama-server needs .device/llama.cpp/tools/ui, which make_device_dir.sh prunes; carry .device/llbin.tar.xz (make_device_dir.sh llama-bin)"
    exit 1
  fi
  (cmake -S .device/llama.cpp -B /tmp/llama-build -G Ninja -DGGML_CUDA=ON \
     -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF \
     -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=$llama_server -DLLAMA_CURL=OFF \
     -DLLAMA_OPENSSL=OFF -DCMAKE_BUILD_TYPE=Release >/tmp/llama-cfg.log 2>&1 &&
   cmake --build /tmp/llama-build -j15 --target $llama_targets >/tmp/llama-build.log 2>&1) &
  llama_pid=$!
fi
if [ -z "${GEM:-}" ]; then
  cmake -S . -B build-dev -G Ninja -DCMAKE_BUILD_TYPE=Release -DGEM_CUDA=ON -DGEM_BUILD_BENCH=OFF \
    -DGEM_BUILD_TESTS=OFF -DGEM_WERROR=OFF >"$OUT/gem-build.log" 2>&1 &&
    cmake --build build-dev -j6 --target gem >>"$OUT/gem-build.log" 2>&1 || { log "gem build failed"; exit 1; }
  GEM=build-dev/bin/gem
fi
