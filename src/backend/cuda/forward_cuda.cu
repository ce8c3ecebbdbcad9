// The CUDA backend: weights uploaded once (Q4_0/Q8_0 repacked to the split layout), the KV
// cache and every scratch buffer allocated at creation, and forward_tile() running the layers in
// order on one stream. A one-token eval replays a CUDA graph of the whole step (embedding to
// soft-capped logits); prompt tiles run the same ops with cuBLAS products on f16 tiles.
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/kernels.cuh"
#include "base/log.h"
#include "base/timer.h"
#include "sampler/sampler.h"

namespace gem {
namespace {

using cuda::DevMatrix;
using cuda::Q8Act;
using cuda::WType;

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
  void* k_cache = nullptr;           // [n_kv, n_slots, D] f32 or f16
  void* v_cache = nullptr;
  bool kv_f16 = false;
  bool ring = false;
  int n_slots = 0;
  int n_splits_decode = 1;
  // V is the raw K projection and only the RoPE pairs below D/8 turn (full layers; rope_freqs'
  // factors of >= 1e29 leave the rest at angles below 1e-23): K = V ⊙ k_norm on the other
  // dims, and the long-context decode may read only K's rotated quarter (AttnArgs::k_shared_w;
  // GEM_CUDA_ATTN_SHARED_KV=1).
  bool kv_shared = false;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(const model::Model& model, const BackendOptions& options)
      : model_(model), cfg_(model.config), opt_(options) {}
  ~CudaBackend() override;

  Status init();

  std::string_view name() const override { return "cuda"; }
  const BackendOptions& options() const override { return opt_; }
  int n_past() const override { return n_past_; }
  Status eval(std::span<const int32_t> tokens, bool all_logits,
              const TileCallback& on_tile) override;
  std::span<const float> logits(int row) override;
  void checkpoint() override;
  void restore() override;
  void reset() override { n_past_ = 0; }
  std::optional<int32_t> sample(const SamplingParams& params, std::span<const int32_t> history,
                                double coin) override;

 private:
  void* dev_alloc(size_t bytes);
  Status upload_matrix(std::span<const model::TensorView* const> parts, DevMatrix* out);
  Status upload_f32(const model::TensorView& t, const float** out);
  void forward_tile(int n, bool want_head);
  void layer_decode(const model::LayerPlan& p, const DevLayer& L, bool last);
  void layer_prefill(const model::LayerPlan& p, const DevLayer& L, int n, bool last);
  void gemm(const DevMatrix& w, const __half* x16, int n, float* y);
  void gemm_rows(const __half* w16, int64_t rows, int64_t cols, const __half* x16, int n,
                 float* y);
  int splits_for(const DevLayer& L, int n) const;
  int decode_splits(const model::LayerPlan& p, const DevLayer& L) const;
  int64_t decode_keys(const DevLayer& L) const;
  int decode_bucket(int pos) const;
  void maybe_start_profiler();
  void head_row(int row);

  const model::Model& model_;
  const model::Config& cfg_;
  BackendOptions opt_;
  int n_past_ = 0;

  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  // Timing experiments only (results are wrong): GEM_CUDA_SKIP lists decode kernels to leave
  // out of the graph (res, q8, prologue, attn, qkv, wo, gated, down), so a step's time with and
  // without them gives each one's cost in the graph, launch gaps included.
  unsigned skip_ = 0;  // cuda::DecodeSkip bits
  bool skip(cuda::DecodeSkip what) const { return (skip_ & what) != 0; }
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
  float* logits_dev_ = nullptr;   // [V]
  float* sample_scratch_ = nullptr;
  int32_t* sample_out_dev_ = nullptr;
  int32_t* hist_dev_ = nullptr;   // [256]
  int32_t* pinned_small_ = nullptr;  // pinned: [0] sampled id, [1..256] history

  // Decode graphs, one per bucket of positions. A graph's attention is cut into splits for the
  // keys its bucket can hold (decode_splits): bucket k serves positions < bucket_min_·2^k (the
  // last one, the whole context), so a short conversation in a long context does not pay for
  // the splits and merges of the full length. GEM_CUDA_DECODE_BUCKETS=0 turns them off (one
  // graph, splits for the whole context); GEM_CUDA_DECODE_BUCKET_MIN (1024) is the first
  // bucket's size. Run 10, 12B in a 32,896-position context at depth 0: 335.0 tok/s with
  // buckets from 1024, 328.7 from 256, 315.8 without (31B 157.4 / 158.0 / 156.5); equal at
  // depths 4096 and 32768.
  std::vector<cudaGraphExec_t> decode_graphs_;
  bool buckets_ = true;
  int bucket_min_ = 1024;
  int capture_bucket_ = 0;  // the bucket forward_tile is capturing
  bool profiler_started_ = false;

  std::vector<float> logits_host_;  // [rows, V]
  int logits_rows_ = 0;
  bool logits_pending_ = false;     // last row still only on the device

