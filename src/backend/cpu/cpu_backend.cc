// CpuBackend: eval in tiles of n_tile tokens (each tile through every layer, in causal order),
// logits of the rows asked for, checkpoint/restore through the KV cache's journal.
#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <string>
#include <vector>

#include "backend/cpu/forward_cpu.h"
#include "backend/cpu/kv_cache.h"
#include "backend/cpu/thread_pool.h"
#include "backend/profile.h"

namespace gem::cpu {
namespace {

class CpuBackend final : public Backend {
 public:
  CpuBackend(const model::Model& model, const BackendOptions& options)
      : model_(model),
        options_(options),
        pool_(options.n_threads),
        kv_(model.plan, options.n_ctx, options.kv_type),
        forward_(model, options.n_ctx, options.n_tile, options.reference, pool_) {
    // One row of logits up front: decoding never allocates.
    logits_.resize(model.config.n_vocab);
  }

  std::string_view name() const override { return options_.reference ? "cpu-reference" : "cpu"; }
  const BackendOptions& options() const override { return options_; }
  int n_past() const override { return n_past_; }

  Status eval(std::span<const int32_t> tokens, bool all_logits, const TileCallback& on_tile) override {
    const int n = static_cast<int>(tokens.size());
    const int n_vocab = model_.config.n_vocab;
    n_logit_rows_ = 0;
    if (n == 0) return Status::error("eval: no tokens given (expected at least 1)");
    if (static_cast<int64_t>(n_past_) + n > options_.n_ctx) {
      return errorf("eval: context full: %d cached + %d new tokens > n_ctx %d", n_past_, n,
                    options_.n_ctx);
    }
    for (int i = 0; i < n; ++i) {
      if (tokens[i] < 0 || tokens[i] >= n_vocab) {
        return errorf("eval: token %d at index %d outside the vocabulary [0, %d)", tokens[i], i,
                      n_vocab);
      }
    }
    const int rows = all_logits ? n : 1;
    // Grows only (a long prompt with all_logits); the one-row case was allocated at creation.
    if (logits_.size() < static_cast<size_t>(rows) * n_vocab) logits_.resize(static_cast<size_t>(rows) * n_vocab);

    const int n_tile = options_.n_tile;
    for (int done = 0; done < n;) {
      const int m = std::min(n_tile, n - done);
      const bool last_tile = done + m == n;
      int first_row = m;  // no logits from this tile
      float* out = nullptr;
      if (all_logits) {
        first_row = 0;
        out = logits_.data() + static_cast<size_t>(done) * n_vocab;
      } else if (last_tile) {
        first_row = m - 1;
        out = logits_.data();
      }
      forward_.forward_tile(tokens.data() + done, m, n_past_, kv_, first_row, out);
      n_past_ += m;
      done += m;
      // A callback that declines after the last tile has nothing left to cancel.
      if (on_tile && !on_tile(done, n) && !last_tile) {
        return cancelledf("cancelled after %d of %d tokens (n_past %d)", done, n, n_past_);
      }
    }
    n_logit_rows_ = rows;
    all_logits_ = all_logits;
    n_eval_ = n;
    return ok_status();
  }

  std::span<const float> logits(int row) override {
    const size_t n_vocab = model_.config.n_vocab;
    if (n_logit_rows_ == 0) return {};
    int index = -1;
    if (row == -1) {
      index = n_logit_rows_ - 1;
    } else if (all_logits_) {
      index = row >= 0 && row < n_logit_rows_ ? row : -1;
    } else {
      index = row == n_eval_ - 1 ? 0 : -1;  // only the last row was computed
    }
    if (index < 0) return {};
    return {logits_.data() + index * n_vocab, n_vocab};
  }

  void checkpoint() override {
    checkpoint_n_past_ = n_past_;
    has_checkpoint_ = true;
    kv_.checkpoint();
  }

