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

#include "base/status.h"
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

  // Stage profiling (`gem profile`, backend/profile.h): while `profiler` is set, every eval adds
  // the time of each stage of its forward to it; null turns profiling off, and the backend then
  // runs exactly the work it runs without profiling. An error when the backend cannot time its
  // stages, or not in the way profiler->timing() asks.
  virtual Status set_stage_profiler(StageProfiler* profiler) {
    if (profiler == nullptr) return ok_status();
    return Status::error("backend " + std::string(name()) + " cannot time its stages");
  }
};

}  // namespace gem
