// Shared by the CUDA tests: they build wherever the CUDA backend does (CI compiles them) and
// skip, with a message, on a machine without a device.
#pragma once

#include <gtest/gtest.h>

#include "backend/cuda/cuda_backend.h"

#define REQUIRE_GPU()                                                                   \
  do {                                                                                  \
    if (!::gem::cuda_device_available()) GTEST_SKIP() << "no CUDA device on this machine"; \
  } while (0)