  // Checkpoint: copies of every ring layer's K/V at the checkpoint.
  std::vector<std::pair<void*, void*>> ring_saved_;
  int ckpt_n_past_ = -1;
};

CudaBackend::~CudaBackend() {
  for (cudaGraphExec_t g : decode_graphs_) {
    if (g) cudaGraphExecDestroy(g);
  }
  if (cublas_) cublasDestroy(cublas_);
  for (void* p : allocs_) cudaFree(p);
  for (auto& [k, v] : ring_saved_) {
    cudaFree(k);
    cudaFree(v);
  }
  if (step_host_) cudaFreeHost(step_host_);
  if (pinned_small_) cudaFreeHost(pinned_small_);
  if (stream_) cudaStreamDestroy(stream_);
}

void* CudaBackend::dev_alloc(size_t bytes) {
  void* p = nullptr;
  if (cudaMalloc(&p, bytes < 256 ? 256 : bytes) != cudaSuccess) return nullptr;
  allocs_.push_back(p);
  return p;
}

WType wtype_of(DType t, bool* ok) {
  *ok = true;
  switch (t) {
    case DType::kF32: return WType::kF32;
    case DType::kQ4_0: return WType::kQ4_0;
    case DType::kQ8_0: return WType::kQ8_0;
    case DType::kQ6_K: return WType::kQ6_K;
    default: *ok = false; return WType::kF32;
  }
}

// Uploads the row-concatenation of `parts` (same type and cols). Q4_0/Q8_0 go through a raw
// staging copy and the repack kernel; F32/Q6_K rows are copied as they are.
Status CudaBackend::upload_matrix(std::span<const model::TensorView* const> parts,
                                  DevMatrix* out) {
  const model::TensorView& first = *parts[0];
  bool ok = false;
  out->type = wtype_of(first.type, &ok);
  if (!ok) {
    return errorf("cuda: tensor %.*s has type %.*s; expected F32, Q4_0, Q8_0 or Q6_K",
                  static_cast<int>(first.name.size()), first.name.data(),
                  static_cast<int>(dtype_name(first.type).size()), dtype_name(first.type).data());
  }
  out->cols = first.cols;
  out->rows = 0;
  uint64_t raw_bytes = 0;
  for (const model::TensorView* t : parts) {
    if (t->type != first.type || t->cols != first.cols) {
      return errorf("cuda: tensors %.*s and %.*s cannot be fused (type or width differs)",
                    static_cast<int>(first.name.size()), first.name.data(),
                    static_cast<int>(t->name.size()), t->name.data());
    }
    out->rows += t->rows;
    raw_bytes += t->n_bytes;
  }
  const bool split = out->type == WType::kQ4_0 || out->type == WType::kQ8_0;
  const bool q8 = out->type == WType::kQ8_0;
  const int64_t nb = out->cols / 32;
  if (split) {
    out->qs = static_cast<uint8_t*>(dev_alloc(out->rows * nb * (q8 ? 32 : 16)));
    out->d = static_cast<__half*>(dev_alloc(out->rows * nb * sizeof(__half)));
    if (!out->qs || !out->d) return errorf("cuda: out of device memory uploading %.*s",
                                           static_cast<int>(first.name.size()), first.name.data());
    uint8_t* staging = nullptr;
    uint64_t max_part = 0;
    for (const model::TensorView* t : parts) max_part = std::max(max_part, t->n_bytes);
    if (cudaMalloc(&staging, max_part) != cudaSuccess) {
      return errorf("cuda: out of device memory staging %.*s", static_cast<int>(first.name.size()),
                    first.name.data());
    }
    int64_t row0 = 0;
    for (const model::TensorView* t : parts) {
      GEM_CUDA_CHECK(cudaMemcpyAsync(staging, t->data, t->n_bytes, cudaMemcpyHostToDevice, stream_));
      cuda::repack_blocks(staging, t->rows * nb, q8, out->qs + row0 * nb * (q8 ? 32 : 16),
                          out->d + row0 * nb, stream_);
      row0 += t->rows;
    }
    GEM_CUDA_CHECK(cudaStreamSynchronize(stream_));
    cudaFree(staging);
  } else {
    out->raw = static_cast<uint8_t*>(dev_alloc(raw_bytes));
    if (!out->raw) return errorf("cuda: out of device memory uploading %.*s",
                                 static_cast<int>(first.name.size()), first.name.data());
    uint64_t off = 0;
    for (const model::TensorView* t : parts) {
      GEM_CUDA_CHECK(cudaMemcpy(out->raw + off, t->data, t->n_bytes, cudaMemcpyHostToDevice));
      off += t->n_bytes;
    }
  }
  weight_bytes_ += raw_bytes;
  return ok_status();
}

Status CudaBackend::upload_f32(const model::TensorView& t, const float** out) {
  if (t.type != DType::kF32) {
    return errorf("cuda: tensor %.*s must be F32", static_cast<int>(t.name.size()), t.name.data());
  }
  void* p = dev_alloc(t.n_bytes);
  if (!p) return errorf("cuda: out of device memory");
  GEM_CUDA_CHECK(cudaMemcpy(p, t.data, t.n_bytes, cudaMemcpyHostToDevice));
  *out = static_cast<const float*>(p);
  weight_bytes_ += t.n_bytes;
  return ok_status();
}

// Prompt tiles of at least this many tokens take the tensor-core attention (attention_prefill);
// shorter ones (speculative verification, a prompt's tail) the split kernel.
constexpr int kGemmAttnMin = 16;
// The f32 scores and probabilities of one prefill attention call, at most (query rows are done
// in as many sub-tiles as this needs).
constexpr size_t kScoreBudget = size_t{512} << 20;

// Decode splits over `keys` keys: about GEM_CUDA_SPLITS_PER_SM (2) blocks per SM over the KV
// heads once there are many, and no split shorter than cuda::kSplitMinKeys (the kernels' rule
// for a split's keys too).
int decode_splits_for(int64_t keys, int n_kv, int n_sm) {
  // Read at every call (a layer's load and each capture), so that the tests can set it.
  const int per_sm = cuda::env_int("GEM_CUDA_SPLITS_PER_SM", 2, 1, 8);
  const int64_t by_sm = (per_sm * n_sm + n_kv - 1) / n_kv;
  const int64_t by_len = (keys + cuda::kSplitMinKeys - 1) / cuda::kSplitMinKeys;
  return static_cast<int>(std::clamp<int64_t>(std::min(by_sm, by_len), 1, 1024));
}

// GEM_CUDA_PROFILE_FROM_POS=N (measurement only): cudaProfilerStart() before the first decode
// step at position >= N, so that a profiler started with --profile-from-start off (ncu, nsys)
// records the steps at that depth, not a benchmark's warm-up or its depth fill (counting
// launches to skip them is brittle: run 11 call 2 profiled the warm-up).
void CudaBackend::maybe_start_profiler() {
  static const int from = cuda::env_int("GEM_CUDA_PROFILE_FROM_POS", -1, -1, 1 << 30);
  if (from < 0 || profiler_started_ || n_past_ < from) return;
  GEM_CUDA_CHECK(cudaProfilerStart());
  profiler_started_ = true;
  GEM_LOG_INFO("cuda: profiler started at position %d (GEM_CUDA_PROFILE_FROM_POS)", n_past_);
}

// The bucket of a token at position pos (it attends to pos + 1 keys).
int CudaBackend::decode_bucket(int pos) const {
  if (!buckets_) return 0;
  int k = 0;
  while ((static_cast<int64_t>(bucket_min_) << k) < std::min(pos + 1, opt_.n_ctx)) ++k;
  return k;
}

// The most keys a layer's decode attention can see in the bucket being captured.
int64_t CudaBackend::decode_keys(const DevLayer& L) const {
  if (!buckets_) return L.n_slots;
  return std::min<int64_t>(static_cast<int64_t>(bucket_min_) << capture_bucket_, L.n_slots);
}

// The decode splits of a layer in the bucket being captured: those of the keys it can hold.
int CudaBackend::decode_splits(const model::LayerPlan& p, const DevLayer& L) const {
  if (!buckets_) return L.n_splits_decode;
  return decode_splits_for(decode_keys(L), p.n_kv_heads, n_sm_);
}

int CudaBackend::splits_for(const DevLayer& L, int n) const {
  if (n == 1) return L.n_splits_decode;  // the most a decode graph of any bucket uses
  // Enough blocks to fill the GPU: (kv heads × query groups × splits) ≈ 2 per SM or more.
  const model::LayerPlan& p = model_.plan[0];
  const int r = std::max(1, cfg_.n_heads / std::max(1, p.n_kv_heads));
  const int qpb = std::max(1, std::min(n, 8 / r));
  const int groups = (n + qpb - 1) / qpb;
  const int want = std::max(1, 264 / std::max(1, groups));
  return std::min(L.n_splits_decode, want);
}

Status CudaBackend::init() {
  GEM_CUDA_CHECK(cudaSetDevice(0));
  GEM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  if (const char* e = std::getenv("GEM_CUDA_SKIP"); e != nullptr && e[0] != '\0') {
    Result<unsigned> bits = cuda::parse_decode_skip(e);
    if (!bits.ok()) return bits.status();
    skip_ = *bits;
    GEM_LOG_WARN("cuda: GEM_CUDA_SKIP=%s leaves decode kernels out: timing only, wrong output", e);
  }
  buckets_ = cuda::env_flag("GEM_CUDA_DECODE_BUCKETS", true);
  bucket_min_ = cuda::env_int("GEM_CUDA_DECODE_BUCKET_MIN", bucket_min_, 32, 1 << 24);
  GEM_CUBLAS_CHECK(cublasCreate(&cublas_));
  GEM_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
  GEM_CUBLAS_CHECK(cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH));
  GEM_CUDA_CHECK(cudaDeviceGetAttribute(&n_sm_, cudaDevAttrMultiProcessorCount, 0));
  cuda::attention_setup();  // kernel attributes: before the decode graph is captured

