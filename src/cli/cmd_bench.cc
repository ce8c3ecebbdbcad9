// gem bench: prompt-processing (ppN) and generation (tgN) throughput at chosen context depths,
// llama-bench style: random tokens, the depth filled untimed before each repetition, median and
// samples per test, a markdown table or JSON. Works with the CPU and the CUDA backend.
//
// With --mtp ASSISTANT: speculative decoding's throughput against plain greedy decoding of the
// same random prompt in the same run — the assistant as it is (with random weights, acceptance
// ~0: the adaptation's cost), and with --forced-acceptance RATES a benchmark-only mode (never
// reachable from the server): the assistant drafts in full, then each proposal is replaced by
// the target's known greedy continuation with probability RATE per token (else a wrong token),
// so the round's machinery runs at a chosen acceptance. -v adds the round's parts (drafting,
// verification, truncation) in ms per round. --temp T > 0 runs plain decoding and the assistant
// as it is with sampling instead (the model's default top-k 64 and top-p 0.95, a fixed seed):
// the cost of sampled rounds and of their adaptation (forced rates are greedy rounds only).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
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
#include "base/sha256.h"
#include "base/timer.h"
#include "cli/backend_flags.h"
#include "cli/build_info.h"
#include "cli/command.h"
#include "cli/mtp_flags.h"
#include "model/model.h"
#include "runtime/engine.h"
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
  MtpFlags mtp;           // speculative mode: --mtp, --no-mtp, --draft-max, --draft-min
  std::string forced;     // --forced-acceptance: per-token acceptance rates, comma-separated
  float temp = 0.0f;      // --temp: with --mtp, sampled decoding (0: greedy)
};

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

// Forced acceptance (gem bench only): the inner drafter (the assistant) runs in full, then each
// of its proposals is replaced by the target's own greedy token at that position with
// probability `rate`, else by a token it would not choose, so drafts are accepted token by token
// at that rate until the first miss.
class ForcedDrafter final : public runtime::DraftSource {
 public:
  ForcedDrafter(runtime::DraftSource& inner, const std::vector<int32_t>& truth, double rate,
                int n_vocab)
      : inner_(inner), truth_(truth), rate_(rate), n_vocab_(n_vocab), rng_(7) {}
  std::vector<int32_t> propose(int32_t root, int pos, int row, int k) override {
    std::vector<int32_t> out = inner_.propose(root, pos, row, k);
    std::uniform_real_distribution<double> coin(0.0, 1.0);
    for (size_t i = 0; i < out.size() && pos + 1 + i < truth_.size(); ++i) {
      const int32_t t = truth_[pos + 1 + i];
      out[i] = coin(rng_) < rate_ ? t : (t + 1) % n_vocab_;
    }
    return out;
  }

 private:
  runtime::DraftSource& inner_;
  const std::vector<int32_t>& truth_;
  double rate_;
  int n_vocab_;
  std::mt19937 rng_;
};

// A flag's comma-separated list of rates in [0, 1].
Result<std::vector<double>> parse_rates(const char* flag, const std::string& s) {
  std::vector<double> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) {
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    if (item.empty() || end != item.c_str() + item.size() || !(v >= 0.0 && v <= 1.0)) {
      return errorf("%s: '%s' is not a rate in [0, 1]", flag, item.c_str());
    }
    out.push_back(v);
  }
  if (out.empty()) return errorf("%s: no rate given", flag);
  return out;
}

struct SpecRow {
  std::string mode;
  std::vector<double> tps;
  runtime::GenerateResult last;  // of the last repetition: counts and the round's parts
  std::string digest;            // SHA-256 of its tokens (greedy: each mode's equals plain's)
};

