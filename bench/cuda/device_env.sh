# Sourced by the measurement scripts that run after bench/cuda/h200_run.sh on the GPU machine:
# the output folder, the CUDA tools and the carried libraries (device_deps.sh), and the gem
# binary of build-dev ($GEM) with the models folder ($M); exits when the binary is missing.
set -u
OUT=${OUT:-/tmp/gem-out}
source bench/cuda/device_deps.sh
GEM=build-dev/bin/gem
M=/tmp/models
[ -x $GEM ] || { echo "build-dev/bin/gem missing: run bench/cuda/h200_run.sh build first"; exit 1; }