  if (opt_.n_ctx <= 0 || opt_.n_tile <= 0) {
    return errorf("cuda: n_ctx (%d) and n_tile (%d) must be positive", opt_.n_ctx, opt_.n_tile);
  }
  T_ = std::min(opt_.n_tile, opt_.n_ctx);
  const int E = cfg_.n_embd, H = cfg_.n_heads, F = cfg_.n_ff, V = cfg_.n_vocab;
  const model::Weights& w = model_.weights;
  Timer timer;

  // ---- weights ----
  uint64_t total = w.token_embd.n_bytes;
  for (const model::LayerWeights& lw : w.layers) {
    total += lw.attn_q.n_bytes + lw.attn_k.n_bytes + lw.attn_v.n_bytes + lw.attn_output.n_bytes +
             lw.ffn_gate.n_bytes + lw.ffn_up.n_bytes + lw.ffn_down.n_bytes;
  }
  GEM_LOG_INFO("cuda: uploading %.2f GB of weights", static_cast<double>(total) / 1e9);
  {
    const model::TensorView* parts[] = {&w.token_embd};
    GEM_RETURN_IF_ERROR(upload_matrix(parts, &embd_));
  }
  GEM_RETURN_IF_ERROR(upload_f32(w.output_norm, &output_norm_));
  int max_dim = 0, max_kv = 0, qkv_max = 0;
  size_t w16_max = static_cast<size_t>(2) * F * E;
  layers_.resize(cfg_.n_layers);
  int last_pct = 0;
  for (int i = 0; i < cfg_.n_layers; ++i) {
    const model::LayerPlan& p = model_.plan[i];
    const model::LayerWeights& lw = w.layers[i];
    DevLayer& L = layers_[i];
    std::vector<const model::TensorView*> qkv = {&lw.attn_q, &lw.attn_k};
    if (!p.v_from_k) qkv.push_back(&lw.attn_v);
    GEM_RETURN_IF_ERROR(upload_matrix(qkv, &L.qkv));
    const model::TensorView* wo[] = {&lw.attn_output};
    GEM_RETURN_IF_ERROR(upload_matrix(wo, &L.wo));
    const model::TensorView* gate[] = {&lw.ffn_gate};
    GEM_RETURN_IF_ERROR(upload_matrix(gate, &L.gate));
    const model::TensorView* up[] = {&lw.ffn_up};
    GEM_RETURN_IF_ERROR(upload_matrix(up, &L.up));
    const model::TensorView* down[] = {&lw.ffn_down};
    GEM_RETURN_IF_ERROR(upload_matrix(down, &L.down));
    GEM_RETURN_IF_ERROR(upload_f32(lw.attn_norm, &L.attn_norm));
    GEM_RETURN_IF_ERROR(upload_f32(lw.attn_q_norm, &L.q_norm));
    GEM_RETURN_IF_ERROR(upload_f32(lw.attn_k_norm, &L.k_norm));
    GEM_RETURN_IF_ERROR(upload_f32(lw.post_attention_norm, &L.post_attn_norm));
    GEM_RETURN_IF_ERROR(upload_f32(lw.ffn_norm, &L.ffn_norm));
    GEM_RETURN_IF_ERROR(upload_f32(lw.post_ffw_norm, &L.post_ffw_norm));
    if (lw.layer_output_scale.present()) {
      GEM_RETURN_IF_ERROR(upload_f32(lw.layer_output_scale, &L.out_scale));
    } else {
      float one = 1.0f;
      void* d = dev_alloc(sizeof(float));
      GEM_CUDA_CHECK(cudaMemcpy(d, &one, sizeof(float), cudaMemcpyHostToDevice));
      L.out_scale = static_cast<const float*>(d);
    }
    // RoPE inverse frequencies in f64, freq factors (rope_freqs) folded in on full layers.
    const int D = p.head_dim;
    std::vector<double> inv(D / 2);
    const float* ff = (p.kind == model::AttnKind::kFull && w.rope_freqs.present())
                          ? w.rope_freqs.f32()
                          : nullptr;
    for (int k = 0; k < D / 2; ++k) {
      inv[k] = std::pow(static_cast<double>(p.rope_theta), -2.0 * k / D) /
               (ff ? static_cast<double>(ff[k]) : 1.0);
    }
    void* dinv = dev_alloc(inv.size() * sizeof(double));
    GEM_CUDA_CHECK(cudaMemcpy(dinv, inv.data(), inv.size() * sizeof(double), cudaMemcpyHostToDevice));
    L.inv_freq = static_cast<const double*>(dinv);
    // KV cache.
    L.ring = p.kind == model::AttnKind::kSliding && p.window > 0;
    L.n_slots = L.ring ? p.window : opt_.n_ctx;
    L.kv_f16 = opt_.kv_type == model::KvType::kF16 ||
               (opt_.kv_type == model::KvType::kF16Full && !L.ring);
    const size_t kv_bytes = static_cast<size_t>(p.n_kv_heads) * L.n_slots * D * (L.kv_f16 ? 2 : 4);
    L.k_cache = dev_alloc(kv_bytes);
    L.v_cache = dev_alloc(kv_bytes);
    if (!L.k_cache || !L.v_cache) {
      return errorf("cuda: out of device memory for the KV cache of layer %d (%zu bytes)", i,
                    2 * kv_bytes);
    }
    L.n_splits_decode = decode_splits_for(L.n_slots, p.n_kv_heads, n_sm_);
    L.kv_shared = p.v_from_k && L.kv_f16 && !L.ring && p.n_rot == D &&
                  p.n_rot_pairs_active <= D / 8;
    max_dim = std::max(max_dim, D);
    max_kv = std::max(max_kv, p.n_kv_heads);
    qkv_max = std::max(qkv_max, static_cast<int>(L.qkv.rows));
    w16_max = std::max(w16_max, static_cast<size_t>(L.qkv.rows * L.qkv.cols));
    w16_max = std::max(w16_max, static_cast<size_t>(L.wo.rows * L.wo.cols));
    const int pct = (i + 1) * 100 / cfg_.n_layers;
    if (pct / 10 != last_pct / 10) {
      GEM_LOG_INFO("cuda: uploaded %d%% (%d/%d layers, %.1f s)", pct, i + 1, cfg_.n_layers,
                   timer.seconds());
      last_pct = pct;
    }
  }

