// Scheduler (scheduler.h): admission to slots, the step (one eval_batch: decode rows and one
// prompt chunk), sampling, emission and the per-slot prefix cache.
#include "runtime/scheduler.h"

#include <algorithm>
#include <optional>

#include "base/log.h"
#include "base/timer.h"
#include "runtime/generation.h"

namespace gem::runtime {
namespace {

// GenerateRequest::top_logprobs: the drawn token's log-probabilities in the raw row it was drawn
// from, reported just before the token (as Engine does).
void report_logprobs(const GenerateRequest& request, const GenerateCallbacks& cb, int32_t token,
                     std::span<const float> row) {
  if (request.top_logprobs < 0 || !cb.on_logprobs) return;
  cb.on_logprobs(token, row_logprobs(row, token, request.top_logprobs));
}

}  // namespace

struct Scheduler::Task {
  const GenerateRequest* request = nullptr;
  const GenerateCallbacks* cb = nullptr;
  uint64_t id = 0;
  GenerateResult result;
  Status status;
  bool done = false;  // guarded by Scheduler::mu_
};

struct Scheduler::Slot {
  enum class Phase { kIdle, kPrefill, kDecode };
  int id = 0;
  // The prefix cache kept between requests (as Engine's cached_ / cached_logits_).
  std::vector<int32_t> cached;
  std::vector<float> cached_logits;
  uint64_t last_used = 0;  // LRU stamp
  uint64_t n_reused = 0;
  // The request running here.
  Task* task = nullptr;
  Phase phase = Phase::kIdle;
  ReusePlan plan;
  int done = 0;                  // prompt positions in the cache
  int next_log = 0;              // progress log position
  std::vector<int32_t> history;  // prompt + generated: what the penalties look at
  std::vector<int32_t> generated;
  std::optional<Rng> rng;
  int32_t pending = -1;          // the last token emitted, not yet in the cache
  bool first = true;             // the next draw is the first token (from the prompt's row)
  int logit_row = -1;            // this step's batch_logits row, -1: none
  double t_start = 0, t_decode = 0;
  std::optional<Speculation> spec;  // with a drafter: its rounds' state
  // After the request ended in this step: roll back to the boundary, or start over. Applied once
  // every row of the step has been drawn (a slot's restore drops the batch's logits rows).
  bool release_rollback = false, release_clear = false;
};

Scheduler::Scheduler(Backend& backend, std::function<bool(int32_t)> is_eog)
    : backend_(backend), is_eog_(std::move(is_eog)),
      chunk_(std::max(1, backend.options().n_tile)) {
  const int n = std::max(1, backend.options().n_slots);
  for (int i = 0; i < n; ++i) {
    slots_.push_back(std::make_unique<Slot>());
    slots_.back()->id = i;
  }
  publish();
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

Result<GenerateResult> Scheduler::generate(const GenerateRequest& request,
                                           const GenerateCallbacks& cb) {
  GEM_RETURN_IF_ERROR(check_prompt(static_cast<int>(request.prompt.size()), n_ctx()));
  Task task;
  task.request = &request;
  task.cb = &cb;
  std::unique_lock<std::mutex> lock(mu_);
  if (stop_) return errorf("scheduler: stopped, the request was not run");
  task.id = next_task_++;
  stats_.n_requests++;
  waiting_.push_back(&task);
  cv_.notify_all();
  cv_.wait(lock, [&] { return task.done; });
  if (!task.status.ok()) return task.status;
  return task.result;
}

std::vector<SlotInfo> Scheduler::slots() const {
  std::lock_guard<std::mutex> lock(mu_);
  return info_;
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  SchedulerStats s = stats_;
  s.n_waiting = static_cast<int>(waiting_.size());
  return s;
}

void Scheduler::publish() {
  std::vector<SlotInfo> info;
  for (const auto& s : slots_) {
    SlotInfo i;
    i.id = s->id;
    i.n_ctx = n_ctx();
    i.busy = s->task != nullptr;
    i.prefill = s->phase == Slot::Phase::kPrefill;
    i.n_cached = static_cast<int>(s->cached.size());
    i.n_past = backend_.slot_n_past(s->id);
    i.n_reused = s->n_reused;
    if (s->task != nullptr) {
      i.task = s->task->id;
      i.n_prompt = static_cast<int>(s->task->request->prompt.size());
      i.n_decoded = s->task->result.n_generated;
      i.max_tokens = s->task->request->max_tokens;
      i.sampling = s->task->request->sampling;
    }
    info.push_back(i);
  }
  std::lock_guard<std::mutex> lock(mu_);
  stats_.time = times_;
  // Keep what an idle slot last ran (its task, prompt and decoded counts).
  for (size_t k = 0; k < info.size() && k < info_.size(); ++k) {
    if (!info[k].busy) {
      info[k].task = info_[k].task;
      info[k].n_prompt = info_[k].n_prompt;
      info[k].n_decoded = info_[k].n_decoded;
      info[k].max_tokens = info_[k].max_tokens;
      info[k].sampling = info_[k].sampling;
    }
  }
  info_ = std::move(info);
}

int Scheduler::choose_slot_locked(const GenerateRequest& request) {
  int best = -1, best_len = 0, empty = -1, lru = -1;
  for (const auto& s : slots_) {
    if (s->task != nullptr) continue;
    const int len = reusable_prefix(s->cached, !s->cached_logits.empty(), request);
    if (len > best_len) {
      best = s->id;
      best_len = len;
    }
    if (s->cached.empty() && empty < 0) empty = s->id;
    if (lru < 0 || s->last_used < slots_[lru]->last_used) lru = s->id;
  }
  if (best >= 0) return best;
  return empty >= 0 ? empty : lru;
}

void Scheduler::admit_locked() {
  while (!waiting_.empty()) {
    const int s = choose_slot_locked(*waiting_.front()->request);
    if (s < 0) return;
    slots_[s]->task = waiting_.front();
    slots_[s]->phase = Slot::Phase::kPrefill;  // start() decides what it evaluates
    slots_[s]->done = -1;                      // not started
    waiting_.pop_front();
  }
}

void Scheduler::loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto busy = [&] {
        for (const auto& s : slots_) {
          if (s->task != nullptr) return true;
        }
        return false;
      };
      cv_.wait(lock, [&] { return stop_ || !waiting_.empty() || busy(); });
      if (stop_ && waiting_.empty() && !busy()) return;
      if (stop_) {
        // Callers still waiting are told so; running requests finish first.
        for (Task* t : waiting_) {
          t->status = errorf("scheduler: stopped, the request was not run");
          t->done = true;
        }
        waiting_.clear();
        cv_.notify_all();
      }
      admit_locked();
    }
    const double t0 = now_seconds();
    for (const auto& s : slots_) {
      if (s->task != nullptr && s->done < 0) start(*s);
    }
    times_.release_seconds += now_seconds() - t0;
    step();
    times_.busy_seconds += now_seconds() - t0;
    publish();
  }
}

