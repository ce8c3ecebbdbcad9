// Flags shared by the subcommands that run the model (run, serve, bench): which backend,
// context, KV type, threads, prompt tile; and the one function that turns them into a backend.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "base/status.h"
#include "model/model.h"

namespace gem::cli {

// The KV-cache storage every command that serves or measures the model uses unless told otherwise:
// f16, as llama.cpp and llama-server (half the bytes of f32 and the tensor-core attention path on
// CUDA). One default for serve, agent, run, bench and inspect, so that a server and the benchmark
// of the same model at the same depth run the same kernels.
inline constexpr const char* kDefaultKvType = "f16";

struct BackendFlags {
  std::string backend = "auto";   // auto | cpu | cuda
  int n_ctx = 0;                  // 0: min(training context, 32768)
  std::string kv_type = kDefaultKvType;
  int n_threads = 0;
  int n_tile = 256;
  bool reference = false;
};

void add_backend_flags(CLI::App& app, BackendFlags& flags);

// A flag's comma-separated list of integers, each at least min_value (gem bench's -p/-n/-d,
// gem profile's --rows); the error names the flag and the item.
Result<std::vector<int>> parse_int_list(const char* flag, const std::string& s, int min_value);

// Resolves "auto" (CUDA when a GPU is present and the build has it) and creates the backend.
Result<std::unique_ptr<Backend>> make_backend(const model::Model& model, const BackendFlags& flags);

}  // namespace gem::cli
