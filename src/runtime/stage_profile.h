// `gem profile`'s measurements, on any backend that can time its stages (backend/profile.h):
// the cache is brought to a depth once and checkpointed; each sample restores it and times one
// pass (a decode step of one row, or a prompt tile of many) stage by stage; the same pass with
// profiling off is timed the way `gem bench` times it, so the profiling overhead shows. The bytes
// each stage moves come from the model's tensor sizes and the cache depth (stage_bytes).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.h"
#include "backend/profile.h"
#include "base/status.h"
#include "model/model.h"

namespace gem::runtime {

// Where a stage's time is spent: the layers of one attention kind, or outside the layer loop.
enum class StageScope { kSliding, kFull, kGlobal };
std::string_view scope_name(StageScope s);  // "sliding", "full", "global"

// What one stage moves in one pass, summed over the layers of its scope (README "Profiling").
struct StageBytes {
  uint64_t weights = 0;      // tensor bytes read, as stored in the file
  uint64_t kv = 0;           // KV cache bytes read (attention) or written (kv_write)
  uint64_t activations = 0;  // f32 activations read and written (a rough term)
  uint64_t total() const { return weights + kv + activations; }
};

// What a pass evaluates. kTile: `rows` rows of one sequence from cache depth `depth` (a decode
// step when rows = 1, else a prompt tile), the last row's logits. kBatch: a batched decode step,
// `rows` sequences (slots) with one row each at `depth`, every row's logits (Backend::eval_batch,
// gem bench --parallel's step). kVerify: a speculative round's verification, `rows` rows of one
// sequence at positions depth .. depth + rows - 1 through Backend::eval_batch, every row's logits.
enum class PassShape { kTile, kBatch, kVerify };
std::string_view shape_name(PassShape s);  // "tile", "batch", "verify"

// The bytes of `stage` over the layers of `scope` (kGlobal: the stages outside the layers) for a
// pass of `rows` rows of `shape` whose first row sits at cache depth `depth`.
StageBytes stage_bytes(const model::Model& model, model::KvType kv_type, Stage stage,
                       StageScope scope, int rows, int depth, PassShape shape = PassShape::kTile);

// One stage of one scope: time per pass over the samples, and its bytes.
struct StageRow {
  Stage stage = Stage::kSetup;
  StageScope scope = StageScope::kGlobal;
  int n_layers = 0;     // layers of the scope (0 for kGlobal)
  double mean_s = 0.0;  // mean over the samples of the stage's time in one pass
  double min_s = 0.0;   // the least of those
  StageBytes bytes;
};

// The profile of one pass shape.
struct PassProfile {
  int rows = 1;
  PassShape shape = PassShape::kTile;
  int depth = 0;
  int n_samples = 0;
  std::vector<StageRow> stages;       // stage order, then sliding, full, global
  double stages_mean_s = 0.0;         // Σ of every stage's mean (sample included)
  double forward_mean_s = 0.0;        // Σ of the forward's stages (sample excluded)
  double forward_min_s = 0.0;         // the least of a sample's forward stages, summed
  double profiled_eval_mean_s = 0.0;  // wall time of the evals the stage times come from
  double plain_mean_s = 0.0;          // the same evals with profiling off, timed as gem bench does
  double plain_min_s = 0.0;
};

struct ProfileOptions {
  int depth = 0;             // cache depth every sample starts from
  std::vector<int> rows{1};  // pass shapes: 1 = a decode step, N = a prompt tile of N rows
  // Batched decode steps (eval_batch): B sequences at the depth, one row each; the backend needs
  // B slots. Profiled after the rows shapes.
  std::vector<int> batch;
  // Verifications (PassShape::kVerify): N rows of slot 0 from the depth, as a speculative round
  // verifies N - 1 drafts; the slot is truncated back to the depth after each. Profiled last.
  std::vector<int> verify;
  int n_samples = 10;        // timed samples per shape (each also timed plain)
  // Decode steps: time picking the token (the model's recommended sampling); batched steps and
  // verifications: every row's, as the server draws them (Backend::sample_batch, then the host).
  bool sample = true;
  uint32_t seed = 42;        // synthetic tokens
};

struct ProfileReport {
  std::string method;  // how the backend timed its stages (StageProfiler::method)
  std::vector<PassProfile> passes;
};

// Random token ids in [0, n_vocab), the same for the same seed (gem bench fills its depth so).
std::vector<int32_t> synthetic_tokens(uint32_t seed, int n, int n_vocab);

// Resets the cache, evaluates synthetic_tokens(options.seed, depth) and checkpoints; profiles
// every shape from there. A batched shape copies slot 0 into slots 1..B-1 (slot_fork) and, after
// each sample, truncates every slot back to the depth; a verification truncates slot 0. On return profiling is off and the cache
// is restored: n_past() == depth, holding those tokens, the other slots empty. The backend's n_ctx must hold depth + the largest shape, and its
// n_tile the largest shape (one tile per pass).
Result<ProfileReport> profile_stages(Backend& backend, const model::Model& model,
                                     const ProfileOptions& options, StageProfiler& profiler);

// Attention of a decode step at each depth (ascending): time per scope and the KV bytes read.
struct AttentionPoint {
  int depth = 0;
  int n_samples = 0;
  StageRow sliding;           // Stage::kAttention over the sliding layers
  StageRow full;              // and over the full ones
  double forward_mean_s = 0;  // the whole decode step's stages, for the share
};

// Fills the cache to each depth in turn (synthetic tokens of `seed`) and times n_samples decode
// steps there, restoring before each. Leaves the cache at the largest depth, profiling off.
Result<std::vector<AttentionPoint>> profile_attention(Backend& backend, const model::Model& model,
                                                      std::span<const int> depths, int n_samples,
                                                      uint32_t seed, StageProfiler& profiler);

}  // namespace gem::runtime
