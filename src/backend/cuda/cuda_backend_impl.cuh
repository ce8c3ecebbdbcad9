// The CUDA backend's state, shared by the weight upload (upload.cu) and the forward
// (forward_cuda.cu): the device layers and the backend class.
#pragma once

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/sample.cuh"
#include "backend/cuda/tuning.h"
#include "backend/profile.h"
#include "backend/cuda/types.cuh"
#include "base/status.h"
#include "model/model.h"
#include "sampler/sampler.h"

namespace gem::cuda {

struct DevLayer {
  DevMatrix qkv;   // [q | k | v] rows concatenated (v absent on full layers: V is raw K)
  DevMatrix wo;    // [n_embd, n_heads·D]
  DevMatrix gate;  // [n_ff, n_embd]
  DevMatrix up;    // [n_ff, n_embd]
  DevMatrix down;  // [n_embd, n_ff]
  const float* attn_norm = nullptr;
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
  const float* post_attn_norm = nullptr;
  const float* ffn_norm = nullptr;
  const float* post_ffw_norm = nullptr;
  const float* out_scale = nullptr;
  const double* inv_freq = nullptr;  // [D/2]
  void* k_cache = nullptr;           // [sequence slots][n_kv, n_slots, D] f32 or f16
  void* v_cache = nullptr;
  bool kv_f16 = false;
  bool ring = false;
  int n_slots = 0;
  size_t slot_bytes = 0;             // K (and V) bytes of one sequence slot: slot s at s·slot_bytes
  int n_splits_decode = 1;
  // V is the raw K projection and only the RoPE pairs below D/8 turn (full layers; rope_freqs'
  // factors of >= 1e29 leave the rest at angles below 1e-23): K = V ⊙ k_norm on the other
  // dims, and the long-context decode reads only K's rotated quarter (AttnArgs::k_shared_w).
  bool kv_shared = false;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(const model::Model& model, const BackendOptions& options,
              const cuda::CudaTuning& tuning)
      : model_(model), cfg_(model.config), opt_(options), tuning_(tuning) {}
  ~CudaBackend() override;

  Status init();
  // The weights (upload.cu): every layer's matrices, norms and RoPE frequencies, the embedding
  // and the output norm.
  Status upload_weights();

  std::string_view name() const override { return "cuda"; }
  const BackendOptions& options() const override { return opt_; }
  int n_past() const override { return past_[0]; }
  int slot_n_past(int slot) const override { return past_.at(slot); }
  Status eval(std::span<const int32_t> tokens, bool all_logits,
              const TileCallback& on_tile) override;
  std::span<const float> logits(int row) override;
  void checkpoint() override { slot_checkpoint(0); }
  void restore() override { slot_restore(0); }
  void reset() override { slot_reset(0); }
  // Sequence slots (batch_cuda.cu): each slot's K/V lies in its own part of every layer's cache.
  Status eval_batch(std::span<const BatchRow> rows) override;
  std::span<const float> batch_logits(int i) override;
  void slot_checkpoint(int slot) override;
  void slot_restore(int slot) override;
  void slot_reset(int slot) override;
  Status slot_truncate(int slot, int n_past) override;
  Status slot_fork(int src, int dst) override;
  std::optional<int32_t> sample(const SamplingParams& params, std::span<const int32_t> history,
                                double coin) override;
  std::vector<std::optional<int32_t>> sample_batch(std::span<const BatchSample> reqs) override;
  TokenLogprobs token_logprobs(int32_t token, int top_n) override;  // logprobs.cu
  Status set_stage_profiler(StageProfiler* profiler) override;
  // Kept hidden rows and the MTP drafter (drafter_cuda.cu).
  void set_keep_hidden(bool on) override {
    keep_hidden_ = on;
    hidden_valid_ = false;  // rows of an eval before the switch were not kept
  }
  std::span<const float> hidden(int row) override;
  std::span<const float> batch_hidden(int i) override;
  Result<std::unique_ptr<Drafter>> make_drafter(const model::Assistant& assistant) override;