  // ---- scratch ----
  const size_t T = static_cast<size_t>(T_);
  const int max_cols = std::max({E, F, H * max_dim});
  size_t part_floats = 0;
  for (const DevLayer& L : layers_) {
    for (int n = 1; n <= T_; ++n) {
      part_floats = std::max(part_floats,
                             cuda::attention_part_floats(n, H, max_dim, splits_for(L, n)));
    }
  }
  auto f = [&](size_t count) { return static_cast<float*>(dev_alloc(count * sizeof(float))); };
  auto q8 = [&](size_t cols) {
    Q8Act a;
    a.q = static_cast<int8_t*>(dev_alloc(T * cols));
    a.ds = static_cast<float2*>(dev_alloc(T * cols / 32 * sizeof(float2)));
    return a;
  };
  step_dev_ = static_cast<int32_t*>(dev_alloc((1 + T) * sizeof(int32_t)));
  x_ = f(T * E);
  h_ = f(T * E);
  hq_ = q8(E);
  a_ = f(T * E);
  qkv_ = f(T * qkv_max);
  q_ = f(T * H * max_dim);
  k_ = f(T * max_kv * max_dim);
  v_ = f(T * max_kv * max_dim);
  att_ = f(T * H * max_dim);
  attq_ = q8(static_cast<size_t>(H) * max_dim);
  gu_ = f(T * 2 * F);
  g_ = f(T * F);
  gq_ = q8(F);
  part_ = f(part_floats);
  if (T_ >= kGemmAttnMin) {
    for (int i = 0; i < cfg_.n_layers; ++i) {
      const model::LayerPlan& p = model_.plan[i];
      const DevLayer& L = layers_[i];
      const int64_t keys = L.ring ? p.window - 1 + T_ : opt_.n_ctx;
      const size_t per_row = static_cast<size_t>(H) * ((keys + 7) / 8 * 8) * (4 + (L.kv_f16 ? 2 : 4));
      const size_t score = std::min(kScoreBudget, per_row * T);
      prefill_scratch_bytes_ = std::max(
          prefill_scratch_bytes_,
          cuda::attention_prefill_scratch_bytes(T_, H, p.n_kv_heads, p.head_dim,
                                                L.ring ? p.window : 0, L.kv_f16, score));
    }
    prefill_scratch_ = dev_alloc(prefill_scratch_bytes_);
  }
  x16_ = static_cast<__half*>(dev_alloc(T * max_cols * sizeof(__half)));
  w16_ = static_cast<__half*>(dev_alloc(w16_max * sizeof(__half)));
  logits_dev_ = f(V);
  sample_scratch_ = f(cuda::argmax_scratch_floats(V));
  sample_out_dev_ = static_cast<int32_t*>(dev_alloc(sizeof(int32_t)));
  hist_dev_ = static_cast<int32_t*>(dev_alloc(256 * sizeof(int32_t)));
  for (void* p : allocs_) {
    if (!p) return errorf("cuda: out of device memory for scratch buffers");
  }
  if (!x_ || !w16_ || !part_ || !x16_ || !sample_scratch_) {
    return errorf("cuda: out of device memory for scratch buffers (tile %d)", T_);
  }
  GEM_CUDA_CHECK(cudaMallocHost(&step_host_, (1 + T) * sizeof(int32_t)));
  GEM_CUDA_CHECK(cudaMallocHost(&pinned_small_, 257 * sizeof(int32_t)));
  GEM_LOG_INFO("cuda: %.2f GB of weights on the device in %.1f s; KV %s for %d positions",
               static_cast<double>(weight_bytes_) / 1e9, timer.seconds(),
               std::string(model::kv_type_name(opt_.kv_type)).c_str(), opt_.n_ctx);
  return ok_status();
}