void Scheduler::start(Slot& slot) {
  const GenerateRequest& request = *slot.task->request;
  const GenerateCallbacks& cb = *slot.task->cb;
  GenerateResult& result = slot.task->result;
  const int n = static_cast<int>(request.prompt.size());
  result.n_prompt = n;
  slot.t_start = now_seconds();
  slot.last_used = ++clock_;
  slot.plan = plan_reuse(slot.cached, !slot.cached_logits.empty(), request);
  slot.spec.reset();
  slot.history = request.prompt;
  slot.generated.clear();
  slot.rng.emplace(resolve_seed(request.sampling.seed));
  if (request.drafter != nullptr && request.draft_max > 0 && !request.constraint &&
      request.top_logprobs < 0) {
    slot.spec.emplace(request, *slot.rng, slot.history,
                      draft_costs_[request.sampling.temperature > 0.0f ? 1 : 0]);
  }
  slot.first = true;
  slot.pending = -1;
  slot.logit_row = -1;
  if (slot.plan.start > 0) {
    slot.n_reused++;
    std::lock_guard<std::mutex> lock(mu_);
    stats_.n_reuse_hits++;
  } else if (!slot.cached.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.n_evictions++;
  }
  if (!slot.plan.identical && !slot.plan.extends) clear(slot);
  slot.done = slot.plan.start;
  slot.next_log = (slot.done / Engine::kProgressLogStep + 1) * Engine::kProgressLogStep;
  result.n_cached = slot.plan.identical ? n : slot.plan.start;
  if (cb.on_prompt_progress && !cb.on_prompt_progress(result.n_cached, n)) {
    result.finish = FinishReason::kCancelledInPrompt;
    finish(slot, ok_status());
    return;
  }
  if (slot.plan.identical) {
    // Nothing to evaluate: the kept logits give the first token (drawn at the next step).
    slot.phase = Slot::Phase::kDecode;
    result.prompt_seconds = now_seconds() - slot.t_start;
    slot.t_decode = now_seconds();
    if (request.max_tokens == 0) {
      result.finish = FinishReason::kLength;
      finish(slot, ok_status());
    }
    return;
  }
  slot.phase = Slot::Phase::kPrefill;
}