 private:
  friend class CudaDrafter;  // reads the weights, caches and stream; uploads through upload_matrix
  void* dev_alloc(size_t bytes);
  Status upload_matrix(std::span<const model::TensorView* const> parts, DevMatrix* out);
  Status upload_f32(const model::TensorView& t, const float** out);
  // RoPE inverse frequencies of a head width and base in f64, `factors` (rope_freqs, full
  // layers) folded in.
  Status upload_inv_freq(int head_dim, float theta, const float* factors, const double** out);
  // The kept hidden rows (keep_hidden_): an eval's or eval_batch's start sizes hidden_host_ for
  // its `rows` logit rows; keep_hidden_rows enqueues the copy of h_'s rows [src, src+n) (the
  // final-normed rows the head reads) to hidden rows [dst, dst+n); keep_batch_hidden copies h_'s
  // row i to hidden row rank[i] for every rank[i] >= 0 (a pass's rows that ask for logits).
  void begin_hidden(int rows);
  void keep_hidden_rows(int src, int dst, int n);
  void keep_batch_hidden(std::span<const int> rank);
  void forward_tile(int n, bool want_head);
  void layer_decode(const model::LayerPlan& p, const DevLayer& L, bool last);
  void layer_small(const model::LayerPlan& p, const DevLayer& L, int n, bool last);
  // The rows pass (batch_cuda.cu): n rows (rows_host_[0..n): slot, position; tokens in
  // step_host_[1..n]) each computed exactly as its slot's decode step computes it — the decode
  // products' arithmetic (matmul_rows), every row's K/V stored into its slot first, then the
  // decode attention per row over its slot's cache with the splits and form of its position's
  // decode graph. Enqueued, not synchronised; the head: none, every row's logits in logits_dev_
  // (kAll), or only the last row's, at logits_dev_'s first row (kLast: a prompt's tile; the same
  // logits, the head's product of one row being that row's in any pass, bit for bit).
  enum class RowsHead { kNone, kLast, kAll };
  void rows_pass(int n, RowsHead head);
  void forward_rows(int n, RowsHead head);
  void layer_rows(const model::LayerPlan& p, const DevLayer& L, int n, bool last);
  // One slot's run of tokens through the tile path (eval_batch's long runs), rows kept at their
  // logit ranks in logits_host_ (rank[i] < 0: not kept).
  Status eval_run(int slot, std::span<const BatchRow> rows, std::span<const int> rank);
  void ffn_block(const model::LayerPlan& p, const DevLayer& L, int n, bool last, bool small);
  void gate_up_by_row(const DevLayer& L, int n);
  void* k_of(const DevLayer& L, int slot) const {
    return static_cast<char*>(L.k_cache) + static_cast<size_t>(slot) * L.slot_bytes;
  }
  void* v_of(const DevLayer& L, int slot) const {
    return static_cast<char*>(L.v_cache) + static_cast<size_t>(slot) * L.slot_bytes;
  }
  void layer_prefill(const model::LayerPlan& p, const DevLayer& L, int n, bool last);
  bool attention_tile(const model::LayerPlan& p, const DevLayer& L, int n, bool small);
  void gemm(const DevMatrix& w, const __half* x16, int n, float* y);
  void gemm_rows(const __half* w16, int64_t rows, int64_t cols, const __half* x16, int n,
                 float* y);
  int splits_for(const DevLayer& L, int n) const;
  int decode_splits(const model::LayerPlan& p, const DevLayer& L) const;
  int64_t decode_keys(const DevLayer& L) const;
  int bucket_splits(const model::LayerPlan& p, const DevLayer& L, int bucket) const;
  int64_t bucket_keys(const DevLayer& L, int bucket) const;
  int decode_bucket(int pos) const;
  void head_row(int row);
  void head_rows(int n);  // rows 0..n-1 into logits_dev_ [n, V] (n ≤ matmul_n_max())
  // Stage profiling (gem profile): a stage boundary. Off (no profiler), nothing: the decode
  // graphs are captured with it off, so production runs exactly the launches it ran before.
  void mark(Stage stage, int layer) {
    if (profiler_ != nullptr) prof_mark(stage, layer);
  }
  void prof_mark(Stage stage, int layer);
  void prof_record(cudaEvent_t event);
  void prof_decode();
  void prof_collect();

