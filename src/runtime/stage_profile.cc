// gem profile's measurement loop and byte model (stage_profile.h). Every sample restores the
// checkpoint taken at the depth, so each pass sees the same cache; plain and profiled samples
// alternate so that drift (clocks, other load) reaches both alike.
#include "runtime/stage_profile.h"

#include <algorithm>
#include <array>
#include <optional>
#include <random>

#include "base/timer.h"
#include "sampler/sampler.h"

namespace gem::runtime {
namespace {

constexpr int kScopeCount = 3;

// KV element bytes of one layer under `kv` (the cache layouts of both backends).
uint64_t kv_elem_bytes(model::KvType kv, const model::LayerPlan& p) {
  if (kv == model::KvType::kF16) return 2;
  if (kv == model::KvType::kF16Full && p.kind == model::AttnKind::kFull) return 2;
  return 4;
}

StageScope scope_of(const model::Model& m, int layer) {
  if (layer < 0 || layer >= static_cast<int>(m.plan.size())) return StageScope::kGlobal;
  return m.plan[layer].kind == model::AttnKind::kSliding ? StageScope::kSliding : StageScope::kFull;
}

int layers_in(const model::Model& m, StageScope scope) {
  if (scope == StageScope::kGlobal) return 0;
  int n = 0;
  for (int l = 0; l < static_cast<int>(m.plan.size()); ++l) n += scope_of(m, l) == scope;
  return n;
}

// The bytes of one layer's stage (f32 activations: 4 bytes a value).
StageBytes layer_stage_bytes(const model::Model& m, model::KvType kv, Stage stage, int layer,
                             int rows, int depth, PassShape shape) {
  const bool batch = shape == PassShape::kBatch;
  const model::LayerPlan& p = m.plan[layer];
  const model::LayerWeights& w = m.weights.layers[layer];
  const uint64_t n = rows, e = m.config.n_embd, f = m.config.n_ff;
  const uint64_t qw = static_cast<uint64_t>(p.n_heads) * p.head_dim;
  const uint64_t kvw = static_cast<uint64_t>(p.n_kv_heads) * p.head_dim;
  const uint64_t elem = kv_elem_bytes(kv, p);
  StageBytes b;
  switch (stage) {
    case Stage::kNorm:
      // attn_norm, post_attention_norm, ffn_norm, post_ffw_norm over [n, E]; the per-head norms
      // of Q, K and V; each read and written once.
      for (const model::TensorView* t : {&w.attn_norm, &w.post_attention_norm, &w.ffn_norm,
                                         &w.post_ffw_norm, &w.attn_q_norm, &w.attn_k_norm}) {
        b.weights += t->n_bytes;
      }
      b.activations = 4 * n * (2 * 4 * e + 2 * (qw + 2 * kvw));
      break;
    case Stage::kQkv:
      b.weights = w.attn_q.n_bytes + w.attn_k.n_bytes + (w.attn_v.present() ? w.attn_v.n_bytes : 0);
      b.activations = 4 * n * (e + qw + 2 * kvw);
      break;
    case Stage::kRope:
      b.activations = 4 * n * 2 * (qw + kvw);
      break;
    case Stage::kKvWrite:
      b.kv = n * 2 * kvw * elem;
      b.activations = 4 * n * 2 * kvw;
      break;
    case Stage::kAttention: {
      // The distinct keys the pass reads: a ring holds the last window-1 before the pass.
      const uint64_t cached = p.kind == model::AttnKind::kSliding && p.window > 0
                                  ? std::min(depth, p.window - 1)
                                  : depth;
      // A batch: each of the n sequences reads its own cached keys and its row's key; a tile or a
      // verification: one sequence's keys, the cached ones and its rows'.
      b.kv = (batch ? n * (cached + 1) : cached + n) * 2 * kvw * elem;
      b.activations = 4 * n * 2 * qw;
      break;
    }
    case Stage::kAttnOut:
      b.weights = w.attn_output.n_bytes;
      b.activations = 4 * n * (qw + e);
      break;
    case Stage::kFfnGateUp:
      b.weights = w.ffn_gate.n_bytes + w.ffn_up.n_bytes;
      b.activations = 4 * n * (e + 2 * f);
      break;
    case Stage::kGelu:
      b.activations = 4 * n * 3 * f;
      break;
    case Stage::kFfnDown:
      b.weights = w.ffn_down.n_bytes;
      b.activations = 4 * n * (f + e);
      break;
    case Stage::kEpilogue:
      // Two residual adds (read two, write one) and the scale of the stream (read, write).
      b.weights = w.layer_output_scale.n_bytes;
      b.activations = 4 * n * 8 * e;
      break;
    default:
      break;
  }
  return b;
}

StageBytes global_stage_bytes(const model::Model& m, Stage stage, int rows, PassShape shape) {
  const bool every_row = shape != PassShape::kTile;  // every row's logits
  const uint64_t n = rows, e = m.config.n_embd, v = m.config.n_vocab;
  const model::TensorView& embd = m.weights.token_embd;
  StageBytes b;
  switch (stage) {
    case Stage::kSetup:
      b.activations = 4 * (n + 1);  // the step's position and token ids
      break;
    case Stage::kEmbed:
      b.weights = n * embd.row_bytes();
      b.activations = 4 * n * e;
      break;
    case Stage::kHead:
      b.weights = embd.n_bytes + m.weights.output_norm.n_bytes;
      b.activations = 4 * (every_row ? n : 1) * (e + v);  // the last row only, or every row's
      break;
    case Stage::kSample:
      b.activations = 4 * (every_row ? n : 1) * v;  // the row sampled, or every row's
      break;
    default:
      break;
  }
  return b;
}

// Sums of one sample's records per (stage, scope).
struct SampleSums {
  std::array<std::array<double, kScopeCount>, kStageCount> s{};
  std::array<std::array<bool, kScopeCount>, kStageCount> seen{};
  void add(const model::Model& m, const StageProfiler& profiler) {
    for (const StageProfiler::Record& r : profiler.records()) {
      const int st = static_cast<int>(r.stage), sc = static_cast<int>(scope_of(m, r.layer));
      s[st][sc] += r.seconds;
      seen[st][sc] = true;
    }
  }
};

// Mean and min over the samples of each (stage, scope) seen in any of them.
std::vector<StageRow> stage_rows(const model::Model& m, model::KvType kv,
                                 const std::vector<SampleSums>& samples, int rows, int depth,
                                 PassShape shape) {
  std::vector<StageRow> out;
  for (int st = 0; st < kStageCount; ++st) {
    for (int sc = 0; sc < kScopeCount; ++sc) {
      bool any = false;
      for (const SampleSums& x : samples) any = any || x.seen[st][sc];
      if (!any) continue;
      StageRow r;
      r.stage = static_cast<Stage>(st);
      r.scope = static_cast<StageScope>(sc);
      r.n_layers = layers_in(m, r.scope);
      r.min_s = samples.front().s[st][sc];
      for (const SampleSums& x : samples) {
        r.mean_s += x.s[st][sc];
        r.min_s = std::min(r.min_s, x.s[st][sc]);
      }
      r.mean_s /= static_cast<double>(samples.size());
      r.bytes = stage_bytes(m, kv, r.stage, r.scope, rows, depth, shape);
      out.push_back(r);
    }
  }
  return out;
}

// Turns profiling off on every way out of a measurement.
class ProfilerOff {
 public:
  explicit ProfilerOff(Backend& b) : b_(b) {}
  ~ProfilerOff() { (void)b_.set_stage_profiler(nullptr); }
  ProfilerOff(const ProfilerOff&) = delete;
  ProfilerOff& operator=(const ProfilerOff&) = delete;

