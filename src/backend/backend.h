// backend.h: the one interface the runtime sees. A backend owns the weights it computes with,
// the KV cache and the scratch buffers; the runtime feeds it tokens and reads logits (or asks it
// to sample). CPU and CUDA implement it; tests add scripted ones.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "model/assistant.h"
#include "model/model.h"

namespace gem {

enum class BackendKind { kCpu, kCuda };

struct SamplingParams;  // sampler/sampler.h (only referenced here: backend does not depend on it)
class StageProfiler;    // backend/profile.h

struct BackendOptions {
  int n_ctx = 4096;                              // positions the cache holds
  model::KvType kv_type = model::KvType::kF32;
  int n_threads = 0;                             // 0 = all hardware threads
  int n_tile = 256;                              // prompt tokens evaluated per layer pass
  bool reference = false;                        // CPU: the plain scalar path instead of the fast one
  int n_slots = 1;                               // sequence slots the cache holds (-np/--parallel)
};

// The log-probabilities the server reports with a drawn token (OpenAI's logprobs): the
// log-softmax of the raw logits row (no penalty, temperature or constraint: what llama-server and
// OpenAI report) at the drawn token and at the row's top_n most likely tokens.
inline constexpr int kMaxRowLogprobs = 20;  // the most alternatives (OpenAI's top_logprobs limit)
struct TokenLogprobs {
  float logprob = 0.0f;                        // of the drawn token (-inf if its logit is -inf)
  std::vector<std::pair<int32_t, float>> top;  // (id, logprob), highest first, ties by lower id
};
// The reference, on the host: log-sum-exp in double over the whole row. top_n is clamped to
// [0, min(kMaxRowLogprobs, row size)]; `token` must lie in the row.
TokenLogprobs row_logprobs(std::span<const float> row, int32_t token, int top_n);

// One row of a batch (Backend::eval_batch): `token` of sequence slot `slot` at position `pos`.
// A slot's rows come in position order and continue its cache: the first at n_past(slot), the
// next one further, and so on; rows of different slots may interleave. With `logits`, the row's
// logits are kept (batch_logits, in the order of the rows that ask).
struct BatchRow {
  int32_t slot = 0;
  int32_t pos = 0;
  int32_t token = 0;
  bool logits = false;
};

// The MTP drafter (spec §7.4–7.6), made by Backend::make_drafter from a paired assistant: one
// step takes the last known token c, a target-space hidden state h and the draft position P, and
// attends to the target's caches of layers N−2 and N−1 of one sequence slot, which it only reads
// (it writes no cache and leaves the slot's n_past alone). All steps of a round use the same P.
class Drafter {
 public:
  virtual ~Drafter() = default;
  // One draft step for `slot` at position `pos`, which must equal slot_n_past(slot) (the target
  // cache covers 0..pos−1; the token at pos is c, not yet in it). h: [target n_embd].
  virtual Status step(int slot, int32_t token, std::span<const float> h, int pos) = 0;
  // Of the last step: the assistant's raw logits [n_vocab] (no soft-cap) and h_next
  // [target n_embd], the h of the next step. Valid until the next step.
  virtual std::span<const float> logits() const = 0;
  virtual std::span<const float> h_next() const = 0;
  // k greedy steps from (root, h0) at position pos, each step's token the previous step's arg-max
  // (lowest id on ties) and its h the previous h_next: the k draft tokens. The default runs k
  // step() calls and picks on the host; the CUDA drafter picks on the device and replays the k
  // steps as one graph, so only the k tokens come back. logits()/h_next() are then unspecified.
  virtual Result<std::vector<int32_t>> draft_greedy(int slot, int32_t root,
                                                    std::span<const float> h0, int pos, int k);
};

// Called after each prompt tile: (tokens done, tokens total). Returning false cancels the eval.
using TileCallback = std::function<bool(int done, int total)>;

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  virtual const BackendOptions& options() const = 0;

  // Tokens already in the cache; the next eval starts at this position.
  virtual int n_past() const = 0;

  // Evaluates `tokens` at positions n_past() .. n_past()+n-1 in tiles of options().n_tile,
  // writing their K/V. With all_logits, logits of every row are kept (row i = tokens[i]);
  // otherwise only the last row's. On cancellation (callback returned false) returns a
  // kCancelled status (Status::is_cancelled); n_past() then counts the tiles that completed.
  virtual Status eval(std::span<const int32_t> tokens, bool all_logits,
                      const TileCallback& on_tile = {}) = 0;

  // Logits (after the final soft-cap) of row `row` of the last eval; row -1 = the last row.
  virtual std::span<const float> logits(int row = -1) = 0;

  // Prefix reuse and rollback. checkpoint() marks the current n_past() as the restore point and
  // starts journaling every sliding-ring slot overwritten after it; restore() puts back those
  // slots and n_past() exactly as they were at the checkpoint. reset() empties the cache.
  virtual void checkpoint() = 0;
  virtual void restore() = 0;
  virtual void reset() = 0;

