// gem logits: runs token ids through a backend and prints the top-K (id, logit) of every position
// as JSON, plus full logit vectors at chosen positions (inline or as raw f32 in --out), so any
// engine (llama.cpp's fixtures, tools/ref_forward.py, the CUDA backend) can be compared with gem.
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "cli/command.h"
#include "model/model.h"
#if defined(GEM_HAVE_CUDA)
#include "backend/cuda/cuda_backend.h"
#endif

namespace gem::cli {
namespace {

struct LogitsArgs {
  std::string model;
  std::string ids;
  int top = 20;
  std::string full_at;
  std::string out;
  std::string backend = "cpu";
  bool reference = false;
  int n_threads = 0;
  std::string kv_type = "f32";
  int tile = 256;
  int n_ctx = 0;
};

// "2,818,5279" -> ints; an error names the bad item.
Result<std::vector<int>> parse_int_list(const std::string& s, const char* what) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    int v = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (ec != std::errc() || end != item.data() + item.size()) {
      return errorf("%s: '%s' is not an integer", what, item.c_str());
    }
    out.push_back(v);
  }
  return out;
}

Status run(const LogitsArgs& a) {
  GEM_ASSIGN_OR_RETURN(std::vector<int> ids, parse_int_list(a.ids, "--ids"));
  if (ids.empty()) return errorf("--ids: no token ids given");
  GEM_ASSIGN_OR_RETURN(std::vector<int> full_at, parse_int_list(a.full_at, "--full-at"));
  for (int p : full_at) {
    if (p < 0 || p >= static_cast<int>(ids.size())) {
      return errorf("--full-at: position %d outside the %zu tokens", p, ids.size());
    }
  }
  GEM_ASSIGN_OR_RETURN(model::KvType kv, model::parse_kv_type(a.kv_type));
  GEM_ASSIGN_OR_RETURN(std::unique_ptr<model::Model> m, model::load_model(a.model));
  const int n_vocab = m->config.n_vocab;
  if (a.top < 0 || a.top > n_vocab) return errorf("--top %d: expected 0..%d", a.top, n_vocab);

  BackendOptions bo;
  bo.n_ctx = a.n_ctx > 0 ? a.n_ctx : static_cast<int>(ids.size());
  bo.kv_type = kv;
  bo.n_threads = a.n_threads;
  bo.n_tile = a.tile;
  bo.reference = a.reference;
  std::unique_ptr<Backend> backend;
  if (a.backend == "cpu") {
    GEM_ASSIGN_OR_RETURN(backend, cpu::make_cpu_backend(*m, bo));
  } else if (a.backend == "cuda") {
#if defined(GEM_HAVE_CUDA)
    GEM_ASSIGN_OR_RETURN(backend, make_cuda_backend(*m, bo));
#else
    return errorf("--backend cuda: this gem was built without the CUDA backend");
#endif
  } else {
    return errorf("--backend %s: expected cpu or cuda", a.backend.c_str());
  }

  const std::vector<int32_t> tokens(ids.begin(), ids.end());
  GEM_RETURN_IF_ERROR(backend->eval(tokens, /*all_logits=*/true));

  nlohmann::json j;
  j["model"] = a.model;
  j["backend"] = std::string(backend->name());
  j["kv_type"] = std::string(model::kv_type_name(kv));
  j["n_vocab"] = n_vocab;
  j["tokens"] = tokens;
  // Top-K per position, sorted by logit, ties by lower id (the fixtures' order).
  nlohmann::json positions = nlohmann::json::array();
  std::vector<int32_t> order(n_vocab);
  for (size_t p = 0; p < tokens.size(); ++p) {
    const std::span<const float> l = backend->logits(static_cast<int>(p));
    for (int i = 0; i < n_vocab; ++i) order[i] = i;
    std::partial_sort(order.begin(), order.begin() + a.top, order.end(), [&](int32_t x, int32_t y) {
      return l[x] != l[y] ? l[x] > l[y] : x < y;
    });
    nlohmann::json top = nlohmann::json::array();
    for (int i = 0; i < a.top; ++i) top.push_back({order[i], l[order[i]]});
    positions.push_back({{"pos", p}, {"top", top}});
  }
  j["positions"] = positions;

  nlohmann::json full = nlohmann::json::array();
  std::ofstream out;
  if (!a.out.empty() && !full_at.empty()) {
    out.open(a.out, std::ios::binary | std::ios::trunc);
    if (!out) return errorf("--out %s: cannot open for writing", a.out.c_str());
  }
  for (size_t k = 0; k < full_at.size(); ++k) {
    const std::span<const float> l = backend->logits(full_at[k]);
    if (out.is_open()) {
      // Raw little-endian f32, one vector after another in --full-at order (like the fixtures' .f32).
      out.write(reinterpret_cast<const char*>(l.data()), static_cast<std::streamsize>(l.size_bytes()));
      full.push_back({{"pos", full_at[k]}, {"file", a.out}, {"offset_bytes", k * l.size_bytes()}});
    } else {
      full.push_back({{"pos", full_at[k]}, {"logits", std::vector<float>(l.begin(), l.end())}});
    }
  }
  if (out.is_open()) {
    out.close();
    if (!out) return errorf("--out %s: write failed", a.out.c_str());
  }
  j["full"] = full;
  std::printf("%s\n", j.dump().c_str());
  return ok_status();
}

RunFn setup_logits(CLI::App& sub) {
  auto a = std::make_shared<LogitsArgs>();
  sub.add_option("-m,--model", a->model, "GGUF model file")->required();
  sub.add_option("--ids", a->ids, "token ids, comma-separated (positions 0..n-1)")->required();
  sub.add_option("--top", a->top, "top-K entries per position (default 20)");
  sub.add_option("--full-at", a->full_at, "positions whose full logit vector is printed, comma-separated");
  sub.add_option("--out", a->out, "write the --full-at vectors here as raw f32 instead of inline JSON");
  sub.add_option("--backend", a->backend, "cpu (default) or cuda");
  sub.add_flag("--reference", a->reference, "CPU: the scalar reference path instead of the fast one");
  sub.add_option("-t,--threads", a->n_threads, "threads (default: all)");
  sub.add_option("--kv-type", a->kv_type, "KV storage: f32 (default), f16 or f16-full");
  sub.add_option("--tile", a->tile, "prompt tokens per layer pass (default 256)");
  sub.add_option("-c,--ctx-size", a->n_ctx, "KV positions (default: the number of ids)");
  return [a] {
    const Status st = run(*a);
    return st.ok() ? 0 : fail("logits", st.message());
  };
}

}  // namespace

GEM_COMMAND(logits, "Print per-position top-K logits (and full vectors) for token ids, as JSON",
            setup_logits);

}  // namespace gem::cli
