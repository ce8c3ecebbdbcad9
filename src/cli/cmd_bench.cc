// gem bench: prompt-processing (ppN) and generation (tgN) throughput at chosen context depths,
// llama-bench style: random tokens, the depth filled untimed before each repetition, median and
// samples per test, a markdown table or JSON. Works with the CPU and the CUDA backend.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/isa.h"
#include "base/timer.h"
#include "cli/backend_flags.h"
#include "cli/build_info.h"
#include "cli/command.h"
#include "model/model.h"
#if GEM_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace gem::cli {
namespace {

struct BenchArgs {
  std::string model;
  std::string prompts = "512";
  std::string gens = "128";
  std::string depths = "0";
  int reps = 3;
  std::string backend = "auto";
  std::string kv_type = kDefaultKvType;
  int tile = 512;
  int threads = 0;
  int n_ctx = 0;
  std::string output = "md";
  bool verbose = false;
  std::string parallel;  // batched mode: sequence counts (llama-batched-bench's -npl)
};

Result<std::vector<int>> parse_list(const std::string& flag, const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      const int v = std::stoi(item, &used);
      if (used != item.size() || v < 0) throw std::invalid_argument(item);
      out.push_back(v);
    } catch (const std::exception&) {
      return errorf("%s: '%s' is not a non-negative integer", flag.c_str(), item.c_str());
    }
  }
  if (out.empty()) return errorf("%s: empty list", flag.c_str());
  return out;
}