void Scheduler::clear(Slot& slot) {
  backend_.slot_reset(slot.id);
  slot.cached.clear();
  slot.cached_logits.clear();
}

void Scheduler::rollback(Slot& slot) {
  backend_.slot_restore(slot.id);
  // A backend that could not keep its checkpoint drops the slot's cache: so does the slot.
  if (backend_.slot_n_past(slot.id) != static_cast<int>(slot.cached.size())) clear(slot);
}

void Scheduler::finish(Slot& slot, Status status) {
  Task* task = slot.task;
  if (slot.phase == Slot::Phase::kDecode &&
      task->result.finish != FinishReason::kCancelledInPrompt) {
    task->result.decode_seconds = now_seconds() - slot.t_decode;
  }
  slot.task = nullptr;
  slot.phase = Slot::Phase::kIdle;
  slot.done = 0;
  slot.last_used = ++clock_;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // slots() shows the slot idle before the caller can answer its client.
    SlotInfo& info = info_[static_cast<size_t>(slot.id)];
    info.busy = info.prefill = false;
    info.n_decoded = task->result.n_generated;
    task->status = std::move(status);
    task->done = true;
  }
  cv_.notify_all();
}

void Scheduler::emit(Slot& slot, int32_t token) {
  const GenerateRequest& request = *slot.task->request;
  GenerateResult& result = slot.task->result;
  slot.generated.push_back(token);
  const double t0 = now_seconds();
  const bool more =
      emit_token(token, is_eog_(token), n_ctx(), request, *slot.task->cb, slot.history, result);
  times_.emit_seconds += now_seconds() - t0;
  if (more) {
    slot.pending = token;
    return;
  }
  // Roll back to the history boundary: neither the generated tokens nor the generation prompt
  // after it leak into the slot's next request.
  slot.release_rollback = true;
  finish(slot, ok_status());
}

void Scheduler::apply_releases() {
  const double t0 = now_seconds();
  for (const auto& s : slots_) {
    if (s->release_clear) {
      clear(*s);
    } else if (s->release_rollback) {
      rollback(*s);
    }
    s->release_clear = s->release_rollback = false;
  }
  times_.release_seconds += now_seconds() - t0;
}

// One step's batch: the rows, the slots they belong to, and the prompt rows' extents.
struct Scheduler::Batch {
  struct Prompt {
    Slot* slot = nullptr;
    int end = 0;      // its rows end here (they start at slot->done)
    int seg_end = 0;  // its segment (history, or generation prompt) ends here
  };
  std::vector<BatchRow> rows;
  std::vector<Slot*> slots;     // in row order: the generating ones, then those of `prompts`
  std::vector<Prompt> prompts;  // at most chunk() rows in all
  int n_prompt_rows = 0;
  const Prompt* prompt_of(const Slot* s) const {
    for (const Prompt& p : prompts) {
      if (p.slot == s) return &p;
    }
    return nullptr;
  }
};