// ---------------------------------------------------------------------------------------------
// The forward.

void CudaBackend::gemm_rows(const __half* w16, int64_t rows, int64_t cols, const __half* x16,
                            int n, float* y) {
  // Row-major y[n, rows] = x[n, cols] · W[rows, cols]ᵀ, in cuBLAS's column-major terms
  // yᵀ (rows × n) = W (op T of the cols × rows view) · xᵀ (cols × n).
  const float alpha = 1.0f, beta = 0.0f;
  GEM_CUBLAS_CHECK(cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(rows), n,
                                static_cast<int>(cols), &alpha, w16, CUDA_R_16F,
                                static_cast<int>(cols), x16, CUDA_R_16F, static_cast<int>(cols),
                                &beta, y, CUDA_R_32F, static_cast<int>(rows), CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT));
}

void CudaBackend::gemm(const DevMatrix& w, const __half* x16, int n, float* y) {
  cuda::dequant_f16(w, 0, w.rows, w16_, stream_);
  gemm_rows(w16_, w.rows, w.cols, x16, n, y);
}

void CudaBackend::layer_decode(const model::LayerPlan& p, const DevLayer& L, bool last) {
  const int E = cfg_.n_embd, F = cfg_.n_ff, D = p.head_dim;
  const float eps = cfg_.rms_eps;
  const auto* sp = reinterpret_cast<const cuda::StepParams*>(step_dev_);
  if (!skip(cuda::kSkipQkv)) cuda::matvec(L.qkv, h_, hq_, 1, qkv_, 0.0f, stream_);
  cuda::AttnArgs a{q_, k_, v_, L.k_cache, L.v_cache, L.kv_f16, L.ring, L.n_slots, 1, p.n_heads,
                   p.n_kv_heads, D, p.window, decode_splits(p, L), sp, part_, att_, attq_};
  a.tile_in_cache = true;
  a.max_keys = decode_keys(L);
  // Off until measured on the GPU (prepared in session 13 without one; read at every capture).
  if (L.kv_shared && cuda::env_flag("GEM_CUDA_ATTN_SHARED_KV", false)) a.k_shared_w = L.k_norm;
  if (cuda::attention_decode_supported(a)) {
    // The prologue stores the token's K/V; the decode kernel then reads every key from the cache.
    const cuda::KvDest dest{L.k_cache, L.v_cache, L.kv_f16, L.ring, L.n_slots};
    if (!skip(cuda::kSkipPrologue)) {
      cuda::qkv_prologue(qkv_, 1, p.n_heads, p.n_kv_heads, D, p.v_from_k, L.q_norm, L.k_norm,
                         eps, L.inv_freq, sp, q_, k_, v_, dest, stream_);
    }
    if (!skip(cuda::kSkipAttn)) cuda::attention(a, stream_);
  } else {
    a.tile_in_cache = false;
    cuda::qkv_prologue(qkv_, 1, p.n_heads, p.n_kv_heads, D, p.v_from_k, L.q_norm, L.k_norm, eps,
                       L.inv_freq, sp, q_, k_, v_, cuda::KvDest{}, stream_);
    cuda::attention(a, stream_);
    cuda::kv_store(k_, v_, 1, p.n_kv_heads, D, L.kv_f16, L.ring, L.n_slots, sp, L.k_cache,
                   L.v_cache, stream_);
  }
  if (!skip(cuda::kSkipWo)) cuda::matvec(L.wo, att_, attq_, 1, a_, 0.0f, stream_);
  if (!skip(cuda::kSkipRes)) cuda::residual_norm(x_, a_, L.post_attn_norm, L.ffn_norm, 1, E, eps, h_, hq_, stream_);
  const bool down_q8 = L.down.type == WType::kQ4_0 || L.down.type == WType::kQ8_0;
  if (L.gate.type == WType::kQ4_0 && L.up.type == WType::kQ4_0) {
    if (!skip(cuda::kSkipGated)) cuda::matvec_gated(L.gate, L.up, hq_, 1, g_, stream_);
  } else {
    cuda::matvec(L.gate, h_, hq_, 1, gu_, 0.0f, stream_);
    cuda::matvec(L.up, h_, hq_, 1, gu_ + F, 0.0f, stream_);
    cuda::gelu_mul(gu_, 1, F, g_, stream_);
  }
  // A separate kernel: quantising g inside the gated product measured slower on the H200 both
  // as the last block of each 32-row group after a fence (run 8, 1 µs per layer) and as blocks
  // of 32 rows meeting in shared memory (run 12: 12B 1-4 %, 31B 2-5 % slower per token).
  if (down_q8 && !skip(cuda::kSkipQ8)) cuda::quantize_q8(g_, 1, F, gq_, stream_);
  if (!skip(cuda::kSkipDown)) cuda::matvec(L.down, g_, gq_, 1, a_, 0.0f, stream_);
  const float* w_next = last ? output_norm_ : layers_[p.layer + 1].attn_norm;
  if (!skip(cuda::kSkipRes)) {
    cuda::residual_norm_scale(x_, a_, L.post_ffw_norm, L.out_scale, w_next, 1, E, eps, h_, hq_,
                              stream_);
  }
}

