// make_backend: the flag table and the backend choice for every command that runs the model.
#include "cli/backend_flags.h"

#include <algorithm>
#include <cctype>
#include <new>
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
  app.add_option("--cache-type-k", f.cache_type_k, "-ctk: llama.cpp's name for --kv-type (K and V agree)");
  app.add_option("--cache-type-v", f.cache_type_v, "-ctv: llama.cpp's name for --kv-type (K and V agree)");
  app.add_option("-t,--threads", f.n_threads, "CPU threads (0: all)")->check(CLI::NonNegativeNumber);
  app.add_option("--tile,--ubatch-size", f.n_tile, "prompt tokens evaluated per layer pass")
      ->check(CLI::PositiveNumber);
  app.add_flag("--reference", f.reference, "CPU: the plain scalar reference path (slow)");
}

Status resolve_cache_types(const std::string& k, const std::string& v, bool kv_type_given,
                           std::string* kv_type) {
  auto lower = [](std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  const std::string lk = lower(k), lv = lower(v);
  if (!lk.empty() && !lv.empty() && lk != lv) {
    return errorf("-ctk %s and -ctv %s: gem stores K and V in one type; give both the same type "
                  "(f32, f16 or f16-full)", k.c_str(), v.c_str());
  }
  const std::string t = !lk.empty() ? lk : lv;
  if (t.empty()) return ok_status();
  const char* flag = !lk.empty() ? "-ctk" : "-ctv";
  if (t != "f32" && t != "f16" && t != "f16-full") {
    return errorf("%s %s: KV cache type not supported; gem's KV cache holds f32, f16 (the default) "
                  "or f16-full (f32 sliding layers, f16 full-attention layers)%s",
                  flag, (!lk.empty() ? k : v).c_str(),
                  t == "bf16" || t.rfind("q", 0) == 0 || t.rfind("iq", 0) == 0
                      ? "; quantised KV types are not implemented"
                      : "");
  }
  if (kv_type_given && *kv_type != t) {
    return errorf("--kv-type %s and %s %s disagree: give one of them", kv_type->c_str(), flag, t.c_str());
  }
  *kv_type = t;
  return ok_status();
}

Result<std::unique_ptr<Backend>> make_backend(const model::Model& model, const BackendFlags& f) {
  BackendOptions options;
  options.n_ctx = f.n_ctx > 0 ? f.n_ctx : std::min(model.config.context_length, 32768);
  std::string kv_type = f.kv_type;
  GEM_RETURN_IF_ERROR(resolve_cache_types(f.cache_type_k, f.cache_type_v,
                                          f.kv_type != kDefaultKvType, &kv_type));
  GEM_ASSIGN_OR_RETURN(options.kv_type, model::parse_kv_type(kv_type));
  options.n_threads = f.n_threads;
  options.n_tile = f.n_tile;
  options.reference = f.reference;
  options.n_slots = std::max(1, f.n_slots);
  if (options.n_slots > kMaxSlots) {
    return errorf("-np/--parallel %d: expected at most %d sequence slots", options.n_slots,
                  kMaxSlots);
  }
  std::string kind = f.backend;
#ifdef GEM_HAVE_CUDA
  if (kind == "auto") kind = cuda_device_available() && !f.reference ? "cuda" : "cpu";
  if (kind == "cuda") return make_cuda_backend(model, options);
#else
  if (kind == "cuda") return errorf("--backend cuda: this gem was built without CUDA");
  if (kind == "auto") kind = "cpu";
#endif
  try {
    return cpu::make_cpu_backend(model, options);
  } catch (const std::bad_alloc&) {
    const double gib = static_cast<double>(model::kv_cache_bytes(
                           model.plan, options.n_ctx, options.kv_type, options.n_slots)) /
                       (1 << 30);
    return errorf("cpu: cannot allocate the KV caches of %d slots of %d positions (%.1f GiB); "
                  "use fewer slots (-np) or a smaller context (-c)",
                  options.n_slots, options.n_ctx, gib);
  }
}

Result<std::unique_ptr<Backend>> make_backend_default_slots(const model::Model& model,
                                                            BackendFlags flags, int* n_slots) {
  bool cuda = flags.backend == "cuda";
#ifdef GEM_HAVE_CUDA
  if (flags.backend == "auto") cuda = cuda_device_available() && !flags.reference;
#endif
  flags.n_slots = cuda ? kDefaultSlotsCuda : 1;
  for (;;) {
    auto made = make_backend(model, flags);
    if (made.ok() || flags.n_slots == 1) {
      *n_slots = flags.n_slots;
      return made;
    }
    GEM_LOG_WARN("-np %d: %s; trying %d slots", flags.n_slots, made.message().c_str(),
                 flags.n_slots / 2);
    flags.n_slots /= 2;
  }
}

}  // namespace gem::cli
