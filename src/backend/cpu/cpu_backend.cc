// CpuBackend: eval in tiles of n_tile tokens (each tile through every layer, in causal order),
// logits of the rows asked for, checkpoint/restore through the KV cache's journal.
#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/drafter_cpu.h"
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
        forward_(model, options.n_ctx, options.n_tile, options.reference, pool_) {
    slots_.resize(options.n_slots);
    for (Slot& s : slots_) {
      s.kv = std::make_unique<KvCache>(model.plan, options.n_ctx, options.kv_type);
    }
    // One row of logits up front: decoding never allocates.
    logits_.resize(model.config.n_vocab);
  }

  std::string_view name() const override { return options_.reference ? "cpu-reference" : "cpu"; }
  const BackendOptions& options() const override { return options_; }
  int n_past() const override { return slots_[0].n_past; }
  int slot_n_past(int slot) const override { return slots_.at(slot).n_past; }

  Status eval(std::span<const int32_t> tokens, bool all_logits, const TileCallback& on_tile) override {
    const int n = static_cast<int>(tokens.size());
    const int n_vocab = model_.config.n_vocab;
    n_logit_rows_ = 0;
    batch_rows_ = 0;
    hidden_valid_ = keep_hidden_;
    Slot& slot = slots_[0];
    if (n == 0) return Status::error("eval: no tokens given (expected at least 1)");
    if (static_cast<int64_t>(slot.n_past) + n > options_.n_ctx) {
      return errorf("eval: context full: %d cached + %d new tokens > n_ctx %d", slot.n_past, n,
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
      forward_.forward_tile(tokens.data() + done, m, slot.n_past, *slot.kv, first_row, out);
      if (keep_hidden_ && out != nullptr) keep_hidden_rows(all_logits ? done : 0, m - first_row);
      slot.n_past += m;
      done += m;
      // A callback that declines after the last tile has nothing left to cancel.
      if (on_tile && !on_tile(done, n) && !last_tile) {
        return cancelledf("cancelled after %d of %d tokens (n_past %d)", done, n, slot.n_past);
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

  Status eval_batch(std::span<const BatchRow> rows) override {
    const int n_vocab = model_.config.n_vocab;
    n_logit_rows_ = 0;
    batch_rows_ = 0;
    hidden_valid_ = keep_hidden_;
    if (Status st = validate_batch(rows, n_vocab, &ends_); !st.ok()) return st;
    int wanted = 0;
    for (const BatchRow& r : rows) wanted += r.logits ? 1 : 0;
    if (logits_.size() < static_cast<size_t>(wanted) * n_vocab) {
      logits_.resize(static_cast<size_t>(wanted) * n_vocab);
    }
    const int n = static_cast<int>(rows.size());
    int n_out = 0;
    for (int done = 0; done < n;) {
      const int m = std::min(options_.n_tile, n - done);
      tokens_.clear();
      runs_.clear();
      logit_rows_.clear();
      for (int i = 0; i < m; ++i) {
        const BatchRow& r = rows[done + i];
        tokens_.push_back(r.token);
        if (r.logits) logit_rows_.push_back(i);
        Slot& slot = slots_[r.slot];
        // A row continues the previous run when it is the next position of the same slot.
        if (!runs_.empty() && runs_.back().kv == slot.kv.get() &&
            runs_.back().pos0 + runs_.back().n == r.pos) {
          ++runs_.back().n;
        } else {
          runs_.push_back(SeqRun{slot.kv.get(), r.pos, i, 1});
        }
      }
      forward_.forward_rows(tokens_.data(), m, runs_, logit_rows_,
                            logits_.data() + static_cast<size_t>(n_out) * n_vocab);
      if (keep_hidden_) keep_hidden_rows(n_out, static_cast<int>(logit_rows_.size()));
      n_out += static_cast<int>(logit_rows_.size());
      for (int i = 0; i < m; ++i) slots_[rows[done + i].slot].n_past = rows[done + i].pos + 1;
      done += m;
    }
    batch_rows_ = n_out;
    return ok_status();
  }

  void set_keep_hidden(bool on) override {
    keep_hidden_ = on;
    hidden_valid_ = false;  // rows of an eval before the switch were not kept
  }

  std::span<const float> hidden(int row) override {
    const std::span<const float> l = logits(row);
    if (!hidden_valid_ || l.empty()) return {};
    const size_t index = static_cast<size_t>(l.data() - logits_.data()) / model_.config.n_vocab;
    const size_t n_embd = model_.config.n_embd;
    return {hidden_.data() + index * n_embd, n_embd};
  }

  std::span<const float> batch_hidden(int i) override {
    if (!hidden_valid_ || i < 0 || i >= batch_rows_) return {};
    const size_t n_embd = model_.config.n_embd;
    return {hidden_.data() + static_cast<size_t>(i) * n_embd, n_embd};
  }

  Result<std::unique_ptr<Drafter>> make_drafter(const model::Assistant& assistant) override;

  const KvCache* slot_kv(int slot) const {
    return slot >= 0 && slot < static_cast<int>(slots_.size()) ? slots_[slot].kv.get() : nullptr;
  }
  ThreadPool& pool() { return pool_; }
  const model::Model& model() const { return model_; }

  std::span<const float> batch_logits(int i) override {
    if (i < 0 || i >= batch_rows_) return {};
    const size_t n_vocab = model_.config.n_vocab;
    return {logits_.data() + static_cast<size_t>(i) * n_vocab, n_vocab};
  }

  void checkpoint() override { slot_checkpoint(0); }
  void restore() override { slot_restore(0); }
  void reset() override { slot_reset(0); }

  void slot_checkpoint(int slot) override {
    Slot& s = slots_.at(slot);
    s.checkpoint_n_past = s.n_past;
    s.has_checkpoint = true;
    s.kv->checkpoint();
  }

  void slot_restore(int slot) override {
    Slot& s = slots_.at(slot);
    if (!s.has_checkpoint) return;
    s.kv->restore();
    s.n_past = s.checkpoint_n_past;  // full layers need only this: later slots are rewritten
    n_logit_rows_ = 0;
    batch_rows_ = 0;
  }

  void slot_reset(int slot) override {
    Slot& s = slots_.at(slot);
    s.kv->reset();
    s.n_past = 0;
    s.has_checkpoint = false;
    n_logit_rows_ = 0;
    batch_rows_ = 0;
  }

  Status slot_truncate(int slot, int n_past) override {
    if (slot < 0 || slot >= options_.n_slots) {
      return errorf("truncate: slot %d outside [0, %d)", slot, options_.n_slots);
    }
    Slot& s = slots_[slot];
    if (n_past < 0 || n_past > s.n_past) {
      return errorf("truncate: slot %d to %d positions, expected 0..%d (its n_past)", slot, n_past,
                    s.n_past);
    }
    if (s.n_past - n_past > model::kRingSpare && has_ring()) {
      return errorf("truncate: slot %d by %d positions, at most %d (the sliding rings' spare "
                    "slots); restore a checkpoint or reset instead",
                    slot, s.n_past - n_past, model::kRingSpare);
    }
    s.kv->truncate(n_past);
    s.n_past = n_past;
    n_logit_rows_ = 0;
    batch_rows_ = 0;
    return ok_status();
  }

  Status slot_fork(int src, int dst) override {
    if (src < 0 || src >= options_.n_slots || dst < 0 || dst >= options_.n_slots) {
      return errorf("fork: slots %d -> %d, expected both in [0, %d)", src, dst, options_.n_slots);
    }
    if (src == dst) return ok_status();
    Slot& d = slots_[dst];
    d.kv->copy_from(*slots_[src].kv, slots_[src].n_past);
    d.n_past = slots_[src].n_past;
    d.has_checkpoint = false;
    return ok_status();
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
    uint64_t kv = 0;
    for (const Slot& s : slots_) kv += s.kv->bytes();
    return {kv, forward_.activations().bytes() + logits_.capacity() * sizeof(float),
            forward_.packed() != nullptr ? forward_.packed()->bytes() : 0};
  }

 private:
  // The forward's normed rows (act.h, [n, n_embd]: the rows it just took logits of) into
  // hidden_ from row `at` on; only while keep_hidden_ (the decode path copies nothing otherwise).
  void keep_hidden_rows(int at, int n) {
    const size_t n_embd = model_.config.n_embd;
    if (hidden_.size() < (static_cast<size_t>(at) + n) * n_embd) hidden_.resize((static_cast<size_t>(at) + n) * n_embd);
    std::memcpy(hidden_.data() + static_cast<size_t>(at) * n_embd, forward_.activations().h.data(),
                sizeof(float) * n * n_embd);
  }

  struct Slot {
    std::unique_ptr<KvCache> kv;
    int n_past = 0;
    int checkpoint_n_past = 0;
    bool has_checkpoint = false;
  };

  bool has_ring() const {
    for (const model::LayerPlan& p : model_.plan) {
      if (p.kind == model::AttnKind::kSliding) return true;
    }
    return false;
  }

  const model::Model& model_;
  BackendOptions options_;
  ThreadPool pool_;
  ForwardCpu forward_;
  std::vector<Slot> slots_;
  std::vector<float> logits_;  // [rows, n_vocab] of the last eval or eval_batch
  bool keep_hidden_ = false;   // set_keep_hidden
  bool hidden_valid_ = false;  // the last eval kept its rows' hidden states
  std::vector<float> hidden_;  // [rows, n_embd] post-final-norm rows beside logits_ (keep_hidden_)
  int n_logit_rows_ = 0;       // eval()
  int n_eval_ = 0;
  bool all_logits_ = false;
  int batch_rows_ = 0;         // eval_batch(): logit rows held
  // eval_batch's per-tile lists, reused.
  std::vector<int> ends_;
  std::vector<int32_t> tokens_;
  std::vector<SeqRun> runs_;
  std::vector<int> logit_rows_;
};

// The CPU backend's Drafter: a DrafterCpu of the backend's flavour over its slots and pool.
class CpuDrafter final : public Drafter {
 public:
  CpuDrafter(CpuBackend& backend, const model::Assistant& assistant)
      : backend_(backend),
        drafter_(backend.model(), assistant, backend.options().n_ctx, backend.options().reference,
                 backend.pool()),
        logits_(assistant.config.n_vocab),
        h_next_(assistant.config.n_embd_out) {}

  Status step(int slot, int32_t token, std::span<const float> h, int pos) override {
    const KvCache* kv = backend_.slot_kv(slot);
    if (kv == nullptr) return errorf("draft: slot %d outside [0, %d)", slot, backend_.options().n_slots);
    if (pos != backend_.slot_n_past(slot) || pos < 1) {
      return errorf("draft: position %d, expected the slot's n_past %d (>= 1: the target cache covers "
                    "0..P-1)", pos, backend_.slot_n_past(slot));
    }
    if (h.size() != h_next_.size()) return errorf("draft: h of %zu values, expected %zu", h.size(), h_next_.size());
    if (token < 0 || token >= static_cast<int32_t>(logits_.size())) {
      return errorf("draft: token %d outside the vocabulary [0, %zu)", token, logits_.size());
    }
    drafter_.step(token, h.data(), pos, *kv, logits_.data(), h_next_.data());
    return ok_status();
  }
  std::span<const float> logits() const override { return logits_; }
  std::span<const float> h_next() const override { return h_next_; }

 private:
  CpuBackend& backend_;
  DrafterCpu drafter_;
  std::vector<float> logits_;
  std::vector<float> h_next_;
};

Result<std::unique_ptr<Drafter>> CpuBackend::make_drafter(const model::Assistant& assistant) {
  GEM_RETURN_IF_ERROR(model::check_pairing(assistant, model_));
  return std::unique_ptr<Drafter>(new CpuDrafter(*this, assistant));
}

}  // namespace

Result<std::unique_ptr<Backend>> make_cpu_backend(const model::Model& model,
                                                  const BackendOptions& options) {
  if (options.n_ctx <= 0) return errorf("cpu backend: n_ctx %d, expected > 0", options.n_ctx);
  if (options.n_tile <= 0) return errorf("cpu backend: n_tile %d, expected > 0", options.n_tile);
  if (options.n_slots <= 0) {
    return errorf("cpu backend: n_slots %d, expected > 0 (-np/--parallel)", options.n_slots);
  }
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

const KvCache* cpu_backend_kv(const Backend& backend, int slot) {
  const auto* cpu = dynamic_cast<const CpuBackend*>(&backend);
  return cpu != nullptr ? cpu->slot_kv(slot) : nullptr;
}

bool set_cpu_backend_tap(Backend& backend, TapFn tap) {
  auto* cpu = dynamic_cast<CpuBackend*>(&backend);
  if (cpu == nullptr) return false;
  cpu->set_tap(std::move(tap));
  return true;
}

}  // namespace gem::cpu