  void restore() override {
    if (!has_checkpoint_) return;
    kv_.restore();
    n_past_ = checkpoint_n_past_;  // full layers need only this: later slots are rewritten
    n_logit_rows_ = 0;
  }

  void reset() override {
    kv_.reset();
    n_past_ = 0;
    has_checkpoint_ = false;
    n_logit_rows_ = 0;
  }

  Status set_stage_profiler(StageProfiler* profiler) override {
    if (profiler != nullptr) {
      if (profiler->timing() != "auto") {
        return errorf("cpu backend: stage timing '%s' is not one of its ways (auto: the steady "
                      "clock at every stage boundary)", profiler->timing().c_str());
      }
      profiler->set_method(std::string(name()) +
                           ": steady clock at each stage boundary (the thread pool joins there)");
    }
    forward_.set_profiler(profiler);
    return ok_status();
  }

  void set_tap(TapFn tap) { forward_.set_tap(std::move(tap)); }

  CpuBackendMemory memory() const {
    return {kv_.bytes(), forward_.activations().bytes() + logits_.capacity() * sizeof(float),
            forward_.packed() != nullptr ? forward_.packed()->bytes() : 0};
  }

 private:
  const model::Model& model_;
  BackendOptions options_;
  ThreadPool pool_;
  KvCache kv_;
  ForwardCpu forward_;
  std::vector<float> logits_;  // [rows, n_vocab] of the last eval
  int n_past_ = 0;
  int n_logit_rows_ = 0;
  int n_eval_ = 0;
  bool all_logits_ = false;
  int checkpoint_n_past_ = 0;
  bool has_checkpoint_ = false;
};

}  // namespace

Result<std::unique_ptr<Backend>> make_cpu_backend(const model::Model& model,
                                                  const BackendOptions& options) {
  if (options.n_ctx <= 0) return errorf("cpu backend: n_ctx %d, expected > 0", options.n_ctx);
  if (options.n_tile <= 0) return errorf("cpu backend: n_tile %d, expected > 0", options.n_tile);
  if (options.n_threads < 0) {
    return errorf("cpu backend: n_threads %d, expected >= 0 (0 = all)", options.n_threads);
  }
  if (model.plan.size() != static_cast<size_t>(model.config.n_layers) ||
      model.weights.layers.size() != model.plan.size()) {
    return errorf("cpu backend: the model's plan has %zu layers and its weights %zu, config says %d",
                  model.plan.size(), model.weights.layers.size(), model.config.n_layers);
  }
  for (const model::LayerPlan& p : model.plan) {
    if (p.n_rot != p.head_dim) {
      return errorf("cpu backend: layer %d rotates %d of %d head dims; gem's RoPE covers the whole head",
                    p.layer, p.n_rot, p.head_dim);
    }
    if (p.kind == model::AttnKind::kFull && model.weights.rope_freqs.present() &&
        model.weights.rope_freqs.n_bytes < sizeof(float) * (p.head_dim / 2)) {
      return errorf("cpu backend: rope_freqs holds %llu bytes, layer %d needs %d factors",
                    static_cast<unsigned long long>(model.weights.rope_freqs.n_bytes), p.layer,
                    p.head_dim / 2);
    }
    if (p.kind == model::AttnKind::kSliding && p.window <= 0) {
      return errorf("cpu backend: sliding layer %d has window %d, expected > 0", p.layer, p.window);
    }
  }
  return std::unique_ptr<Backend>(new CpuBackend(model, options));
}

CpuBackendMemory cpu_backend_memory(const Backend& backend) {
  const auto* cpu = dynamic_cast<const CpuBackend*>(&backend);
  return cpu != nullptr ? cpu->memory() : CpuBackendMemory{};
}

bool set_cpu_backend_tap(Backend& backend, TapFn tap) {
  auto* cpu = dynamic_cast<CpuBackend*>(&backend);
  if (cpu == nullptr) return false;
  cpu->set_tap(std::move(tap));
  return true;
}

}  // namespace gem::cpu