  // Sequence slots (BackendOptions::n_slots, fixed at creation): each holds its own cache (the
  // sliding ring and the full-layer array). The single-sequence calls above act on slot 0.
  // The defaults serve a one-slot backend through eval(); CPU and CUDA implement them all.
  virtual int slot_n_past(int slot) const { return slot == 0 ? n_past() : 0; }
  // Evaluates every row (each over its own slot's cache at its own position, in tiles of
  // options().n_tile rows); the rows' K/V are written. On error nothing is evaluated.
  virtual Status eval_batch(std::span<const BatchRow> rows);
  // Logits of the i-th row that asked for them in the last eval_batch (empty if none).
  virtual std::span<const float> batch_logits(int i) { return logits(batch_logit_rows_.at(i)); }
  // Per-slot forms of reset/checkpoint/restore.
  virtual void slot_reset(int slot) { if (slot == 0) reset(); }
  virtual void slot_checkpoint(int slot) { if (slot == 0) checkpoint(); }
  virtual void slot_restore(int slot) { if (slot == 0) restore(); }
  // Forgets the slot's positions >= n_past (the rejected tail of a speculative draft): exact for
  // up to model::kRingSpare positions back (a sliding ring still holds every key its window
  // needs); further back is an error unless the model has no sliding layers.
  virtual Status slot_truncate(int slot, int n_past);
  // Copies slot src's cache (its n_past positions) into slot dst, replacing dst's; dst's
  // checkpoint is dropped.
  virtual Status slot_fork(int src, int dst);

  // The target's post-final-norm hidden state (spec §7.6: the h that starts a drafting round).
  // Off by default (the decode path then copies nothing); while on, every eval and eval_batch
  // keeps the normed row of each row whose logits it keeps. hidden(row) is indexed as
  // logits(row), batch_hidden(i) as batch_logits(i); [n_embd] f32, empty when not kept.
  virtual void set_keep_hidden(bool on) { (void)on; }
  virtual std::span<const float> hidden(int row = -1) { (void)row; return {}; }
  virtual std::span<const float> batch_hidden(int i) { (void)i; return {}; }

  // A drafter over this backend's slots (the assistant must outlive it; it must not outlive the
  // backend). Fails when the assistant does not pair with the model (model::check_pairing) or
  // the backend cannot draft.
  virtual Result<std::unique_ptr<Drafter>> make_drafter(const model::Assistant& assistant) {
    (void)assistant;
    return Status::error("backend " + std::string(name()) + " cannot run an MTP assistant");
  }

  // Picks the next token from the last row of the last eval on the backend itself (the CUDA
  // backend: greedy with penalties on the GPU, 4 bytes to the host instead of the logits).
  // Same contract as sample_token() in sampler/sampler.h; nullopt = not supported for these
  // parameters, sample on the host from logits() instead.
  virtual std::optional<int32_t> sample(const SamplingParams& params,
                                        std::span<const int32_t> history, double coin) {
    (void)params;
    (void)history;
    (void)coin;
    return std::nullopt;
  }

  // row_logprobs() of the last row of the last eval, computed where the row lies (the CUDA
  // backend: on the device, about 170 bytes to the host instead of the 1 MB row). Default: on
  // the host from logits(-1).
  virtual TokenLogprobs token_logprobs(int32_t token, int top_n) {
    return row_logprobs(logits(-1), token, top_n);
  }

  // sample() for several rows at once: reqs[i] picks from batch_logits(i) of the last
  // eval_batch (same contract per row as sample()), in one device round trip where the backend
  // samples. out[i] = nullopt where the backend cannot sample that row's parameters: the caller
  // samples it on the host from batch_logits(i). Rows not asked about are left alone: those past
  // reqs.size() and those whose entry has params == nullptr (out[i] = nullopt; the scheduler
  // leaves rows with a constraint or a first token to the host that way).
  struct BatchSample {
    const SamplingParams* params = nullptr;
    std::span<const int32_t> history;
    double coin = 0.0;
  };
  virtual std::vector<std::optional<int32_t>> sample_batch(std::span<const BatchSample> reqs) {
    return std::vector<std::optional<int32_t>>(reqs.size());
  }

  // Stage profiling (`gem profile`, backend/profile.h): while `profiler` is set, every eval adds
  // the time of each stage of its forward to it; null turns profiling off, and the backend then
  // runs exactly the work it runs without profiling. An error when the backend cannot time its
  // stages, or not in the way profiler->timing() asks.
  virtual Status set_stage_profiler(StageProfiler* profiler) {
    if (profiler == nullptr) return ok_status();
    return Status::error("backend " + std::string(name()) + " cannot time its stages");
  }

 protected:
  // Checks `rows` against the slots' n_past, the context and the vocabulary; on success
  // *ends[s] = n_past(s) after the batch. The message names the row and what was expected.
  Status validate_batch(std::span<const BatchRow> rows, int n_vocab, std::vector<int>* ends) const;

 private:
  std::vector<int> batch_logit_rows_;  // the default eval_batch: eval rows that asked for logits
};

}  // namespace gem
