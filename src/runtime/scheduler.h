// The scheduler: continuous batching of several requests over the backend's sequence slots
// (BackendOptions::n_slots, `gem serve -np S`). Callers on any thread hand it a request with
// generate(), which blocks like Engine::generate; one scheduler thread owns the backend and runs
// every request's prompt and decode steps.
//
// Each step is one Backend::eval_batch: one decode row for every generating slot, plus at most
// one chunk of chunk() prompt rows (the oldest request in prefill; where its prompt, or its
// history part, ends inside the chunk, the next oldest fills the rest). Then
// every generating row is sampled (Backend::sample_batch first, the host for the rows it leaves
// and for requests with a constraint), and its token emitted with Engine's stop rules
// (generation.h), on the scheduler thread. Stall bound: a generating stream waits at most one
// step between two tokens, and a step holds at most chunk() prompt rows besides the S decode
// rows, so a new prompt delays running streams by no more than the evaluation of one chunk per
// token (on the CPU and CUDA a chunk of n_tile rows is one layer pass of the prompt path).
//
// Each slot keeps one conversation's prefix cache with the Engine's rules: its cached tokens up to
// the last request's history boundary, the checkpoint there, the last row's logits; reuse is
// exact (identical prompt or strict extension, else the slot starts over) and after each request
// the slot is restored to the boundary. A request goes to the idle slot whose cache it extends
// furthest, else an empty idle slot, else the least recently used idle slot (evicted). Requests
// beyond the slots wait in FIFO order for one to free (the server bounds that queue).
//
// Cancellation acts per slot, as in Engine: a callback returning false stops that request at its
// next chunk or token and leaves every other slot's stream as it was. A batch the backend refuses
// (it then evaluates none of it) is retried one slot at a time, so only the request whose rows
// fail ends with the error (its slot restarts cold) and the others go on unchanged.
//
// One request alone: while a request is the only one running (no other slot generating or
// evaluating a prompt, none waiting) on slot kSoloSlot, its decode steps take the
// single-sequence path (Backend::eval, Backend::sample), so one client runs as fast as with the
// Engine. Speculative decoding (GenerateRequest::drafter) runs only then too (DraftSource::propose
// names no slot: the MTP drafter reads slot 0's cache); otherwise decode is batched without
// drafts. A request asking for logprobs (GenerateRequest::top_logprobs) gets each token's
// log-probabilities from the row it was drawn from, on any path, and is never drafted (as in
// Engine). The rounds are Engine's (generation.h Speculation), so greedy output is the same
// either way, sampled output the same in distribution.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "base/status.h"
#include "runtime/engine.h"

namespace gem::runtime {

// One slot as /slots shows it.
struct SlotInfo {
  int id = 0;
  int n_ctx = 0;
  bool busy = false;          // a request holds it (prefill or decode)
  bool prefill = false;       // its request's prompt is being evaluated
  int n_cached = 0;           // tokens kept between requests (up to the history boundary)
  int n_past = 0;             // positions held in the backend now
  uint64_t task = 0;          // the last request it ran (0: none yet)
  int n_prompt = 0;           // that request's prompt
  int n_decoded = 0;          // tokens it generated so far
  int max_tokens = -1;
  SamplingParams sampling;    // that request's sampling (llama-server's /slots "params")
  uint64_t n_reused = 0;      // requests that reused this slot's cache (some or all of it)
};

// Where the scheduler thread's time went (seconds): what a gap between the server's throughput
// and the backend's own (gem bench --parallel) consists of.
struct SchedulerTimes {
  double busy_seconds = 0;         // admitting, starting, stepping, publishing (the rest: idle)
  double eval_seconds = 0;         // in the backend's evaluations (eval_batch, eval, drafting)
  double prompt_eval_seconds = 0;  // of them, evaluations that carried prompt rows
  uint64_t n_prompt_steps = 0;     // steps that carried prompt rows
  double sample_seconds = 0;       // drawing tokens (device and host)
  double host_draw_seconds = 0;    // of it, draws on the host (first tokens, constraints, ...)
  uint64_t n_host_draws = 0;
  double emit_seconds = 0;         // handing tokens to their requests (detokenise, stream)
  double release_seconds = 0;      // starting requests, rollbacks and resets after they end
};

struct SchedulerStats {
  uint64_t n_requests = 0;    // generate() calls that reached the scheduler
  uint64_t n_steps = 0;       // eval_batch calls
  uint64_t n_step_rows = 0;   // rows in them
  uint64_t n_decode_rows = 0; // of them, decode rows (one generating slot each)
  uint64_t n_reuse_hits = 0;  // requests that found part of their prompt cached
  uint64_t n_evictions = 0;   // requests that started over on a slot holding another cache
  int n_waiting = 0;          // requests waiting for a slot now
  SchedulerTimes time;        // as of the last step
};

class Scheduler {
 public:
  // The slot whose lone request decodes through the single-sequence path (Backend::eval and
  // Backend::sample: on CUDA the decode graph and the device sampler, as Engine) and drafts.
  static constexpr int kSoloSlot = 0;
  // Prompt rows per step (chunk()): the backend's tile (BackendOptions::n_tile), the rows the
  // prompt path evaluates in one layer pass, so a chunk costs what one prompt tile costs today.
  // `is_eog`: the tokens that end a generation (the tokenizer's). The backend must outlive it.
  Scheduler(Backend& backend, std::function<bool(int32_t)> is_eog);
  ~Scheduler();