void Scheduler::step() {
  // One request alone on kSoloSlot: the single-sequence path, drafting when it can.
  {
    Slot* alone = nullptr;
    int n_busy = 0;
    for (const auto& s : slots_) {
      if (s->task == nullptr) continue;
      ++n_busy;
      if (s->phase == Slot::Phase::kDecode && !s->first) alone = s.get();
    }
    if (n_busy == 1 && alone != nullptr && alone->id == kSoloSlot && stats().n_waiting == 0) {
      if (alone->spec && draft_round(*alone)) return;
      solo_step(*alone);
      return;
    }
  }
  Batch batch;
  // Decode rows: one per generating slot whose next token is already known (a slot whose first
  // token comes from kept logits draws it below, without a row).
  for (const auto& s : slots_) {
    if (s->task == nullptr || s->phase != Slot::Phase::kDecode || s->first) continue;
    const int pos = static_cast<int>(s->task->request->prompt.size()) +
                    s->task->result.n_generated - 1;
    batch.rows.push_back({s->id, pos, s->pending, true});
    batch.slots.push_back(s.get());
  }
  // One chunk of prompt rows: the oldest request in prefill first; when its segment (up to its
  // history boundary, or the rest of its prompt) ends inside the chunk, the next oldest fills
  // the rest, and so on.
  std::vector<Slot*> prefilling;
  for (const auto& s : slots_) {
    if (s->task != nullptr && s->phase == Slot::Phase::kPrefill) prefilling.push_back(s.get());
  }
  std::sort(prefilling.begin(), prefilling.end(),
            [](const Slot* a, const Slot* b) { return a->task->id < b->task->id; });
  for (Slot* pre : prefilling) {
    if (batch.n_prompt_rows == chunk_) break;
    const std::vector<int32_t>& prompt = pre->task->request->prompt;
    const int n = static_cast<int>(prompt.size());
    Batch::Prompt c;
    c.slot = pre;
    c.seg_end = pre->done < pre->plan.boundary ? pre->plan.boundary : n;
    c.end = std::min(pre->done + chunk_ - batch.n_prompt_rows, c.seg_end);
    for (int p = pre->done; p < c.end; ++p) {
      batch.rows.push_back({pre->id, p, prompt[static_cast<size_t>(p)], p == c.seg_end - 1});
    }
    batch.n_prompt_rows += c.end - pre->done;
    batch.prompts.push_back(c);
    batch.slots.push_back(pre);
  }
  if (!batch.rows.empty() && !run(batch) && batch.slots.size() > 1) {
    // The batch failed and nothing of it was evaluated: each slot's rows alone, so that only
    // the request whose rows fail ends with the error and the others go on unchanged.
    for (Slot* s : batch.slots) {
      Batch one;
      one.slots = {s};
      for (const BatchRow& r : batch.rows) {
        if (r.slot == s->id) one.rows.push_back(r);
      }
      if (const Batch::Prompt* c = batch.prompt_of(s)) {
        one.prompts.push_back(*c);
        one.n_prompt_rows = c->end - s->done;
      }
      run(one);
    }
  }
  // First tokens from kept logits (an identical prompt): no row.
  for (const auto& s : slots_) {
    if (s->task != nullptr && s->phase == Slot::Phase::kDecode && s->first && s->logit_row < 0) {
      const double coin = s->rng->next_double();
      std::vector<float> scratch;
      const int32_t token = draw_on_host(s->cached_logits, *s->task->request, s->history,
                                         s->generated, coin, scratch);
      s->first = false;
      report_logprobs(*s->task->request, *s->task->cb, token, s->cached_logits);
      emit(*s, token);
    }
  }
  apply_releases();
}