void CudaBackend::layer_prefill(const model::LayerPlan& p, const DevLayer& L, int n, bool last) {
  const int E = cfg_.n_embd, F = cfg_.n_ff, D = p.head_dim, H = p.n_heads;
  const float eps = cfg_.rms_eps;
  const auto* sp = reinterpret_cast<const cuda::StepParams*>(step_dev_);
  cuda::to_f16(h_, static_cast<int64_t>(n) * E, x16_, stream_);
  gemm(L.qkv, x16_, n, qkv_);
  cuda::qkv_prologue(qkv_, n, H, p.n_kv_heads, D, p.v_from_k, L.q_norm, L.k_norm, eps,
                     L.inv_freq, sp, q_, k_, v_, cuda::KvDest{}, stream_);
  auto store = [&] {
    cuda::kv_store(k_, v_, n, p.n_kv_heads, D, L.kv_f16, L.ring, L.n_slots, sp, L.k_cache,
                   L.v_cache, stream_);
  };
  if (n >= kGemmAttnMin && prefill_scratch_) {
    // Tensor-core attention; a full layer reads the tile's keys from the cache (stored first), a
    // ring layer from the tile (stored after: the tile may overwrite slots it still needs).
    if (!L.ring) store();
    const cuda::PrefillAttnArgs pa{q_, k_, v_, L.k_cache, L.v_cache, L.kv_f16, L.ring,
                                   L.n_slots, n_past_, n, T_, H, p.n_kv_heads, D,
                                   L.ring ? p.window : 0, x16_, prefill_scratch_,
                                   prefill_scratch_bytes_};
    cuda::attention_prefill(pa, cublas_, stream_);
    if (L.ring) store();
  } else {
    cuda::AttnArgs a{q_, k_, v_, L.k_cache, L.v_cache, L.kv_f16, L.ring, L.n_slots, n, H,
                     p.n_kv_heads, D, p.window, splits_for(L, n), sp, part_, att_, Q8Act{}};
    cuda::attention(a, stream_);
    store();
    cuda::to_f16(att_, static_cast<int64_t>(n) * H * D, x16_, stream_);
  }
  gemm(L.wo, x16_, n, a_);
  cuda::residual_norm(x_, a_, L.post_attn_norm, L.ffn_norm, n, E, eps, h_, Q8Act{}, stream_);
  cuda::to_f16(h_, static_cast<int64_t>(n) * E, x16_, stream_);
  // gate|up as one product over the two dequantised matrices stacked by rows.
  cuda::dequant_f16(L.gate, 0, L.gate.rows, w16_, stream_);
  cuda::dequant_f16(L.up, 0, L.up.rows, w16_ + L.gate.rows * L.gate.cols, stream_);
  gemm_rows(w16_, 2 * static_cast<int64_t>(F), E, x16_, n, gu_);
  cuda::gelu_mul(gu_, n, F, g_, stream_);
  cuda::to_f16(g_, static_cast<int64_t>(n) * F, x16_, stream_);
  gemm(L.down, x16_, n, a_);
  const float* w_next = last ? output_norm_ : layers_[p.layer + 1].attn_norm;
  // The last layer also quantises the final-normed rows: the head reads them (q8).
  cuda::residual_norm_scale(x_, a_, L.post_ffw_norm, L.out_scale, w_next, n, E, eps, h_,
                            last ? hq_ : Q8Act{}, stream_);
}

void CudaBackend::head_row(int row) {
  const int E = cfg_.n_embd;
  Q8Act hq{hq_.q + static_cast<int64_t>(row) * E, hq_.ds + static_cast<int64_t>(row) * E / 32};
  cuda::matvec(embd_, h_ + static_cast<int64_t>(row) * E, hq, 1, logits_dev_,
               cfg_.final_logit_softcap, stream_);
}

