// The CUDA backend's entry points. Plain C++ (no CUDA headers), so the CLI and the runtime can
// include it; everything CUDA-specific stays in the .cu/.cuh files of this folder.
#pragma once

#include <memory>

#include "backend/backend.h"
#include "backend/cuda/tuning.h"
#include "base/status.h"
#include "model/model.h"

namespace gem {

// True when the CUDA runtime finds at least one device (false, not an error, without a driver).
bool cuda_device_available();

// Uploads the weights of `model` to device 0 (with progress at info level) and allocates the KV
// cache and every scratch buffer for options.n_ctx positions and options.n_tile-token tiles.
// The kernels' forms and sizes: cuda::tuning_from_env() (the defaults and their environment
// overrides), or the record given.
Result<std::unique_ptr<Backend>> make_cuda_backend(const model::Model& model,
                                                   const BackendOptions& options);
Result<std::unique_ptr<Backend>> make_cuda_backend(const model::Model& model,
                                                   const BackendOptions& options,
                                                   const cuda::CudaTuning& tuning);

}  // namespace gem
