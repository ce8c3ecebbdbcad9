#!/usr/bin/env bash
# Builds bench/cuda/kernel_trace.cc here (CUDA 13 headers) into .device/trace/ with the CUPTI
# library beside it, for carrying to the GPU machine (no nsys there).
set -eu
CUDA=${CUDA:-/usr/local/cuda-13.0}
mkdir -p .device/trace
g++ -O2 -shared -fPIC -std=c++20 bench/cuda/kernel_trace.cc -I$CUDA/include -L$CUDA/lib -lcupti \
  -Wl,-rpath,'$ORIGIN' -o .device/trace/libgem_kernel_trace.so
cp -L $CUDA/lib/libcupti.so.13 .device/trace/
ls -la .device/trace