  const model::Model& model_;
  const model::Config& cfg_;
  BackendOptions opt_;
  const cuda::CudaTuning tuning_;
  std::vector<int> past_;  // per slot: positions held (n_past)

  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  std::vector<void*> allocs_;
  uint64_t weight_bytes_ = 0;

  DevMatrix embd_;
  const float* output_norm_ = nullptr;
  std::vector<DevLayer> layers_;

  // Scratch, sized for opt_.n_tile tokens (T).
  int T_ = 0;
  int32_t* step_dev_ = nullptr;  // [1 + T]: StepParams{pos0}, then the tile's token ids
  int32_t* step_host_ = nullptr;  // pinned mirror
  float* x_ = nullptr;            // [T, E] residual stream
  float* h_ = nullptr;            // [T, E] normed input of the next product
  Q8Act hq_;                      // q8 of h_
  float* a_ = nullptr;            // [T, E] output of attn_output / ffn_down
  float* qkv_ = nullptr;          // [T, qkv_max]
  float* q_ = nullptr;            // [T, H·Dmax]
  float* k_ = nullptr;            // [T, Gmax·Dmax]
  float* v_ = nullptr;
  float* att_ = nullptr;          // [T, H·Dmax]
  Q8Act attq_;
  float* gu_ = nullptr;           // [T, 2F]
  float* g_ = nullptr;            // [T, F]
  Q8Act gq_;
  float* part_ = nullptr;
  void* prefill_scratch_ = nullptr;  // attention_prefill's (tiles of kGemmAttnMin tokens or more)
  size_t prefill_scratch_bytes_ = 0;
  int n_sm_ = 132;
  __half* x16_ = nullptr;         // [T, max cols]
  __half* w16_ = nullptr;         // [max rows·cols] dequantised weights for cuBLAS
  float* logits_dev_ = nullptr;   // [min(T, matmul_n_max()), V]
  float* sample_scratch_ = nullptr;
  int32_t* sample_out_dev_ = nullptr;
  int32_t* hist_dev_ = nullptr;   // [256]
  int32_t* pinned_small_ = nullptr;  // pinned: [0] sampled id, [1..256] history

  // Decode graphs, one per bucket of positions (CudaTuning::decode_buckets). A graph's attention
  // is cut into splits for the keys its bucket can hold (decode_splits): bucket k serves
  // positions < decode_bucket_min·2^k (the last one, the whole context).
  std::vector<cudaGraphExec_t> decode_graphs_;
  int capture_bucket_ = 0;  // the bucket forward_tile is capturing

  std::vector<float> logits_host_;  // [rows, V]: rows are written before they are read
  // Room for n floats in logits_host_, never filled: zeroing the rows every step cost a 1 MB
  // write per decoded token and B MB per batched step, on the host, before the launches.
  void reserve_logits_host(size_t n) {
    if (logits_host_.size() < n) logits_host_.resize(n);
  }
  int logits_rows_ = 0;
  bool logits_pending_ = false;     // last row still only on the device
  const float* logits_last_dev_ = nullptr;  // that row (logits_dev_ or a row of a rows pass)
  // The slot the tile path (forward_tile and its layers) reads and writes: 0 for eval(), a long
  // run's slot in eval_batch. The decode graphs are slot 0's.
  int tile_slot_ = 0;

  // Stage profiling. Events: [0] before the step's upload, [1] at the forward's start, then one
  // per mark. A decode step replays its own graph per bucket, captured with the marks (as record
  // nodes beside the chain of kernels, or in it); prompt tiles record eagerly between launches.
  enum class ProfTiming { kGraphSide, kGraphInline, kEager };
  StageProfiler* profiler_ = nullptr;
  ProfTiming prof_timing_ = ProfTiming::kGraphSide;
  bool prof_graph_broken_ = false;  // a profiled graph failed to build: eager from then on
  bool prof_capturing_ = false;
  bool prof_failed_ = false;        // a record node of the capture in progress failed
  cudaGraphNode_t prof_prev_node_ = nullptr;  // graph-side: the last record node captured
  std::vector<cudaEvent_t> prof_events_;
  std::vector<std::pair<Stage, int>> prof_marks_;  // the marks of the tile being enqueued
  std::vector<cudaGraphExec_t> prof_graphs_;
  std::vector<std::vector<std::pair<Stage, int>>> prof_graph_marks_;
  const std::vector<std::pair<Stage, int>>* prof_step_marks_ = nullptr;  // this step's

