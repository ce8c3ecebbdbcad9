// What the one-sequence Engine and the multi-slot Scheduler share about one request: the prompt
// checks, the prefix-reuse decision against a sequence's cached tokens, the draw of one token
// (constraint, host sampling) and the emission of a generated token with its stop rules. Both
// run the same functions, so a request gives the same tokens whichever of the two serves it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "base/status.h"
#include "runtime/engine.h"

namespace gem::runtime {

// The request's prompt against the context of one sequence: an error for an empty prompt or one
// that does not fit (the message names both sizes).
Status check_prompt(int n_prompt, int n_ctx);

// llama.cpp's LLAMA_DEFAULT_SEED (0xFFFFFFFF) asks for a random seed; any other is used as is.
uint64_t resolve_seed(uint64_t seed);

double thread_cpu_seconds();

// How a prompt uses a sequence that holds `cached` (its last prompt up to its history boundary,
// with its last-row logits when has_logits). The reuse is exact: an identical prompt replays the
// kept logits; a prompt that strictly extends the cached tokens evaluates only the rest; any
// other starts over (the sliding rings cannot be rewound to an arbitrary position).
struct ReusePlan {
  bool identical = false;  // nothing to evaluate: draw the first token from the kept logits
  bool extends = false;    // start = cached.size()
  int start = 0;           // first prompt position to evaluate (0: reset the sequence first)
  int boundary = 0;        // the history boundary: the checkpoint goes there (start <= it <= n)
};
ReusePlan plan_reuse(std::span<const int32_t> cached, bool has_logits,
                     const GenerateRequest& request);

// Prompt tokens of `prompt` that `cached` could serve under plan_reuse (its size when it is a
// prefix the prompt extends or equals, else 0): the slot choice's score.
int reusable_prefix(std::span<const int32_t> cached, bool has_logits,
                    const GenerateRequest& request);

// Draws one token from `logits` with the request's constraint (on a mutable copy, `scratch`) or
// on the host: the constraint may force a token or mask the row first.
int32_t draw_on_host(std::span<const float> logits, const GenerateRequest& request,
                     std::span<const int32_t> history, std::span<const int32_t> generated,
                     double coin, std::vector<float>& scratch);

// Hands one generated token out: history, count, the caller's callback (timed), then the stop
// checks in order: end of generation (`eog`: the token is one and the request stops there), the
// caller, max_tokens, a full context (n_ctx). false when generation ends after it (result.finish
// says why).
bool emit_token(int32_t token, bool eog, int n_ctx, const GenerateRequest& request,
                const GenerateCallbacks& cb, std::vector<int32_t>& history, GenerateResult& result);

}  // namespace gem::runtime