  // Runs one request to completion (or cancellation), blocking the calling thread; the callbacks
  // and the request's constraint run on the scheduler thread. Same contract as Engine::generate.
  Result<GenerateResult> generate(const GenerateRequest& request, const GenerateCallbacks& cb);

  int n_slots() const { return static_cast<int>(slots_.size()); }
  int n_ctx() const { return backend_.options().n_ctx; }
  int chunk() const { return chunk_; }
  std::vector<SlotInfo> slots() const;
  SchedulerStats stats() const;

 private:
  struct Task;
  struct Slot;
  void loop();
  // Gives waiting tasks a slot each while idle slots remain (FIFO).
  void admit_locked();
  int choose_slot_locked(const GenerateRequest& request);
  // On the scheduler thread: the prefix plan for the slot's new task (the slot starts over unless
  // the prompt extends or equals its cache), the first progress callback; the task may end here
  // (cancelled before its prompt; max_tokens 0 on an identical prompt).
  void start(Slot& slot);
  struct Batch;
  // One step: the lone request's single-sequence step, or one eval_batch of every generating
  // slot's decode row and one prompt chunk, and everything after it.
  void step();
  // Evaluates the batch, advances its prompts and draws its generating rows; false when the
  // eval failed (a batch of one slot: its request ended with the error).
  bool run(Batch& batch);
  // After a prompt chunk: progress (cancellation), the history checkpoint, the switch to decode.
  void advance_prompt(Slot& pre, int pre_end, int seg_end);
  // The token drawn for a generating slot: emitted; the request ends or the token waits for the
  // next step's row.
  void emit(Slot& slot, int32_t token);
  // Ends the slot's task and hands the result over; the slot is idle (what it rolls back or
  // resets is set by the caller and done in apply_releases()).
  void finish(Slot& slot, Status status);
  void rollback(Slot& slot);
  void apply_releases();  // the rollbacks and resets of the requests that ended this step
  void clear(Slot& slot);
  void publish();  // refreshes info_ for slots()
  // One speculative round of the lone request; false when it drafted nothing (a plain step then).
  bool draft_round(Slot& slot);
  // One decode step of the lone request on kSoloSlot through Backend::eval.
  void solo_step(Slot& slot);

  Backend& backend_;
  std::function<bool(int32_t)> is_eog_;
  const int chunk_;
  std::vector<std::unique_ptr<Slot>> slots_;  // the scheduler thread's

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task*> waiting_;    // guarded by mu_
  std::vector<SlotInfo> info_;   // guarded by mu_
  SchedulerStats stats_;         // guarded by mu_
  SchedulerTimes times_;         // the scheduler thread's; published into stats_.time
  DraftCosts draft_costs_[2];    // the speculative rounds' costs, greedy and sampled (its thread's)
  bool stop_ = false;            // guarded by mu_
  uint64_t next_task_ = 1;       // guarded by mu_
  uint64_t clock_ = 0;           // the scheduler thread's: LRU stamps
  std::thread thread_;
};

}  // namespace gem::runtime