  // Per slot, the checkpoint: copies of every ring layer's K/V (slot 0's rings at index i of
  // saved, allocated at the first checkpoint), the n_past it was taken at (-1 = none), and
  // whether its journal could not be allocated.
  struct Checkpoint {
    std::vector<std::pair<void*, void*>> saved;
    int n_past = -1;
    bool lost = false;
  };
  std::vector<Checkpoint> ckpt_;

  // The rows pass. Rows of one pass: at most rows_max_ (its attention parts are sized for
  // them); eval_batch takes every slot's runs of at most kRowsRunMax rows through it (decode
  // steps, speculative verifications).
  static constexpr int kRowsRunMax = 16;
  // eval()'s tiles of 2..kEvalRowsMax tokens take the rows pass too: there it beats the n-token
  // products on both models (the H200, bench/results/batched.md run 56: 12B pp8 1,860 against 1,427
  // tok/s, 31B 907 against 737); from 9 rows it still wins on the 12B but loses on the 31B
  // (pp12 854 against 981), where the rows pass switches to its 32-row tiles.
  static constexpr int kEvalRowsMax = 8;
  int rows_max_ = 0;
  bool rows_ok_ = false;  // every layer's attention takes the decode kernels (else: tile path)
  // [2·rows_max_]: the pass's rows in order, then grouped by decode bucket (the attention's).
  cuda::RowParams* rows_dev_ = nullptr;
  cuda::RowParams* rows_host_ = nullptr;  // pinned
  struct RowGroup {
    int bucket = 0;
    int offset = 0;  // into the grouped half
    int n = 0;
  };
  std::vector<RowGroup> row_groups_;
  // Captured rows passes, keyed by their rows' decode buckets (and whether the head runs, as a
  // last element): the launches depend only on these; slots, positions and tokens are read
  // from rows_dev_ and step_dev_.
  std::map<std::vector<int>, cudaGraphExec_t> rows_graphs_;
  std::vector<int> batch_ends_;
  int batch_rows_ = 0;  // logit rows of the last eval_batch
  // Where batch_logits(i) is: on the host (logits_host_ row i, once batch_on_host_[i]) or, for
  // the rows of a final rows pass, still in logits_dev_ row batch_dev_row_[i] (copied when read).
  std::vector<int> batch_dev_row_;
  std::vector<char> batch_on_host_;
  int32_t* sample_outs_dev_ = nullptr;  // [rows_max_] sample_batch's picks
  int32_t* hists_dev_ = nullptr;        // [rows_max_, 256] their penalty windows
  int32_t* argmax_rows_dev_ = nullptr;  // [rows_max_] the logits rows of its batched picks
  cuda::DrawArgs* draws_dev_ = nullptr;     // [rows_max_] the batched sampled rows' draws
  cuda::DrawArgs* pinned_draws_ = nullptr;  // pinned: their staging
  float* topk_rows_scratch_ = nullptr;      // their top-k rounds' candidates
  // pinned: [rows_max_] picks, [rows_max_, 256] windows, [rows_max_] plain greedy rows
  int32_t* pinned_batch_ = nullptr;

  bool keep_hidden_ = false;        // set_keep_hidden
  bool hidden_valid_ = false;       // the last eval / eval_batch kept its rows' hidden states
  std::vector<float> hidden_host_;  // [rows, E] beside the logit rows
};

// Decode splits over `keys` keys: about per_sm blocks per SM over the KV heads once there are
// many, and no split shorter than kSplitMinKeys (the kernels' rule for a split's keys too).
int decode_splits_for(int64_t keys, int n_kv, int n_sm, int per_sm);

}  // namespace gem::cuda