// Logs the decode graph's size and how many of its edges are programmatic (PDL) ones.
void log_graph(cudaGraph_t graph) {
  size_t n_nodes = 0, n_edges = 0;
  GEM_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &n_nodes));
  GEM_CUDA_CHECK(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &n_edges));
  std::vector<cudaGraphNode_t> from(n_edges), to(n_edges);
  std::vector<cudaGraphEdgeData> data(n_edges);
  size_t programmatic = 0;
  if (n_edges > 0) {
    GEM_CUDA_CHECK(cudaGraphGetEdges(graph, from.data(), to.data(), data.data(), &n_edges));
    for (size_t i = 0; i < n_edges; ++i) {
      programmatic += data[i].type == cudaGraphDependencyTypeProgrammatic;
    }
  }
  GEM_LOG_INFO("cuda: decode graph of %zu nodes, %zu edges (%zu programmatic)", n_nodes, n_edges,
               programmatic);
}

// Enqueues one tile: token ids and pos0 are already in step_dev_.
void CudaBackend::forward_tile(int n, bool want_head) {
  const int E = cfg_.n_embd;
  cuda::set_pdl_phase(n == 1);
  cuda::embed(embd_, step_dev_ + 1, n, std::sqrt(static_cast<float>(E)), x_, stream_);
  cuda::rms_norm(x_, layers_[0].attn_norm, n, E, cfg_.rms_eps, h_, n == 1 ? hq_ : Q8Act{},
                 stream_);
  for (int i = 0; i < cfg_.n_layers; ++i) {
    const bool last = i + 1 == cfg_.n_layers;
    if (n == 1) {
      layer_decode(model_.plan[i], layers_[i], last);
    } else {
      layer_prefill(model_.plan[i], layers_[i], n, last);
    }
  }
  if (want_head) head_row(n - 1);
}

Status CudaBackend::eval(std::span<const int32_t> tokens, bool all_logits,
                         const TileCallback& on_tile) {
  const int n_total = static_cast<int>(tokens.size());
  if (n_total == 0) return errorf("cuda eval: no tokens");
  if (n_past_ + n_total > opt_.n_ctx) {
    return errorf("cuda eval: %d tokens at position %d exceed the context of %d", n_total,
                  n_past_, opt_.n_ctx);
  }
  for (int32_t t : tokens) {
    if (t < 0 || t >= cfg_.n_vocab) {
      return errorf("cuda eval: token id %d outside the vocabulary [0, %d)", t, cfg_.n_vocab);
    }
  }
  logits_rows_ = all_logits ? n_total : 1;
  logits_host_.assign(static_cast<size_t>(logits_rows_) * cfg_.n_vocab, 0.0f);
  logits_pending_ = false;
  for (int done = 0; done < n_total;) {
    const int n = std::min(T_, n_total - done);
    const bool last_tile = done + n == n_total;
    step_host_[0] = n_past_;
    std::memcpy(step_host_ + 1, tokens.data() + done, n * sizeof(int32_t));
    GEM_CUDA_CHECK(cudaMemcpyAsync(step_dev_, step_host_, (1 + n) * sizeof(int32_t),
                                   cudaMemcpyHostToDevice, stream_));
    if (n == 1) {
      const int k = decode_bucket(n_past_);
      if (decode_graphs_.size() <= static_cast<size_t>(k)) decode_graphs_.resize(k + 1, nullptr);
      if (!decode_graphs_[k]) {
        capture_bucket_ = k;
        cudaGraph_t graph = nullptr;
        GEM_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
        forward_tile(1, true);
        GEM_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
        log_graph(graph);
        if (buckets_) {
          GEM_LOG_INFO("cuda: that graph serves positions below %lld (bucket %d)",
                       std::min<long long>(static_cast<long long>(bucket_min_) << k, opt_.n_ctx), k);
        }
        GEM_CUDA_CHECK(cudaGraphInstantiate(&decode_graphs_[k], graph, 0));
        cudaGraphDestroy(graph);
      }
      maybe_start_profiler();
      GEM_CUDA_CHECK(cudaGraphLaunch(decode_graphs_[k], stream_));
    } else {
      forward_tile(n, last_tile && !all_logits);
    }
    if (all_logits) {
      for (int t = 0; t < n; ++t) {
        if (n > 1) head_row(t);
        GEM_CUDA_CHECK(cudaMemcpyAsync(logits_host_.data() + static_cast<size_t>(done + t) * cfg_.n_vocab,
                                       logits_dev_, cfg_.n_vocab * sizeof(float),
                                       cudaMemcpyDeviceToHost, stream_));
      }
    }
    // One synchronisation per tile: the step parameters' pinned buffer is reused next tile.
    GEM_CUDA_CHECK(cudaStreamSynchronize(stream_));
    n_past_ += n;
    done += n;
    if (on_tile && !on_tile(done, n_total) && done < n_total) {
      return cancelledf("cancelled after %d of %d tokens", done, n_total);
    }
  }
  logits_pending_ = !all_logits;
  return ok_status();
}

std::span<const float> CudaBackend::logits(int row) {
  if (logits_rows_ == 0) return {};
  if (row < 0) row = logits_rows_ - 1;
  if (row >= logits_rows_) return {};
  if (logits_pending_) {
    GEM_CUDA_CHECK(cudaMemcpy(logits_host_.data(), logits_dev_, cfg_.n_vocab * sizeof(float),
                              cudaMemcpyDeviceToHost));
    logits_pending_ = false;
  }
  return std::span<const float>(logits_host_.data() + static_cast<size_t>(row) * cfg_.n_vocab,
                                cfg_.n_vocab);
}