bool Scheduler::run(Batch& batch) {
  int n_logits = 0;
  for (Slot* s : batch.slots) s->logit_row = -1;
  for (const BatchRow& r : batch.rows) {
    if (r.logits) slots_[static_cast<size_t>(r.slot)]->logit_row = n_logits++;
  }
  const double t_eval = now_seconds();
  const Status st = backend_.eval_batch(batch.rows);
  const int n_prompt_rows = batch.n_prompt_rows;
  const double eval_s = now_seconds() - t_eval;
  times_.eval_seconds += eval_s;
  if (n_prompt_rows > 0) {
    times_.prompt_eval_seconds += eval_s;
    times_.n_prompt_steps++;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.n_steps++;
    stats_.n_step_rows += batch.rows.size();
    stats_.n_decode_rows += batch.rows.size() - static_cast<size_t>(n_prompt_rows);
  }
  if (!st.ok()) {
    for (Slot* s : batch.slots) s->logit_row = -1;
    if (batch.slots.size() > 1) return false;  // the caller splits the batch
    Slot& s = *batch.slots.front();
    clear(s);  // the request fails; its slot starts over
    finish(s, st.with_context(batch.prompt_of(&s) != nullptr ? "prompt evaluation: "
                                                              : "generation: "));
    return false;
  }
  for (const Batch::Prompt& c : batch.prompts) advance_prompt(*c.slot, c.end, c.seg_end);

  // Draws: every generating slot with a logits row in this batch. The device samples what it
  // can: rows with neither a constraint nor a first token (the first is drawn on the host, as
  // Engine does).
  struct Draw {
    Slot* slot;
    double coin;
  };
  std::vector<Draw> draws;
  for (Slot* s : batch.slots) {
    if (s->task == nullptr || s->phase != Slot::Phase::kDecode || s->logit_row < 0) continue;
    draws.push_back({s, s->rng->next_double()});
  }
  std::vector<Backend::BatchSample> reqs(static_cast<size_t>(n_logits));
  bool any_device = false;
  for (const Draw& d : draws) {
    const GenerateRequest& request = *d.slot->task->request;
    if (d.slot->first || request.constraint) continue;
    Backend::BatchSample& b = reqs[static_cast<size_t>(d.slot->logit_row)];
    b.params = &request.sampling;
    b.history = d.slot->history;
    b.coin = d.coin;
    any_device = true;
  }
  const double t_sample = now_seconds();
  std::vector<std::optional<int32_t>> picked;
  if (any_device) picked = backend_.sample_batch(reqs);
  times_.sample_seconds += now_seconds() - t_sample;
  std::vector<float> scratch;
  for (const Draw& d : draws) {
    Slot& s = *d.slot;
    const size_t row = static_cast<size_t>(s.logit_row);
    int32_t token = -1;
    if (row < picked.size() && picked[row] && reqs[row].params != nullptr) {
      token = *picked[row];
    } else {
      const double t_host = now_seconds();
      token = draw_on_host(backend_.batch_logits(s.logit_row), *s.task->request, s.history,
                           s.generated, d.coin, scratch);
      times_.sample_seconds += now_seconds() - t_host;
      times_.host_draw_seconds += now_seconds() - t_host;
      times_.n_host_draws++;
    }
    s.first = false;
    if (s.spec) s.spec->set_root_row(s.logit_row);
    if (s.task->request->top_logprobs >= 0) {
      report_logprobs(*s.task->request, *s.task->cb, token, backend_.batch_logits(s.logit_row));
    }
    emit(s, token);
  }
  for (Slot* s : batch.slots) s->logit_row = -1;
  return true;
}

