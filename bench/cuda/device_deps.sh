# Sourced on the GPU machine by bench/cuda/h200_run.sh, bench/cuda/device_env.sh and any script
# that configures a build of its own: the CUDA tools on PATH and the build dependencies the GPU
# image lacks (GTest, CLI11, cpp-httplib), carried in .device/deps, for pkg-config, CMake and the
# loader.
export PATH=/usr/local/cuda/bin:$PATH
if [ -d .device/deps ]; then
  DEPS=$PWD/.device/deps
  sed -i "s#^prefix=.*#prefix=$DEPS#" $DEPS/lib/pkgconfig/cpp-httplib.pc
  export PKG_CONFIG_PATH=$DEPS/lib/pkgconfig CMAKE_PREFIX_PATH=$DEPS LD_LIBRARY_PATH=$DEPS/lib:${LD_LIBRARY_PATH:-}
fi
