// Flags shared by the subcommands that run the model (run, serve, bench, logits): which backend,
// context, KV type, threads, prompt tile; and the one function that turns them into a backend.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "base/status.h"
#include "model/model.h"

namespace gem::cli {

struct BackendFlags {
  std::string backend = "auto";   // auto | cpu | cuda
  int n_ctx = 0;                  // 0: min(training context, 32768)
  std::string kv_type = "f32";
  int n_threads = 0;
  int n_tile = 256;
  bool reference = false;
};

void add_backend_flags(CLI::App& app, BackendFlags& flags);

// Resolves "auto" (CUDA when a GPU is present and the build has it) and creates the backend.
Result<std::unique_ptr<Backend>> make_backend(const model::Model& model, const BackendFlags& flags);

}  // namespace gem::cli