 private:
  Backend& b_;
};

// The sampling a server applies by default: the model's recommendation over SamplingParams'.
SamplingParams default_sampling(const model::Config& c) {
  SamplingParams s;
  if (c.sampling_temp) s.temperature = *c.sampling_temp;
  if (c.sampling_top_k) s.top_k = *c.sampling_top_k;
  if (c.sampling_top_p) s.top_p = *c.sampling_top_p;
  if (c.sampling_min_p) s.min_p = *c.sampling_min_p;
  return s;
}

// One profiled eval of `tokens` from the checkpoint: the records land in `profiler`, the eval's
// wall time in *wall. With `sampling`, picking the next token is timed too (Stage::kSample).
Status profiled_pass(Backend& b, std::span<const int32_t> tokens, StageProfiler& profiler,
                     const SamplingParams* sampling, std::span<const int32_t> history, Rng& rng,
                     double* wall) {
  b.restore();
  profiler.clear();
  GEM_RETURN_IF_ERROR(b.set_stage_profiler(&profiler));
  Timer timer;
  Status st = b.eval(tokens, false);
  *wall = timer.seconds();
  GEM_RETURN_IF_ERROR(b.set_stage_profiler(nullptr));
  GEM_RETURN_IF_ERROR(st);
  if (sampling != nullptr) {
    const double coin = rng.next_double();
    Timer t;
    std::optional<int32_t> id = b.sample(*sampling, history, coin);
    if (!id) (void)sample_token(b.logits(), *sampling, history, coin);
    profiler.add(Stage::kSample, -1, t.seconds());
  }
  return ok_status();
}

// The same eval with profiling off, timed as gem bench times it (a prompt until its logits are
// on the host; a decode step until eval returns).
Result<double> plain_pass(Backend& b, std::span<const int32_t> tokens) {
  b.restore();
  Timer timer;
  GEM_RETURN_IF_ERROR(b.eval(tokens, false));
  if (tokens.size() > 1) (void)b.logits();
  return timer.seconds();
}

// One eval_batch of `shape` kBatch (sequence s, in slot s, decodes tokens[s] at `depth`) or
// kVerify (slot 0 evaluates tokens[i] at depth + i), every row's logits; then the slots go back
// to the depth. Profiled when `profiler` is set; *wall is the eval_batch's time, as gem bench
// --parallel times a step. With `sampling` (profiled passes), every row's token is then drawn as
// the server's scheduler draws it (Backend::sample_batch, the host for the rows it leaves) and
// timed (Stage::kSample).
Status batch_pass(Backend& b, PassShape shape, std::span<const int32_t> tokens, int depth,
                  StageProfiler* profiler, const SamplingParams* sampling,
                  std::span<const int32_t> history, Rng& rng, double* wall) {
  const bool verify = shape == PassShape::kVerify;
  std::vector<BatchRow> rows;
  for (size_t s = 0; s < tokens.size(); ++s) {
    const int i = static_cast<int>(s);
    rows.push_back(BatchRow{verify ? 0 : i, verify ? depth + i : depth, tokens[s], true});
  }
  if (profiler != nullptr) {
    profiler->clear();
    GEM_RETURN_IF_ERROR(b.set_stage_profiler(profiler));
  }
  Timer timer;
  Status st = b.eval_batch(rows);
  *wall = timer.seconds();
  if (profiler != nullptr) GEM_RETURN_IF_ERROR(b.set_stage_profiler(nullptr));
  GEM_RETURN_IF_ERROR(st);
  if (profiler != nullptr && sampling != nullptr) {
    std::vector<Backend::BatchSample> reqs(tokens.size());
    for (Backend::BatchSample& r : reqs) {
      r.params = sampling;
      r.history = history;
      r.coin = rng.next_double();
    }
    Timer t;
    const std::vector<std::optional<int32_t>> picks = b.sample_batch(reqs);
    for (size_t i = 0; i < reqs.size(); ++i) {
      if (i >= picks.size() || !picks[i]) {
        (void)sample_token(b.batch_logits(static_cast<int>(i)), *sampling, history, reqs[i].coin);
      }
    }
    profiler->add(Stage::kSample, -1, t.seconds());
  }
  const size_t n_slots = verify ? 1 : tokens.size();
  for (size_t s = 0; s < n_slots; ++s) {
    GEM_RETURN_IF_ERROR(b.slot_truncate(static_cast<int>(s), depth));
  }
  return ok_status();
}

// n_samples of one shape, plain and profiled in turn (plain(): a pass's seconds; profiled(w): a
// pass whose stage records land in `profiler`, its wall time in *w), and their means, minima and
// totals.
template <typename Plain, typename Profiled>
Result<PassProfile> sample_pass(const model::Model& model, model::KvType kv, int rows, PassShape shape,
                                int depth, int n_samples, const StageProfiler& profiler,
                                Plain plain_fn, Profiled profiled_fn) {
  std::vector<SampleSums> sums(n_samples);
  std::vector<double> plain;
  double profiled_wall_mean = 0.0;
  for (int i = 0; i < n_samples; ++i) {
    Result<double> t = plain_fn();
    if (!t.ok()) return t.status();
    plain.push_back(*t);
    double wall = 0.0;
    GEM_RETURN_IF_ERROR(profiled_fn(&wall));
    sums[i].add(model, profiler);
    profiled_wall_mean += wall / n_samples;
  }
  PassProfile pass;
  pass.rows = rows;
  pass.shape = shape;
  pass.depth = depth;
  pass.n_samples = static_cast<int>(sums.size());
  pass.profiled_eval_mean_s = profiled_wall_mean;
  pass.stages = stage_rows(model, kv, sums, rows, depth, shape);
  for (const StageRow& r : pass.stages) {
    pass.stages_mean_s += r.mean_s;
    if (r.stage != Stage::kSample) pass.forward_mean_s += r.mean_s;
  }
  pass.forward_min_s = -1.0;
  for (const SampleSums& x : sums) {
    double forward = 0.0;
    for (int st = 0; st < kStageCount; ++st) {
      if (static_cast<Stage>(st) == Stage::kSample) continue;
      for (int sc = 0; sc < kScopeCount; ++sc) forward += x.s[st][sc];
    }
    if (pass.forward_min_s < 0.0 || forward < pass.forward_min_s) pass.forward_min_s = forward;
  }
  for (double t : plain) pass.plain_mean_s += t / plain.size();
  pass.plain_min_s = *std::min_element(plain.begin(), plain.end());
  return pass;
}

}  // namespace

std::string_view scope_name(StageScope s) {
  switch (s) {
    case StageScope::kSliding:
      return "sliding";
    case StageScope::kFull:
      return "full";
    case StageScope::kGlobal:
      return "global";
  }
  return "?";
}

std::string_view shape_name(PassShape s) {
  switch (s) {
    case PassShape::kTile:
      return "tile";
    case PassShape::kBatch:
      return "batch";
    case PassShape::kVerify:
      return "verify";
  }
  return "?";
}

StageBytes stage_bytes(const model::Model& model, model::KvType kv_type, Stage stage,
                       StageScope scope, int rows, int depth, PassShape shape) {
  if (scope == StageScope::kGlobal) return global_stage_bytes(model, stage, rows, shape);
  StageBytes sum;
  for (int l = 0; l < static_cast<int>(model.plan.size()); ++l) {
    if (scope_of(model, l) != scope) continue;
    const StageBytes b = layer_stage_bytes(model, kv_type, stage, l, rows, depth, shape);
    sum.weights += b.weights;
    sum.kv += b.kv;
    sum.activations += b.activations;
  }
  return sum;
}

std::vector<int32_t> synthetic_tokens(uint32_t seed, int n, int n_vocab) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> tok(0, n_vocab - 1);
  std::vector<int32_t> out(std::max(n, 0));
  for (int32_t& t : out) t = tok(rng);
  return out;
}