namespace gem::runtime {

// Speculative decoding of one sequence (Engine's decode loop with a drafter, and the Scheduler's
// rounds while one slot generates). Each round evaluates the root (the last token emitted, not yet
// in the cache, at position cur) and the drafts as one eval_batch on `slot`; row i's logits are
// the target's own choice after root, d_1..d_i, so d_{i+1} is accepted while it equals that
// choice (sampled requests: speculative rejection sampling with the drafts as certain proposals,
// so every token is distributed as plain sampling draws it), and the first row that disagrees
// gives the next root (the bonus token). The rejected drafts leave the cache (slot_truncate).
//
// Adaptation: the draft length follows acceptance (doubling after a fully accepted round, the
// accepted count plus one after a partial one); two rounds in a row with nothing accepted pause
// drafting for `pause_len` tokens (doubling up to 256 while probes keep failing), so a drafter
// that is rarely right costs a probe now and then. Under that cap the length is the one with the
// most tokens a second (best_draft_len) from what the rounds measured: each length's round time,
// a draft step's time, a plain step's time and the acceptance rate; where plain steps are worth
// more, drafting pauses likewise (8 tokens, doubling while the probes agree). A verification's cost is a
// step function of its rows on CUDA (the rows pass takes tokens in groups of 8), so a ninth row
// can cost more than the draft it verifies is worth.
//
// best_draft_len: a round of k drafts yields 1 + α + … + α^k tokens on average (draft i is
// accepted with probability α while the ones before it were; then the target's own token) in
// round_s[k] + k·draft_s seconds; no drafts (k = 0) yield one token in round_s[0] (a plain
// step). Returns the k of {0} ∪ [k_lo, k_hi] with the most tokens a second among the measured
// ones (round_s[k] > 0; k = 0 only with allow_plain), exploring: k_hi until it has two samples
// (n_samples[k]: a first one may carry a one-time cost), then the next candidate below the best
// until that one has.
int best_draft_len(std::span<const double> round_s, std::span<const int> n_samples, double draft_s,
                   double alpha, int k_lo, int k_hi, bool allow_plain);

// A running estimate of a cost (the rounds' and draft steps' seconds) given a new sample and the
// samples taken so far (n_samples, counted here): the first sample; the second if lower (the first
// may carry a one-time cost, a CUDA graph's capture or a warm-up, of any size, and averaged in it
// would make its length look worse than it is for many rounds, past the exploration that picks
// the length); later, a sample below half the estimate replaces it, one above twice the
// estimate is left out unless three come in a row (the cost itself rose: a deeper context, a
// busier batch), the third of which replaces it, and the rest move it by a quarter. n_high: the
// samples above twice the estimate in a row so far.
void blend_cost(double& estimate, int& n_high, int& n_samples, double sample);

class Speculation {
 public:
  // `history` (prompt + emitted tokens, what the penalties look at), `rng` and `costs` (the
  // caller's, kept across its requests: greedy and sampled ones apart) must outlive it.
  Speculation(const GenerateRequest& request, Rng& rng, const std::vector<int32_t>& history,
              DraftCosts& costs);
  // A token from `row` as this request draws it (greedy, or sampled with the next coin).
  int32_t choose(std::span<const float> row);
  // Drafts to ask for at the root's position `cur` (0: none this time: paused, or no room); at
  // least the request's draft_min where there is room.
  int draft_len(int cur, int n_ctx, int n_generated);
  // This round's drafts after `root` at `cur`: draft_len of them at most from the request's
  // drafter, none when it gives fewer than draft_min (llama-server's --draft-min). The drafting
  // time goes to result.draft_seconds.
  std::vector<int32_t> propose(int32_t root, int cur, int n_ctx, GenerateResult& result);
  // One verification round of `drafts` (non-empty) after `root`. `emit` hands out each accepted
  // draft (false: generation ended, *ended = true). Otherwise *next is the new root (chosen,
  // not yet emitted) and root_row() the row of the last eval_batch it came from. Greedy rows are
  // picked with one Backend::sample_batch (the CUDA backend's device arg-max, equal to the host
  // pick), the rest on the host. Counts the round and times verification and truncation.
  Status round(Backend& backend, int slot, int32_t root, int cur, std::span<const int32_t> drafts,
               const std::function<bool(int32_t)>& emit, GenerateResult& result, bool* ended,
               int32_t* next);
  // The batch row the root was chosen from (-1: the last row of the last eval), for propose().
  int root_row() const { return root_row_; }
  void set_root_row(int row) { root_row_ = row; }
  // A plain step (no drafts) took `seconds` from its eval to its drawn token.
  void note_plain_step(double seconds);

 private:
  bool verify(Backend& backend, int i, int32_t d, int32_t* next);
  // The target's greedy choice at verification row i: the backend's pick, else the host's.
  int32_t pick(Backend& backend, int i);

  const GenerateRequest& request_;
  Rng& rng_;
  const std::vector<int32_t>& history_;
  bool sampled_;
  int k_cur_, misses_ = 0, pause_ = 0, pause_len_ = 8;
  bool probe_ = false;  // the round after a pause drafts whatever plain steps cost
  int cost_pause_len_ = 8;  // the next pause when plain steps are worth more than any round
  int root_row_ = -1;
  // The cost model of best_draft_len: the caller's costs, and this request's decayed counts of
  // accepted and rejected drafts.
  DraftCosts& costs_;
  double n_hit_ = 0.0, n_miss_ = 0.0;
  std::vector<BatchRow> rows_;
  std::vector<std::optional<int32_t>> picks_;  // greedy: sample_batch's picks of the round's rows
  std::vector<int32_t> ext_;                   // greedy: history + drafts (the rows' penalty windows)
};

}  // namespace gem::runtime