std::optional<int32_t> CudaBackend::sample(const SamplingParams& params,
                                           std::span<const int32_t> history, double coin) {
  if (logits_rows_ == 0) return std::nullopt;
  const bool greedy = params.temperature <= 0.0f;
  // Sampling with top-k on the device; no top-k (the whole vocabulary sorted) on the host.
  if (!greedy && (params.top_k < 1 || params.top_k > cuda::kMaxTopK)) return std::nullopt;
  // Penalties over the last repeat_last_n history tokens.
  const bool any = params.repeat_penalty != 1.0f || params.frequency_penalty != 0.0f ||
                   params.presence_penalty != 0.0f;
  size_t n_hist = 0;
  if (any && params.repeat_last_n != 0) {
    n_hist = history.size();
    if (params.repeat_last_n > 0) n_hist = std::min(n_hist, static_cast<size_t>(params.repeat_last_n));
  }
  if (n_hist > 256) return std::nullopt;
  const float* logits = logits_dev_;
  if (logits_rows_ > 1) return std::nullopt;  // all-logits evals keep rows on the host only
  std::memcpy(pinned_small_ + 1, history.data() + (history.size() - n_hist),
              n_hist * sizeof(int32_t));
  if (n_hist > 0) {
    GEM_CUDA_CHECK(cudaMemcpyAsync(hist_dev_, pinned_small_ + 1, n_hist * sizeof(int32_t),
                                   cudaMemcpyHostToDevice, stream_));
  }
  cuda::PenaltyArgs pen{hist_dev_, static_cast<int>(n_hist), params.repeat_penalty,
                        params.presence_penalty, params.frequency_penalty};
  if (greedy) {
    cuda::argmax_penalized(logits, cfg_.n_vocab, pen, sample_out_dev_, sample_scratch_, stream_);
  } else {
    const cuda::DrawArgs draw{params.top_k, params.top_p, params.min_p, params.temperature, coin};
    cuda::sample_top_k(logits, cfg_.n_vocab, pen, draw, sample_out_dev_, sample_scratch_, stream_);
  }
  GEM_CUDA_CHECK(cudaMemcpyAsync(pinned_small_, sample_out_dev_, sizeof(int32_t),
                                 cudaMemcpyDeviceToHost, stream_));
  GEM_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return pinned_small_[0];
}

void CudaBackend::checkpoint() {
  ckpt_n_past_ = n_past_;
  if (ring_saved_.empty()) {
    ring_saved_.assign(layers_.size(), {nullptr, nullptr});
  }
  for (size_t i = 0; i < layers_.size(); ++i) {
    const DevLayer& L = layers_[i];
    if (!L.ring) continue;
    const model::LayerPlan& p = model_.plan[i];
    const size_t bytes = static_cast<size_t>(p.n_kv_heads) * L.n_slots * p.head_dim * (L.kv_f16 ? 2 : 4);
    auto& [k, v] = ring_saved_[i];
    if (!k) {
      if (cudaMalloc(&k, bytes) != cudaSuccess || cudaMalloc(&v, bytes) != cudaSuccess) {
        // No room for the journal: a later restore() cannot be exact, so forget the checkpoint.
        GEM_LOG_WARN("cuda: no device memory for the checkpoint journal; restore() disabled");
        ckpt_n_past_ = -1;
        return;
      }
    }
    GEM_CUDA_CHECK(cudaMemcpyAsync(k, L.k_cache, bytes, cudaMemcpyDeviceToDevice, stream_));
    GEM_CUDA_CHECK(cudaMemcpyAsync(v, L.v_cache, bytes, cudaMemcpyDeviceToDevice, stream_));
  }
  GEM_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::restore() {
  if (ckpt_n_past_ < 0) return;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const DevLayer& L = layers_[i];
    if (!L.ring || !ring_saved_[i].first) continue;
    const model::LayerPlan& p = model_.plan[i];
    const size_t bytes = static_cast<size_t>(p.n_kv_heads) * L.n_slots * p.head_dim * (L.kv_f16 ? 2 : 4);
    GEM_CUDA_CHECK(cudaMemcpyAsync(L.k_cache, ring_saved_[i].first, bytes, cudaMemcpyDeviceToDevice, stream_));
    GEM_CUDA_CHECK(cudaMemcpyAsync(L.v_cache, ring_saved_[i].second, bytes, cudaMemcpyDeviceToDevice, stream_));
  }
  GEM_CUDA_CHECK(cudaStreamSynchronize(stream_));
  n_past_ = ckpt_n_past_;
}

}  // namespace

bool cuda_device_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

Result<std::unique_ptr<Backend>> make_cuda_backend(const model::Model& model,
                                                   const BackendOptions& options) {
  if (!cuda_device_available()) return errorf("cuda: no CUDA device found");
  auto backend = std::make_unique<CudaBackend>(model, options);
  GEM_RETURN_IF_ERROR(backend->init());
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace gem

namespace gem::cuda {

Result<unsigned> parse_decode_skip(std::string_view list) {
  static constexpr std::pair<std::string_view, DecodeSkip> kNames[] = {
      {"res", kSkipRes},   {"q8", kSkipQ8},   {"prologue", kSkipPrologue}, {"attn", kSkipAttn},
      {"qkv", kSkipQkv},   {"wo", kSkipWo},   {"gated", kSkipGated},       {"down", kSkipDown}};
  unsigned bits = 0;
  for (;;) {
    const size_t comma = list.find(',');
    const std::string_view name = list.substr(0, comma);
    bool known = false;
    for (const auto& [n, bit] : kNames) {
      if (name == n) {
        bits |= bit;
        known = true;
      }
    }
    if (!known) {
      return errorf("GEM_CUDA_SKIP: unknown decode kernel \"%.*s\"; expected a comma-separated "
                    "list of res, q8, prologue, attn, qkv, wo, gated, down",
                    static_cast<int>(name.size()), name.data());
    }
    if (comma == std::string_view::npos) return bits;
    list.remove_prefix(comma + 1);
  }
}

}  // namespace gem::cuda