void Scheduler::advance_prompt(Slot& pre, int pre_end, int seg_end) {
  const GenerateRequest& request = *pre.task->request;
  const GenerateCallbacks& cb = *pre.task->cb;
  GenerateResult& result = pre.task->result;
  const int n = static_cast<int>(request.prompt.size());
  const int from = pre.done;
  pre.done = pre_end;
  if (pre.done >= pre.next_log && pre.done < n) {
    GEM_LOG_INFO("prompt (slot %d): %d/%d tokens", pre.id, pre.done, n);
    pre.next_log = (pre.done / Engine::kProgressLogStep + 1) * Engine::kProgressLogStep;
  }
  if (cb.on_prompt_progress && !cb.on_prompt_progress(pre.done, n)) {
    // Before the boundary's checkpoint: the slot goes back as if the request had not run.
    // After it: back to the boundary, the new history stays cached (Engine's rules).
    if (from >= pre.plan.boundary || pre.plan.extends) {
      pre.release_rollback = true;
    } else {
      pre.release_clear = true;
    }
    pre.logit_row = -1;
    result.finish = FinishReason::kCancelledInPrompt;
    result.prompt_seconds = now_seconds() - pre.t_start;
    finish(pre, ok_status());
    return;
  }
  if (pre_end != seg_end) return;
  if (seg_end == pre.plan.boundary) {
    backend_.slot_checkpoint(pre.id);
    const std::span<const float> row = backend_.batch_logits(pre.logit_row);
    pre.cached_logits.assign(row.begin(), row.end());
    pre.cached.assign(request.prompt.begin(), request.prompt.begin() + pre.plan.boundary);
    result.n_evaluated += pre.plan.boundary - pre.plan.start;
  } else {
    result.n_evaluated += n - pre.plan.boundary;
  }
  if (seg_end != n) {
    pre.logit_row = -1;  // the history's last row: kept, not drawn from
    return;
  }
  pre.phase = Slot::Phase::kDecode;
  result.prompt_seconds = now_seconds() - pre.t_start;
  pre.t_decode = now_seconds();
  if (request.max_tokens == 0) {
    result.finish = FinishReason::kLength;
    pre.release_rollback = true;
    pre.logit_row = -1;
    finish(pre, ok_status());
  }
}

void Scheduler::solo_step(Slot& slot) {
  const GenerateRequest& request = *slot.task->request;
  const int32_t one[1] = {slot.pending};
  const double t_eval = now_seconds();
  const Status st = backend_.eval(std::span<const int32_t>(one, 1), /*all_logits=*/false);
  times_.eval_seconds += now_seconds() - t_eval;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.n_steps++;
    stats_.n_step_rows++;
    stats_.n_decode_rows++;
  }
  if (!st.ok()) {
    clear(slot);
    finish(slot, st.with_context("generation: "));
    return;
  }
  const double coin = slot.rng->next_double();
  const double t_sample = now_seconds();
  std::optional<int32_t> token;
  if (!request.constraint) token = backend_.sample(request.sampling, slot.history, coin);
  const bool on_device = token.has_value();
  if (!token) {
    std::vector<float> scratch;
    token = draw_on_host(backend_.logits(-1), request, slot.history, slot.generated, coin, scratch);
  }
  times_.sample_seconds += now_seconds() - t_sample;
  if (slot.spec) {
    slot.spec->note_plain_step(now_seconds() - t_eval);
    slot.spec->set_root_row(-1);
  }
  if (request.top_logprobs >= 0 && slot.task->cb->on_logprobs) {
    // Where the backend keeps the row (on the device after a device draw), as Engine does.
    slot.task->cb->on_logprobs(*token, on_device
                                           ? backend_.token_logprobs(*token, request.top_logprobs)
                                           : row_logprobs(backend_.logits(-1), *token,
                                                          request.top_logprobs));
  }
  emit(slot, *token);
  apply_releases();
}

bool Scheduler::draft_round(Slot& slot) {
  const GenerateRequest& request = *slot.task->request;
  GenerateResult& result = slot.task->result;
  const int cur = static_cast<int>(request.prompt.size()) + result.n_generated - 1;
  const double t_eval = now_seconds();  // the round whole: drafting, verification, its emits
  const std::vector<int32_t> drafts = slot.spec->propose(slot.pending, cur, n_ctx(), result);
  if (drafts.empty()) return false;  // a plain step instead
  auto emit_one = [&](int32_t token) {
    slot.generated.push_back(token);
    return emit_token(token, is_eog_(token), n_ctx(), request, *slot.task->cb, slot.history,
                      result);
  };
  bool ended = false;
  int32_t next = -1;
  const Status st = slot.spec->round(backend_, slot.id, slot.pending, cur, drafts, emit_one,
                                     result, &ended, &next);
  times_.eval_seconds += now_seconds() - t_eval;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.n_steps++;
    stats_.n_step_rows += drafts.size() + 1;
  }
  if (!st.ok()) {
    clear(slot);
    finish(slot, st.with_context("generation: "));
  } else if (ended) {
    slot.release_rollback = true;
    finish(slot, ok_status());
  } else {
    emit(slot, next);
  }
  apply_releases();
  return true;
}

}  // namespace gem::runtime