Result<ProfileReport> profile_stages(Backend& backend, const model::Model& model,
                                     const ProfileOptions& o, StageProfiler& profiler) {
  if (o.depth < 0) return errorf("profile: depth %d, expected >= 0", o.depth);
  if (o.n_samples < 1) return errorf("profile: %d samples, expected at least 1", o.n_samples);
  if (o.rows.empty() && o.batch.empty() && o.verify.empty()) {
    return errorf("profile: no pass shape (rows) given");
  }
  int max_batch = 0;
  for (int b : o.batch) {
    if (b < 1) return errorf("profile: a batch of %d sequences, expected at least 1", b);
    max_batch = std::max(max_batch, b);
  }
  if (max_batch > backend.options().n_slots) {
    return errorf("profile: a batch of %d sequences needs %d slots, the backend has %d", max_batch,
                  max_batch, backend.options().n_slots);
  }
  if (max_batch > 0 && static_cast<int64_t>(o.depth) + 1 > backend.options().n_ctx) {
    return errorf("profile: depth %d + 1 row exceeds the backend's context of %d", o.depth,
                  backend.options().n_ctx);
  }
  int max_rows = 0;
  for (int r : o.rows) {
    if (r < 1) return errorf("profile: a pass of %d rows, expected at least 1", r);
    max_rows = std::max(max_rows, r);
  }
  for (int r : o.verify) {
    if (r < 1) return errorf("profile: a verification of %d rows, expected at least 1", r);
    if (static_cast<int64_t>(o.depth) + r > backend.options().n_ctx) {
      return errorf("profile: depth %d + a verification of %d rows exceed the backend's context "
                    "of %d", o.depth, r, backend.options().n_ctx);
    }
  }
  const BackendOptions& bo = backend.options();
  if (static_cast<int64_t>(o.depth) + max_rows > bo.n_ctx) {
    return errorf("profile: depth %d + %d rows exceed the backend's context of %d", o.depth,
                  max_rows, bo.n_ctx);
  }
  if (max_rows > bo.n_tile) {
    return errorf("profile: a pass of %d rows exceeds the backend's tile of %d (one tile a pass)",
                  max_rows, bo.n_tile);
  }
  const int n_vocab = model.config.n_vocab;
  ProfilerOff off(backend);
  // Is profiling supported at all (and the asked timing)? Before the depth is filled.
  GEM_RETURN_IF_ERROR(backend.set_stage_profiler(&profiler));
  GEM_RETURN_IF_ERROR(backend.set_stage_profiler(nullptr));

  backend.reset();
  const std::vector<int32_t> fill = synthetic_tokens(o.seed, o.depth, n_vocab);
  if (o.depth > 0) GEM_RETURN_IF_ERROR(backend.eval(fill, false));
  backend.checkpoint();

  const SamplingParams sampling = default_sampling(model.config);
  // The penalties' window: the last 64 tokens of the cache (and a pass's own tokens).
  const std::vector<int32_t> cached_tail(fill.end() - std::min<size_t>(fill.size(), 64), fill.end());
  Rng rng(o.seed);
  ProfileReport report;
  for (int rows : o.rows) {
    const std::vector<int32_t> tokens = synthetic_tokens(o.seed + 1 + rows, rows, n_vocab);
    std::vector<int32_t> history = cached_tail;
    history.insert(history.end(), tokens.begin(), tokens.end());
    const SamplingParams* sample = rows == 1 && o.sample ? &sampling : nullptr;

    // Warm-up, untimed: clocks, graph captures (the profiled and the plain one), allocations.
    double wall = 0.0;
    GEM_RETURN_IF_ERROR(profiled_pass(backend, tokens, profiler, sample, history, rng, &wall));
    if (auto w = plain_pass(backend, tokens); !w.ok()) return w.status();

    auto pass = sample_pass(
        model, bo.kv_type, rows, PassShape::kTile, o.depth, o.n_samples, profiler,
        [&] { return plain_pass(backend, tokens); },
        [&](double* w) { return profiled_pass(backend, tokens, profiler, sample, history, rng, w); });
    if (!pass.ok()) return pass.status();
    report.passes.push_back(std::move(pass).value());
  }
  // A kBatch or kVerify shape: a warm-up pass, untimed (the rows pass's graphs, allocations),
  // profiled and plain; then the samples.
  auto batched_profile = [&](PassShape shape, const std::vector<int32_t>& tokens,
                             const SamplingParams* sample) -> Result<PassProfile> {
    double wall = 0.0;
    GEM_RETURN_IF_ERROR(
        batch_pass(backend, shape, tokens, o.depth, &profiler, sample, cached_tail, rng, &wall));
    GEM_RETURN_IF_ERROR(
        batch_pass(backend, shape, tokens, o.depth, nullptr, nullptr, cached_tail, rng, &wall));
    return sample_pass(
        model, bo.kv_type, static_cast<int>(tokens.size()), shape, o.depth, o.n_samples, profiler,
        [&]() -> Result<double> {
          double w = 0.0;
          GEM_RETURN_IF_ERROR(
              batch_pass(backend, shape, tokens, o.depth, nullptr, nullptr, cached_tail, rng, &w));
          return w;
        },
        [&](double* w) {
          return batch_pass(backend, shape, tokens, o.depth, &profiler, sample, cached_tail, rng, w);
        });
  };
  if (max_batch > 0) {
    backend.restore();
    for (int s = 1; s < max_batch; ++s) GEM_RETURN_IF_ERROR(backend.slot_fork(0, s));
  }
  for (int n_seq : o.batch) {
    const std::vector<int32_t> tokens = synthetic_tokens(o.seed + 1000 + n_seq, n_seq, n_vocab);
    const SamplingParams* sample = o.sample ? &sampling : nullptr;
    auto pass = batched_profile(PassShape::kBatch, tokens, sample);
    if (!pass.ok()) return pass.status();
    report.passes.push_back(std::move(pass).value());
  }
  for (int s = 1; s < max_batch; ++s) backend.slot_reset(s);
  if (!o.verify.empty()) backend.restore();
  for (int n : o.verify) {
    const std::vector<int32_t> tokens = synthetic_tokens(o.seed + 2000 + n, n, n_vocab);
    auto pass = batched_profile(PassShape::kVerify, tokens, o.sample ? &sampling : nullptr);
    if (!pass.ok()) return pass.status();
    report.passes.push_back(std::move(pass).value());
  }
  report.method = profiler.method();
  backend.restore();
  return report;
}