// Speculative mode: plain greedy decoding of n_gen tokens after a random prompt of n_prompt
// tokens (its output is the forced modes' truth), then the same request with the assistant as
// it is and at each forced rate; a warm-up request before each, then `reps` timed ones.
int run_speculative(const BenchArgs& a, const model::Model& m, std::unique_ptr<Backend> backend,
                    int n_prompt, int n_gen) {
  std::vector<double> rates;
  if (!a.forced.empty()) {
    auto r = parse_rates("--forced-acceptance", a.forced);
    if (!r.ok()) return fail("bench", r.message());
    rates = *r;
  }
  runtime::Engine engine(std::move(backend));
  const std::string backend_name(engine.backend().name());
  std::mt19937 rng(42);
  std::uniform_int_distribution<int32_t> tok(0, m.config.n_vocab - 1);
  runtime::GenerateRequest req;
  req.prompt.push_back(2);  // <bos>
  for (int i = 1; i < n_prompt; ++i) req.prompt.push_back(tok(rng));
  req.max_tokens = n_gen;
  req.sampling.temperature = a.temp;
  req.sampling.seed = 1234;  // the same draws in every repetition and mode
  req.stop_at_eog = false;
  req.draft_max = a.mtp.draft_max;
  req.draft_min = a.mtp.draft_min;
  std::vector<int32_t> truth;
  // One mode: a warm-up request, then the timed ones (tokens/s over the decode only: the prompt
  // is the cached one after the first request).
  const std::string sampled = a.temp > 0.0f ? strprintf(" (temp %.2f)", a.temp) : "";
  auto measure = [&](const std::string& mode, runtime::DraftSource* drafter) -> Result<SpecRow> {
    SpecRow row;
    row.mode = mode + sampled;
    req.drafter = drafter;
    for (int r = 0; r <= a.reps; ++r) {
      std::vector<int32_t> out;
      runtime::GenerateCallbacks cb;
      cb.on_token = [&out](int32_t t) {
        out.push_back(t);
        return true;
      };
      auto res = engine.generate(req, cb);
      if (!res.ok()) return res.status().with_context(mode + ": ");
      if (truth.empty()) {
        truth = req.prompt;
        truth.insert(truth.end(), out.begin(), out.end());
      }
      if (r == 0) continue;
      row.tps.push_back(res->n_generated / res->decode_seconds);
      row.last = *res;
      Sha256 sha;
      sha.update({reinterpret_cast<const uint8_t*>(out.data()), out.size() * sizeof(int32_t)});
      row.digest = Sha256::hex(sha.finish());
    }
    std::fprintf(stderr, "bench: %s done (median %.2f t/s)\n", mode.c_str(), median(row.tps));
    return row;
  };
  std::vector<SpecRow> rows;
  auto plain = measure("plain", nullptr);
  if (!plain.ok()) return fail("bench", plain.message());
  rows.push_back(*plain);
  auto drafter = make_mtp_drafter(engine.backend(), a.mtp);
  if (!drafter.ok()) return fail("bench", drafter.message());
  auto as_is = measure("mtp", drafter->get());
  if (!as_is.ok()) return fail("bench", as_is.message());
  rows.push_back(*as_is);
  for (double rate : rates) {
    ForcedDrafter forced(**drafter, truth, rate, m.config.n_vocab);
    auto r = measure(strprintf("mtp forced %.2f", rate), &forced);
    if (!r.ok()) return fail("bench", r.message());
    rows.push_back(*r);
  }

  const double base = median(rows[0].tps);
  const std::string model_name =
      strprintf("gemma4 %s", std::string(model::profile_name(m.config.profile)).c_str());
  if (a.output == "json") {
    nlohmann::json out = nlohmann::json::array();
    for (const SpecRow& r : rows) {
      const runtime::GenerateResult& g = r.last;
      const double per_round = g.n_rounds > 0 ? 1e3 / g.n_rounds : 0.0;
      out.push_back({{"model", model_name}, {"file", a.model}, {"mtp", a.mtp.mtp},
                     {"backend", backend_name}, {"kv_type", a.kv_type}, {"mode", r.mode},
                     {"n_prompt", n_prompt}, {"n_gen", n_gen}, {"draft_max", a.mtp.draft_max},
                     {"draft_min", a.mtp.draft_min}, {"temperature", a.temp},
                     {"median_tps", median(r.tps)},
                     {"samples_tps", r.tps}, {"speedup", median(r.tps) / base},
                     {"drafted", g.n_drafted}, {"accepted", g.n_draft_accepted},
                     {"rounds", g.n_rounds}, {"draft_ms_per_round", g.draft_seconds * per_round},
                     {"verify_ms_per_round", g.verify_seconds * per_round},
                     {"truncate_ms_per_round", g.truncate_seconds * per_round},
                     {"output_sha256", r.digest},
                     {"build_commit", build_commit()}});
    }
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("| model | backend | kv | test | mode | drafted | accepted | rate | t/s (median) | vs plain |%s\n",
              a.verbose ? " rounds | draft ms/round | verify ms/round | truncate ms/round |" : "");
  std::printf("| --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: |%s\n",
              a.verbose ? " ---: | ---: | ---: | ---: |" : "");
  for (const SpecRow& r : rows) {
    const runtime::GenerateResult& g = r.last;
    std::printf("| %s | %s | %s | tg%d @ p%d | %s | %d | %d | %.3f | %.2f | %.2fx |", model_name.c_str(),
                backend_name.c_str(), a.kv_type.c_str(), n_gen, n_prompt, r.mode.c_str(), g.n_drafted,
                g.n_draft_accepted, g.n_drafted > 0 ? static_cast<double>(g.n_draft_accepted) / g.n_drafted : 0.0,
                median(r.tps), median(r.tps) / base);
    if (a.verbose) {
      const double per_round = g.n_rounds > 0 ? 1e3 / g.n_rounds : 0.0;
      std::printf(" %d | %.3f | %.3f | %.3f |", g.n_rounds, g.draft_seconds * per_round,
                  g.verify_seconds * per_round, g.truncate_seconds * per_round);
    }
    std::printf("\n");
  }
  if (a.verbose) {
    std::printf("\nplain decode: %.3f ms/token\n", 1e3 / base);
  }
  std::printf("\nbuild: %s\n", build_commit());
  return 0;
}

int run_bench(const BenchArgs& a) {
  auto prompts = parse_int_list("-p", a.prompts, 0);
  auto gens = parse_int_list("-n", a.gens, 0);
  auto depths = parse_int_list("-d", a.depths, 0);
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
  if (a.mtp.on()) {  // the prompt, then the generated tokens
    need_ctx = std::max(1, *std::max_element(prompts->begin(), prompts->end())) +
               *std::max_element(gens->begin(), gens->end()) + 1;
  }

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
    if (a.mtp.on()) return fail("bench", "--parallel and --mtp: one at a time");
    auto seqs = parse_int_list("--parallel", a.parallel, 1);
    if (!seqs.ok()) return fail("bench", seqs.message());
    for (int n_seq : *seqs) {
      if (n_seq > kMaxSlots) {
        return fail("bench", strprintf("--parallel %d: expected at most %d sequences (the slots' limit, as -np)",
                                       n_seq, kMaxSlots));
      }
    }
    const int pp = (*prompts)[0], tg = (*gens)[0];
    if (prompts->size() != 1 || gens->size() != 1 || depths->size() != 1 || (*depths)[0] != 0) {
      return fail("bench", "--parallel takes one -p and one -n value and no depth (llama-batched-bench's test)");
    }
    std::mt19937 rng(42);
    std::vector<BatchedResult> results;
    for (int n_seq : *seqs) {
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
  if (!(a.temp >= 0.0f && a.temp <= 100.0f)) {
    return fail("bench", strprintf("--temp %g: expected a temperature in [0, 100] (0: greedy)", a.temp));
  }
  if (a.temp > 0.0f && !a.forced.empty()) {
    return fail("bench", "--forced-acceptance runs greedy rounds (the target's greedy tokens as "
                         "drafts); it takes no --temp");
  }
  if (a.mtp.on()) {
    if ((*prompts).size() != 1 || (*gens).size() != 1 || (*depths).size() != 1 || (*depths)[0] != 0 ||
        (*gens)[0] < 1) {
      return fail("bench", "--mtp takes one -p value (the prompt), one -n value (at least 1) and no "
                           "depth");
    }
    return run_speculative(a, m, std::move(made).value(), std::max((*prompts)[0], 1), (*gens)[0]);
  }
  if (!a.forced.empty()) return fail("bench", "--forced-acceptance needs --mtp");
  if (a.temp != 0.0f) return fail("bench", "--temp needs --mtp (plain tests decode greedily)");
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
  sub.add_flag("-v,--verbose", a->verbose,
               "print the CUDA backend's tuning record; with --mtp, the round's parts in ms");
  sub.add_option("--parallel", a->parallel,
                 "batched mode (llama-batched-bench): sequence counts, comma-separated; each "
                 "sequence evaluates its own -p prompt in one batch, then -n steps of one token "
                 "per sequence");
  add_mtp_flags(sub, a->mtp);
  sub.add_option("--temp", a->temp,
                 "with --mtp: sampled decoding at this temperature (top-k 64, top-p 0.95, a fixed "
                 "seed) for the plain and the assistant's rows; 0 (default): greedy");
  sub.add_option("--forced-acceptance", a->forced,
                 "with --mtp, benchmark only: also run with the assistant's proposals replaced by "
                 "the target's own greedy tokens at these per-token rates, comma-separated "
                 "(e.g. 1,0.9,0.7,0.5)");
  return [a] { return run_bench(*a); };
}

GEM_COMMAND(bench, "Prompt and generation throughput at chosen depths (llama-bench style)",
            setup_bench);

}  // namespace
}  // namespace gem::cli