struct Test {
  int n_prompt = 0;  // ppN when > 0
  int n_gen = 0;     // tgN when > 0
  int depth = 0;
  std::vector<double> tps;
  std::string name() const {
    std::string s = n_prompt > 0 ? strprintf("pp%d", n_prompt) : strprintf("tg%d", n_gen);
    if (depth > 0) s += strprintf(" @ d%d", depth);
    return s;
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

// Evaluates `n` random tokens in tiles (the backend tiles by itself).
Status feed(Backend& b, std::mt19937& rng, int n_vocab, int n) {
  std::uniform_int_distribution<int32_t> tok(0, n_vocab - 1);
  std::vector<int32_t> tokens(n);
  for (int32_t& t : tokens) t = tok(rng);
  return b.eval(tokens, false);
}

// Fills the test's depth with random tokens (untimed) and marks it as the restore point, so
// every repetition starts from the same cache without refilling it.
Status prepare(Backend& b, const Test& t, int n_vocab, std::mt19937& rng) {
  b.reset();
  if (t.depth > 0) GEM_RETURN_IF_ERROR(feed(b, rng, n_vocab, t.depth));
  b.checkpoint();
  return ok_status();
}

// One timed repetition of `t` from the prepared depth; returns tokens per second.
Result<double> run_once(Backend& b, const Test& t, int n_vocab, std::mt19937& rng) {
  b.restore();
  std::uniform_int_distribution<int32_t> tok(0, n_vocab - 1);
  if (t.n_prompt > 0) {
    std::vector<int32_t> tokens(t.n_prompt);
    for (int32_t& x : tokens) x = tok(rng);
    Timer timer;
    GEM_RETURN_IF_ERROR(b.eval(tokens, false));
    (void)b.logits();  // the result is on the host: the work is done
    return t.n_prompt / timer.seconds();
  }
  Timer timer;
  for (int i = 0; i < t.n_gen; ++i) {
    const int32_t one[] = {tok(rng)};
    GEM_RETURN_IF_ERROR(b.eval(one, false));
  }
  return t.n_gen / timer.seconds();
}

// Batched mode, llama-batched-bench's test and columns: for each B, B sequences (one slot each)
// evaluate their own random prompt of PP tokens as one batch, then TG steps of B rows (one token
// per sequence, logits for each); prompt, generation and overall tokens per second.
struct BatchedResult {
  int pp = 0, tg = 0, b = 0;
  double t_pp = 0.0, t_tg = 0.0;
};

Result<BatchedResult> run_batched(const model::Model& m, const std::string& backend,
                                  BackendOptions o, int pp, int tg, int n_seq, std::mt19937& rng) {
  o.n_slots = n_seq;
  o.n_ctx = std::max(o.n_ctx, pp + tg);
  Result<std::unique_ptr<Backend>> made = Status::error("unknown backend '" + backend + "' (cpu, cuda)");
  if (backend == "cpu") made = cpu::make_cpu_backend(m, o);
#if GEM_HAVE_CUDA
  if (backend == "cuda") made = make_cuda_backend(m, o);
#endif
  if (!made.ok()) return made.status();
  Backend& b = **made;
  const int n_vocab = m.config.n_vocab;
  std::uniform_int_distribution<int32_t> tok(0, n_vocab - 1);
  std::vector<BatchRow> rows;
  auto prompt_rows = [&] {
    rows.clear();
    for (int s = 0; s < n_seq; ++s) {
      for (int i = 0; i < pp; ++i) rows.push_back({s, i, tok(rng), i + 1 == pp});
    }
  };
  // Warm-up: one prompt batch and one generation step (graph captures, cuBLAS heuristics),
  // then every slot emptied.
  prompt_rows();
  GEM_RETURN_IF_ERROR(b.eval_batch(rows));
  if (tg > 0) {
    rows.clear();
    for (int s = 0; s < n_seq; ++s) rows.push_back({s, pp, tok(rng), true});
    GEM_RETURN_IF_ERROR(b.eval_batch(rows));
  }
  for (int s = 0; s < n_seq; ++s) b.slot_reset(s);

  BatchedResult r{pp, tg, n_seq, 0.0, 0.0};
  prompt_rows();
  Timer t_pp;
  GEM_RETURN_IF_ERROR(b.eval_batch(rows));
  (void)b.batch_logits(0);
  r.t_pp = t_pp.seconds();
  Timer t_tg;
  for (int step = 0; step < tg; ++step) {
    rows.clear();
    for (int s = 0; s < n_seq; ++s) rows.push_back({s, pp + step, tok(rng), true});
    GEM_RETURN_IF_ERROR(b.eval_batch(rows));
    (void)b.batch_logits(n_seq - 1);
  }
  r.t_tg = t_tg.seconds();
  return r;
}

int run_bench(const BenchArgs& a) {
  auto prompts = parse_list("-p", a.prompts);
  auto gens = parse_list("-n", a.gens);
  auto depths = parse_list("-d", a.depths);
  if (!prompts.ok()) return fail("bench", prompts.message());
  if (!gens.ok()) return fail("bench", gens.message());
  if (!depths.ok()) return fail("bench", depths.message());
  if (a.reps < 1) return fail("bench", strprintf("-r %d: at least one repetition", a.reps));
  auto kv = model::parse_kv_type(a.kv_type);
  if (!kv.ok()) return fail("bench", kv.message());

  std::vector<Test> tests;
  int need_ctx = 1;
  for (int d : *depths) {
    for (int p : *prompts) {
      if (p > 0) tests.push_back({p, 0, d, {}});
      need_ctx = std::max(need_ctx, d + p);
    }
    for (int n : *gens) {
      if (n > 0) tests.push_back({0, n, d, {}});
      need_ctx = std::max(need_ctx, d + n);
    }
  }
  if (tests.empty()) return fail("bench", "no test: every -p and -n value is 0");

  auto loaded = model::load_model(a.model);
  if (!loaded.ok()) return fail("bench", "loading " + a.model + ": " + loaded.message());
  const model::Model& m = **loaded;

  std::string backend = a.backend;
#if GEM_HAVE_CUDA
  if (backend == "auto") backend = cuda_device_available() ? "cuda" : "cpu";
#else
  if (backend == "auto") backend = "cpu";
#endif
  BackendOptions o;
  o.n_ctx = a.n_ctx > 0 ? a.n_ctx : need_ctx;
  if (o.n_ctx < need_ctx) {
    return fail("bench", strprintf("-c %d is smaller than the largest test (%d)", a.n_ctx, need_ctx));
  }
  o.kv_type = *kv;
  o.n_tile = a.tile;
  o.n_threads = a.threads;
  // Each sequence count makes its own backend (its slots are fixed at creation).
  if (!a.parallel.empty()) {
    auto seqs = parse_list("--parallel", a.parallel);
    if (!seqs.ok()) return fail("bench", seqs.message());
    const int pp = (*prompts)[0], tg = (*gens)[0];
    if (prompts->size() != 1 || gens->size() != 1 || depths->size() != 1 || (*depths)[0] != 0) {
      return fail("bench", "--parallel takes one -p and one -n value and no depth (llama-batched-bench's test)");
    }
    std::mt19937 rng(42);
    std::vector<BatchedResult> results;
    for (int n_seq : *seqs) {
      if (n_seq < 1) return fail("bench", "--parallel: sequence counts start at 1");
      auto r = run_batched(m, backend, o, std::max(pp, 1), tg, n_seq, rng);
      if (!r.ok()) return fail("bench", strprintf("--parallel %d: %s", n_seq, r.message().c_str()));
      results.push_back(*r);
      std::fprintf(stderr, "bench: B=%d done\n", n_seq);
    }
    nlohmann::json out = nlohmann::json::array();
    if (a.output == "md") {
      std::printf("|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |      T s |    S t/s |\n");
      std::printf("|-------|--------|------|--------|----------|----------|----------|----------|----------|----------|\n");
    }
    for (const BatchedResult& r : results) {
      const int n_kv = r.b * (r.pp + r.tg);
      const double s_pp = r.b * r.pp / r.t_pp, s_tg = r.tg > 0 ? r.b * r.tg / r.t_tg : 0.0;
      const double t = r.t_pp + r.t_tg;
      if (a.output == "md") {
        std::printf("| %5d | %6d | %4d | %6d | %8.3f | %8.2f | %8.3f | %8.2f | %8.3f | %8.2f |\n", r.pp,
                    r.tg, r.b, n_kv, r.t_pp, s_pp, r.t_tg, s_tg, t, n_kv / t);
      }
      out.push_back({{"pp", r.pp}, {"tg", r.tg}, {"pl", r.b}, {"n_kv", n_kv}, {"t_pp", r.t_pp},
                     {"speed_pp", s_pp}, {"t_tg", r.t_tg}, {"speed_tg", s_tg}, {"t", t},
                     {"speed", n_kv / t}, {"backend", backend}, {"file", a.model},
                     {"kv_type", a.kv_type}, {"build_commit", build_commit()}});
    }
    if (a.output == "json") std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  Result<std::unique_ptr<Backend>> made = Status::error("unknown backend '" + backend + "' (cpu, cuda)");
  if (backend == "cpu") made = cpu::make_cpu_backend(m, o);
#if GEM_HAVE_CUDA
  if (backend == "cuda") {
    const cuda::CudaTuning tuning = cuda::tuning_from_env();
    if (a.verbose) std::fprintf(stderr, "cuda tuning:\n%s", cuda::describe(tuning).c_str());
    made = make_cuda_backend(m, o, tuning);
  }
#else
  if (backend == "cuda") made = Status::error("this gem was built without the CUDA backend");
#endif
  if (!made.ok()) return fail("bench", made.message());
  Backend& b = **made;
  if (backend == "cpu") {
    std::fprintf(stderr, "bench: cpu kernels %s, packed weights %.2f GB\n",
                 cpu::isa_description().c_str(),
                 static_cast<double>(cpu::cpu_backend_memory(b).packed_bytes) / 1e9);
  }

  uint64_t bytes = m.weights.token_embd.n_bytes;
  uint64_t params = static_cast<uint64_t>(m.weights.token_embd.rows) * m.weights.token_embd.cols;
  for (const model::LayerWeights& lw : m.weights.layers) {
    for (const model::TensorView* t : {&lw.attn_q, &lw.attn_k, &lw.attn_v, &lw.attn_output,
                                       &lw.ffn_gate, &lw.ffn_up, &lw.ffn_down}) {
      if (!t->present()) continue;
      bytes += t->n_bytes;
      params += static_cast<uint64_t>(t->rows) * t->cols;
    }
  }

  std::mt19937 rng(42);
  const int n_vocab = m.config.n_vocab;
  for (Test& t : tests) {
    // Warm-up (llama-bench does one too): clocks, the CUDA graph capture, cuBLAS heuristics.
    Test warm = t;
    warm.n_prompt = std::min(t.n_prompt, 512);
    warm.n_gen = std::min(t.n_gen, 4);  // within the context the tests asked for
    warm.depth = 0;
    if (Status st = prepare(b, warm, n_vocab, rng); !st.ok()) return fail("bench", st.message());
    if (auto w = run_once(b, warm, n_vocab, rng); !w.ok()) return fail("bench", w.message());
    if (Status st = prepare(b, t, n_vocab, rng); !st.ok()) {
      return fail("bench", t.name() + ": filling the depth: " + st.message());
    }
    for (int r = 0; r < a.reps; ++r) {
      auto tps = run_once(b, t, n_vocab, rng);
      if (!tps.ok()) return fail("bench", t.name() + ": " + tps.message());
      t.tps.push_back(*tps);
    }
    if (a.output == "md") {
      std::fprintf(stderr, "bench: %s done (median %.2f t/s)\n", t.name().c_str(), median(t.tps));
    }
  }

  const std::string model_name =
      strprintf("gemma4 %s", std::string(model::profile_name(m.config.profile)).c_str());
  if (a.output == "json") {
    nlohmann::json out = nlohmann::json::array();
    for (const Test& t : tests) {
      out.push_back({{"model", model_name},
                     {"file", a.model},
                     {"model_bytes", bytes},
                     {"params", params},
                     {"backend", std::string(b.name())},
                     {"kv_type", a.kv_type},
                     {"n_tile", a.tile},
                     {"n_prompt", t.n_prompt},
                     {"n_gen", t.n_gen},
                     {"depth", t.depth},
                     {"test", t.name()},
                     {"median_tps", median(t.tps)},
                     {"samples_tps", t.tps},
                     {"build_commit", build_commit()}});
    }
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("| model | size | params | backend | kv | tile | test | t/s (median) | samples |\n");
  std::printf("| --- | ---: | ---: | --- | --- | ---: | ---: | ---: | --- |\n");
  for (const Test& t : tests) {
    std::string samples;
    for (double v : t.tps) samples += strprintf("%s%.2f", samples.empty() ? "" : ", ", v);
    std::printf("| %s | %.2f GiB | %.2f B | %s | %s | %d | %s | %.2f | %s |\n", model_name.c_str(),
                bytes / 1073741824.0, params / 1e9, std::string(b.name()).c_str(), a.kv_type.c_str(),
                a.tile, t.name().c_str(), median(t.tps), samples.c_str());
  }
  std::printf("\nbuild: %s\n", build_commit());
  return 0;
}

RunFn setup_bench(CLI::App& sub) {
  auto a = std::make_shared<BenchArgs>();
  sub.add_option("-m,--model", a->model, "GGUF model file")->required();
  sub.add_option("-p,--n-prompt", a->prompts, "prompt lengths, comma-separated (0 = none)");
  sub.add_option("-n,--n-gen", a->gens, "generated-token counts, comma-separated (0 = none)");
  sub.add_option("-d,--depth", a->depths, "context depths filled before each test, comma-separated");
  sub.add_option("-r,--repetitions", a->reps, "timed repetitions per test");
  sub.add_option("--backend", a->backend, "auto (cuda when a GPU is present), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  sub.add_option("--kv-type", a->kv_type, "KV cache type: f32, f16 (llama-bench's default) or f16-full");
  sub.add_option("--tile", a->tile, "prompt tokens per layer pass (llama.cpp's n_ubatch)");
  sub.add_option("-t,--threads", a->threads, "CPU threads (0 = all)");
  sub.add_option("-c,--ctx-size", a->n_ctx, "context size (default: the largest depth + test)");
  sub.add_option("-o,--output", a->output, "md (table) or json")->check(CLI::IsMember({"md", "json"}));
  sub.add_flag("-v,--verbose", a->verbose, "print the CUDA backend's tuning record");
  sub.add_option("--parallel", a->parallel,
                 "batched mode (llama-batched-bench): sequence counts, comma-separated; each "
                 "sequence evaluates its own -p prompt in one batch, then -n steps of one token "
                 "per sequence");
  return [a] { return run_bench(*a); };
}

GEM_COMMAND(bench, "Prompt and generation throughput at chosen depths (llama-bench style)",
            setup_bench);

}  // namespace
}  // namespace gem::cli
