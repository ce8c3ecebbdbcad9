// make_backend: the flag table and the backend choice for every command that runs the model.
#include "cli/backend_flags.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>

#include "backend/cpu/cpu_backend.h"
#include "base/log.h"
#ifdef GEM_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace gem::cli {

Result<std::vector<int>> parse_int_list(const char* flag, const std::string& s, int min_value) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      const int v = std::stoi(item, &used);
      if (used != item.size() || v < min_value) throw std::invalid_argument(item);
      out.push_back(v);
    } catch (const std::exception&) {
      return errorf("%s: '%s' is not an integer >= %d", flag, item.c_str(), min_value);
    }
  }
  if (out.empty()) return errorf("%s: empty list", flag);
  return out;
}

void add_backend_flags(CLI::App& app, BackendFlags& f) {
  app.add_option("--backend", f.backend, "cpu, cuda or auto (CUDA when a GPU is present)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  app.add_option("-c,--ctx-size", f.n_ctx, "context size in tokens (0: min(model context, 32768))")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--kv-type", f.kv_type, "KV cache storage: f32, f16 (default) or f16-full")
      ->check(CLI::IsMember({"f32", "f16", "f16-full"}));
  app.add_option("-t,--threads", f.n_threads, "CPU threads (0: all)")->check(CLI::NonNegativeNumber);
  app.add_option("--tile,--ubatch-size", f.n_tile, "prompt tokens evaluated per layer pass")
      ->check(CLI::PositiveNumber);
  app.add_flag("--reference", f.reference, "CPU: the plain scalar reference path (slow)");
}

Result<std::unique_ptr<Backend>> make_backend(const model::Model& model, const BackendFlags& f) {
  BackendOptions options;
  options.n_ctx = f.n_ctx > 0 ? f.n_ctx : std::min(model.config.context_length, 32768);
  GEM_ASSIGN_OR_RETURN(options.kv_type, model::parse_kv_type(f.kv_type));
  options.n_threads = f.n_threads;
  options.n_tile = f.n_tile;
  options.reference = f.reference;
  std::string kind = f.backend;
#ifdef GEM_HAVE_CUDA
  if (kind == "auto") kind = cuda_device_available() && !f.reference ? "cuda" : "cpu";
  if (kind == "cuda") return make_cuda_backend(model, options);
#else
  if (kind == "cuda") return errorf("--backend cuda: this gem was built without CUDA");
  if (kind == "auto") kind = "cpu";
#endif
  return cpu::make_cpu_backend(model, options);
}

}  // namespace gem::cli