Result<std::vector<AttentionPoint>> profile_attention(Backend& backend, const model::Model& model,
                                                      std::span<const int> depths, int n_samples,
                                                      uint32_t seed, StageProfiler& profiler) {
  if (depths.empty()) return errorf("attention sweep: no depth given");
  if (n_samples < 1) return errorf("attention sweep: %d samples, expected at least 1", n_samples);
  std::vector<int> sorted(depths.begin(), depths.end());
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  if (sorted.front() < 0) return errorf("attention sweep: depth %d, expected >= 0", sorted.front());
  if (static_cast<int64_t>(sorted.back()) + 1 > backend.options().n_ctx) {
    return errorf("attention sweep: depth %d + 1 exceeds the backend's context of %d",
                  sorted.back(), backend.options().n_ctx);
  }
  const int n_vocab = model.config.n_vocab;
  ProfilerOff off(backend);
  GEM_RETURN_IF_ERROR(backend.set_stage_profiler(&profiler));
  GEM_RETURN_IF_ERROR(backend.set_stage_profiler(nullptr));

  const std::vector<int32_t> fill = synthetic_tokens(seed, sorted.back(), n_vocab);
  const std::vector<int32_t> step = synthetic_tokens(seed + 2, 1, n_vocab);
  Rng rng(seed);
  backend.reset();
  int filled = 0;
  bool checkpointed = false;
  std::vector<AttentionPoint> out;
  for (int depth : sorted) {
    if (depth > filled) {
      if (checkpointed) backend.restore();  // the previous depth's: drop its samples' token
      GEM_RETURN_IF_ERROR(backend.eval(
          std::span<const int32_t>(fill.data() + filled, static_cast<size_t>(depth - filled)),
          false));
      filled = depth;
    }
    backend.checkpoint();
    checkpointed = true;
    double wall = 0.0;
    GEM_RETURN_IF_ERROR(profiled_pass(backend, step, profiler, nullptr, {}, rng, &wall));
    std::vector<SampleSums> sums(n_samples);
    for (int i = 0; i < n_samples; ++i) {
      GEM_RETURN_IF_ERROR(profiled_pass(backend, step, profiler, nullptr, {}, rng, &wall));
      sums[i].add(model, profiler);
    }
    AttentionPoint p;
    p.depth = depth;
    p.n_samples = n_samples;
    for (const StageRow& r : stage_rows(model, backend.options().kv_type, sums, 1, depth, PassShape::kTile)) {
      p.forward_mean_s += r.mean_s;
      if (r.stage != Stage::kAttention) continue;
      if (r.scope == StageScope::kSliding) p.sliding = r;
      if (r.scope == StageScope::kFull) p.full = r;
    }
    out.push_back(p);
  }
  backend.restore();
  return out;
}

}  // namespace gem::runtime
