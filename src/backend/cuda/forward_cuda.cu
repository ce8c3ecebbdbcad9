// The CUDA backend: the KV cache and every scratch buffer allocated at creation (after the
// weights, upload.cu), and forward_tile() running the layers in order on one stream. A one-token eval replays a CUDA graph of the whole step (embedding to
// soft-capped logits); prompt tiles run the same ops with cuBLAS products on f16 tiles.
#include <cublas_v2.h>
#include <cuda_fp16.h>
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

#include "backend/cuda/attention.cuh"
#include "backend/cuda/attention_decode.cuh"
#include "backend/cuda/attention_prefill.cuh"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_backend_impl.cuh"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/matmul_n.cuh"
#include "backend/cuda/matvec.cuh"
#include "backend/cuda/norm.cuh"
#include "backend/cuda/ops.cuh"
#include "backend/cuda/sample.cuh"
#include "base/check.h"
#include "base/log.h"
#include "base/timer.h"
#include "sampler/sampler.h"

namespace gem::cuda {

CudaBackend::~CudaBackend() {
  for (cudaGraphExec_t g : decode_graphs_) {
    if (g) cudaGraphExecDestroy(g);
  }
  for (auto& [key, g] : rows_graphs_) cudaGraphExecDestroy(g);
  for (cudaGraphExec_t g : prof_graphs_) {
    if (g) cudaGraphExecDestroy(g);
  }
  for (cudaEvent_t e : prof_events_) cudaEventDestroy(e);
  if (cublas_) cublasDestroy(cublas_);
  for (void* p : allocs_) cudaFree(p);
  for (Checkpoint& c : ckpt_) {
    for (auto& [k, v] : c.saved) {
      cudaFree(k);
      cudaFree(v);
    }
  }
  if (step_host_) cudaFreeHost(step_host_);
  if (rows_host_) cudaFreeHost(rows_host_);
  if (pinned_batch_) cudaFreeHost(pinned_batch_);
  if (pinned_draws_) cudaFreeHost(pinned_draws_);
  if (pinned_small_) cudaFreeHost(pinned_small_);
  if (stream_) cudaStreamDestroy(stream_);
}

void* CudaBackend::dev_alloc(size_t bytes) {
  void* p = nullptr;
  if (cudaMalloc(&p, bytes < 256 ? 256 : bytes) != cudaSuccess) return nullptr;
  allocs_.push_back(p);
  return p;
}

namespace {

// Tiles of at least this many rows take the tensor-core attention (attention_tile); shorter ones
// (2 or 3 rows) the split kernel.
constexpr int kGemmAttnMin = 4;
// The f32 scores and probabilities of one prefill attention call, at most (query rows are done
// in as many sub-tiles as this needs).
constexpr size_t kScoreBudget = size_t{512} << 20;

}  // namespace

// Decode splits over `keys` keys: about per_sm blocks per SM over the KV heads once there are
// many, and no split shorter than cuda::kSplitMinKeys (the kernels' rule for a split's keys too).
int decode_splits_for(int64_t keys, int n_kv, int n_sm, int per_sm) {
  const int64_t by_sm = (per_sm * n_sm + n_kv - 1) / n_kv;
  const int64_t by_len = (keys + cuda::kSplitMinKeys - 1) / cuda::kSplitMinKeys;
  return static_cast<int>(std::clamp<int64_t>(std::min(by_sm, by_len), 1, 1024));
}

// The bucket of a token at position pos (it attends to pos + 1 keys).
int CudaBackend::decode_bucket(int pos) const {
  if (!tuning_.decode_buckets) return 0;
  int k = 0;
  while ((static_cast<int64_t>(tuning_.decode_bucket_min) << k) < std::min(pos + 1, opt_.n_ctx)) ++k;
  return k;
}

// The most keys a layer's decode attention can see in bucket k.
int64_t CudaBackend::bucket_keys(const DevLayer& L, int k) const {
  if (!tuning_.decode_buckets) return L.n_slots;
  return std::min<int64_t>(static_cast<int64_t>(tuning_.decode_bucket_min) << k, L.n_slots);
}

// The decode splits of a layer in bucket k: those of the keys it can hold.
int CudaBackend::bucket_splits(const model::LayerPlan& p, const DevLayer& L, int k) const {
  if (!tuning_.decode_buckets) return L.n_splits_decode;
  return decode_splits_for(bucket_keys(L, k), p.n_kv_heads, n_sm_, tuning_.splits_per_sm);
}

// The same for the bucket being captured.
int64_t CudaBackend::decode_keys(const DevLayer& L) const {
  return bucket_keys(L, capture_bucket_);
}
int CudaBackend::decode_splits(const model::LayerPlan& p, const DevLayer& L) const {
  return bucket_splits(p, L, capture_bucket_);
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
  if (tuning_.decode_bucket_min < 32) {
    return errorf("cuda: decode_bucket_min %d is below 32", tuning_.decode_bucket_min);
  }
  GEM_CUBLAS_CHECK(cublasCreate(&cublas_));
  GEM_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
  GEM_CUBLAS_CHECK(cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH));
  GEM_CUDA_CHECK(cudaDeviceGetAttribute(&n_sm_, cudaDevAttrMultiProcessorCount, 0));
  cuda::attention_setup();  // kernel attributes: before the decode graph is captured

  if (opt_.n_ctx <= 0 || opt_.n_tile <= 0) {
    return errorf("cuda: n_ctx (%d) and n_tile (%d) must be positive", opt_.n_ctx, opt_.n_tile);
  }
  if (opt_.n_slots < 1) {
    return errorf("cuda: %d sequence slots, expected at least 1 (-np/--parallel)", opt_.n_slots);
  }
  past_.assign(opt_.n_slots, 0);
  ckpt_.resize(opt_.n_slots);
  T_ = std::min(opt_.n_tile, opt_.n_ctx);
  const int E = cfg_.n_embd, H = cfg_.n_heads, F = cfg_.n_ff, V = cfg_.n_vocab;
  Timer timer;

  GEM_RETURN_IF_ERROR(upload_weights());

  // ---- KV cache ----
  int max_dim = 0, max_kv = 0, qkv_max = 0;
  size_t w16_max = static_cast<size_t>(2) * F * E;
  for (int i = 0; i < cfg_.n_layers; ++i) {
    const model::LayerPlan& p = model_.plan[i];
    DevLayer& L = layers_[i];
    const int D = p.head_dim;
    L.ring = p.kind == model::AttnKind::kSliding && p.window > 0;
    // Rings hold the window and model::kRingSpare more slots: slot_truncate's rollback.
    L.n_slots = L.ring ? model::kv_ring_slots(p.window) : opt_.n_ctx;
    L.kv_f16 = opt_.kv_type == model::KvType::kF16 ||
               (opt_.kv_type == model::KvType::kF16Full && !L.ring);
    L.slot_bytes = static_cast<size_t>(p.n_kv_heads) * L.n_slots * D * (L.kv_f16 ? 2 : 4);
    const size_t kv_bytes = L.slot_bytes * opt_.n_slots;
    L.k_cache = dev_alloc(kv_bytes);
    L.v_cache = dev_alloc(kv_bytes);
    if (!L.k_cache || !L.v_cache) {
      return errorf("cuda: out of device memory for the KV cache of layer %d (%zu bytes)", i,
                    2 * kv_bytes);
    }
    L.n_splits_decode = decode_splits_for(L.n_slots, p.n_kv_heads, n_sm_, tuning_.splits_per_sm);
    L.kv_shared = p.v_from_k && L.kv_f16 && !L.ring && p.n_rot == D &&
                  p.n_rot_pairs_active <= D / 8;
    max_dim = std::max(max_dim, D);
    max_kv = std::max(max_kv, p.n_kv_heads);
    qkv_max = std::max(qkv_max, static_cast<int>(L.qkv.rows));
    w16_max = std::max(w16_max, static_cast<size_t>(L.qkv.rows * L.qkv.cols));
    w16_max = std::max(w16_max, static_cast<size_t>(L.wo.rows * L.wo.cols));
  }

  // ---- scratch ----
  const size_t T = static_cast<size_t>(T_);
  const int max_cols = std::max({E, F, H * max_dim});
  // The rows pass: up to 32 rows (the batched decode of 32 sequences), each with the parts of
  // its decode splits; it needs every layer's attention on the decode kernels.
  rows_max_ = std::min(T_, 32);
  rows_ok_ = true;
  size_t part_floats = 0;
  for (int i = 0; i < cfg_.n_layers; ++i) {
    const model::LayerPlan& p = model_.plan[i];
    const DevLayer& L = layers_[i];
    for (int n = 1; n <= T_; ++n) {
      part_floats = std::max(part_floats,
                             cuda::attention_part_floats(n, H, max_dim, splits_for(L, n)));
    }
    part_floats = std::max(part_floats, cuda::attention_part_floats(rows_max_, H, max_dim,
                                                                     L.n_splits_decode));
    cuda::AttnArgs probe{};
    probe.n = 1;
    probe.tile_in_cache = true;
    probe.n_heads = p.n_heads;
    probe.n_kv = p.n_kv_heads;
    probe.head_dim = p.head_dim;
    rows_ok_ = rows_ok_ && cuda::attention_decode_supported(probe);
  }
  auto f = [&](size_t count) { return static_cast<float*>(dev_alloc(count * sizeof(float))); };
  auto q8 = [&](size_t cols) {
    Q8Act a;
    a.q = static_cast<int8_t*>(dev_alloc(T * cols));
    a.ds = static_cast<Q8Ds*>(dev_alloc(T * cols / 32 * sizeof(Q8Ds)));
    return a;
  };
  step_dev_ = static_cast<int32_t*>(dev_alloc((1 + T) * sizeof(int32_t)));
  rows_dev_ = static_cast<cuda::RowParams*>(dev_alloc(2 * rows_max_ * sizeof(cuda::RowParams)));
  sample_outs_dev_ = static_cast<int32_t*>(dev_alloc(rows_max_ * sizeof(int32_t)));
  hists_dev_ = static_cast<int32_t*>(dev_alloc(static_cast<size_t>(rows_max_) * 256 * sizeof(int32_t)));
  argmax_rows_dev_ = static_cast<int32_t*>(dev_alloc(rows_max_ * sizeof(int32_t)));
  draws_dev_ = static_cast<cuda::DrawArgs*>(dev_alloc(rows_max_ * sizeof(cuda::DrawArgs)));
  topk_rows_scratch_ =
      f(static_cast<size_t>(cuda::top_k_rows_scratch_floats(cfg_.n_vocab, rows_max_)));
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
  // The head of a short eval (matmul_n: every row at once) writes all its rows.
  logits_dev_ = f(static_cast<size_t>(V) * std::min(T_, cuda::matmul_n_max()));
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
  GEM_CUDA_CHECK(cudaMallocHost(&rows_host_, 2 * rows_max_ * sizeof(cuda::RowParams)));
  GEM_CUDA_CHECK(cudaMallocHost(&pinned_batch_, static_cast<size_t>(rows_max_) * 258 * sizeof(int32_t)));
  GEM_CUDA_CHECK(cudaMallocHost(&pinned_small_, 257 * sizeof(int32_t)));
  GEM_CUDA_CHECK(cudaMallocHost(&pinned_draws_, rows_max_ * sizeof(cuda::DrawArgs)));
  GEM_LOG_INFO("cuda: %.2f GB of weights on the device in %.1f s; KV %s for %d positions%s",
               static_cast<double>(weight_bytes_) / 1e9, timer.seconds(),
               std::string(model::kv_type_name(opt_.kv_type)).c_str(), opt_.n_ctx,
               opt_.n_slots > 1 ? strprintf(" x %d sequence slots", opt_.n_slots).c_str() : "");
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
  const cuda::CudaTuning& t = tuning_;
  const auto* sp = reinterpret_cast<const cuda::StepParams*>(step_dev_);
  cuda::matvec(L.qkv, h_, hq_, 1, qkv_, 0.0f, stream_, t);
  mark(Stage::kQkv, p.layer);
  cuda::AttnArgs a{q_, k_, v_, k_of(L, tile_slot_), v_of(L, tile_slot_), L.kv_f16, L.ring, L.n_slots, 1, p.n_heads,
                   p.n_kv_heads, D, p.window, decode_splits(p, L), sp, part_, att_, attq_};
  a.tile_in_cache = true;
  a.max_keys = decode_keys(L);
  // Reading 5/8 of the full layers' K/V bytes: 31B decode 1.6 % faster at depth 32768, the 12B
  // within noise (bench/results/cuda.md).
  if (L.kv_shared) a.k_shared_w = L.k_norm;
  if (cuda::attention_decode_supported(a)) {
    // The prologue stores the token's K/V; the decode kernel then reads every key from the cache.
    const cuda::KvDest dest{k_of(L, tile_slot_), v_of(L, tile_slot_), L.kv_f16, L.ring, L.n_slots};
    cuda::qkv_prologue(qkv_, 1, p.n_heads, p.n_kv_heads, D, p.v_from_k, L.q_norm, L.k_norm, eps,
                       L.inv_freq, sp, q_, k_, v_, dest, stream_);
    mark(Stage::kRope, p.layer);
    cuda::attention(a, stream_, t);
    mark(Stage::kAttention, p.layer);
  } else {
    a.tile_in_cache = false;
    cuda::qkv_prologue(qkv_, 1, p.n_heads, p.n_kv_heads, D, p.v_from_k, L.q_norm, L.k_norm, eps,
                       L.inv_freq, sp, q_, k_, v_, cuda::KvDest{}, stream_);
    mark(Stage::kRope, p.layer);
    cuda::attention(a, stream_, t);
    mark(Stage::kAttention, p.layer);
    cuda::kv_store(k_, v_, 1, p.n_kv_heads, D, L.kv_f16, L.ring, L.n_slots, sp, k_of(L, tile_slot_),
                   v_of(L, tile_slot_), stream_);
    mark(Stage::kKvWrite, p.layer);
  }
  cuda::matvec(L.wo, att_, attq_, 1, a_, 0.0f, stream_, t);
  mark(Stage::kAttnOut, p.layer);
  cuda::residual_norm(x_, a_, L.post_attn_norm, L.ffn_norm, 1, E, eps, h_, hq_, stream_, t);
  mark(Stage::kEpilogue, p.layer);
  const bool down_q8 = cuda::matvec_reads_q8(L.down.type);
  if (L.gate.type == WType::kQ4_0 && L.up.type == WType::kQ4_0) {
    cuda::matvec_gated(L.gate, L.up, hq_, 1, g_, stream_, t);
    mark(Stage::kFfnGateUp, p.layer);
  } else {
    cuda::matvec(L.gate, h_, hq_, 1, gu_, 0.0f, stream_, t);
    cuda::matvec(L.up, h_, hq_, 1, gu_ + F, 0.0f, stream_, t);
    mark(Stage::kFfnGateUp, p.layer);
    cuda::gelu_mul(gu_, 1, F, g_, stream_);
    mark(Stage::kGelu, p.layer);
  }
  // A separate kernel: quantising g inside the gated product measured slower on the H200 both
  // as the last block of each 32-row group after a fence (1 µs per layer) and as blocks of 32
  // rows meeting in shared memory (12B 1-4 %, 31B 2-5 % slower per token).
  if (down_q8) {
    cuda::quantize_q8(g_, 1, F, gq_, stream_);
    mark(Stage::kGelu, p.layer);
  }
  cuda::matvec(L.down, g_, gq_, 1, a_, 0.0f, stream_, t);
  mark(Stage::kFfnDown, p.layer);
  const float* w_next = last ? output_norm_ : layers_[p.layer + 1].attn_norm;
  cuda::residual_norm_scale(x_, a_, L.post_ffw_norm, L.out_scale, w_next, 1, E, eps, h_, hq_,
                            stream_, t);
  mark(Stage::kEpilogue, p.layer);
}

// A short eval (kEvalRowsMax < n ≤ matmul_n_max(), or any n ≥ 2 where the rows pass is not
// available: a short follow-up, a prompt's tail) as the decode step does it, with every product reading its weights once for all n rows (matmul_n)
// instead of dequantising them for cuBLAS, and attention as a short prompt tile does it.
void CudaBackend::layer_small(const model::LayerPlan& p, const DevLayer& L, int n, bool last) {
  const int E = cfg_.n_embd, D = p.head_dim, H = p.n_heads;
  const float eps = cfg_.rms_eps;
  const cuda::CudaTuning& t = tuning_;
  const auto* sp = reinterpret_cast<const cuda::StepParams*>(step_dev_);
  // h_ and its q8 copy hq_ hold the normed rows (the previous layer's epilogue made both).
  cuda::matmul_n(L.qkv, h_, hq_, n, qkv_, 0.0f, stream_, t);
  mark(Stage::kQkv, p.layer);
  cuda::qkv_prologue(qkv_, n, H, p.n_kv_heads, D, p.v_from_k, L.q_norm, L.k_norm, eps,
                     L.inv_freq, sp, q_, k_, v_, cuda::KvDest{}, stream_);
  mark(Stage::kRope, p.layer);
  if (attention_tile(p, L, n, true)) cuda::to_f32(x16_, static_cast<int64_t>(n) * H * D, att_, stream_);
  if (cuda::matmul_n_reads_q8(L.wo, n)) cuda::quantize_q8(att_, n, H * D, attq_, stream_);
  cuda::matmul_n(L.wo, att_, attq_, n, a_, 0.0f, stream_, t);
  mark(Stage::kAttnOut, p.layer);
  cuda::residual_norm(x_, a_, L.post_attn_norm, L.ffn_norm, n, E, eps, h_, hq_, stream_, t);
  mark(Stage::kEpilogue, p.layer);
  ffn_block(p, L, n, last, true);
}

// The feed-forward block and the layer's closing epilogue (its residual, the scale, the next
// norm): `small` as the decode step does it (n-token products on q8 or f16 activations, hq_
// kept for the next product), otherwise as a prompt tile (dequantised weights and cuBLAS; hq_
// only after the last layer, for the head).
// gate and up of n rows one row at a time into gu's [n, 2F] gate|up rows (the decode's matvec
// per row): FFNs whose gate and up are not a quantised pair of one type.
void CudaBackend::gate_up_by_row(const DevLayer& L, int n) {
  const int E = cfg_.n_embd, F = cfg_.n_ff;
  for (int r = 0; r < n; ++r) {
    const Q8Act hr{hq_.q + static_cast<int64_t>(r) * E, hq_.ds + static_cast<int64_t>(r) * E / 32};
    float* gur = gu_ + static_cast<int64_t>(r) * 2 * F;
    cuda::matvec(L.gate, h_ + static_cast<int64_t>(r) * E, hr, 1, gur, 0.0f, stream_, tuning_);
    cuda::matvec(L.up, h_ + static_cast<int64_t>(r) * E, hr, 1, gur + F, 0.0f, stream_, tuning_);
  }
}

void CudaBackend::ffn_block(const model::LayerPlan& p, const DevLayer& L, int n, bool last,
                            bool small) {
  const int E = cfg_.n_embd, F = cfg_.n_ff;
  const float eps = cfg_.rms_eps;
  const cuda::CudaTuning& t = tuning_;
  if (!small) {
    cuda::to_f16(h_, static_cast<int64_t>(n) * E, x16_, stream_);
    // gate|up as one product over the two dequantised matrices stacked by rows.
    cuda::dequant_f16(L.gate, 0, L.gate.rows, w16_, stream_);
    cuda::dequant_f16(L.up, 0, L.up.rows, w16_ + L.gate.rows * L.gate.cols, stream_);
    gemm_rows(w16_, 2 * static_cast<int64_t>(F), E, x16_, n, gu_);
    mark(Stage::kFfnGateUp, p.layer);
    cuda::gelu_mul(gu_, n, F, g_, stream_);
    mark(Stage::kGelu, p.layer);
    cuda::to_f16(g_, static_cast<int64_t>(n) * F, x16_, stream_);
    gemm(L.down, x16_, n, a_);
    mark(Stage::kFfnDown, p.layer);
    const float* w_next = last ? output_norm_ : layers_[p.layer + 1].attn_norm;
    // The last layer also quantises the final-normed rows: the head reads them (q8).
    cuda::residual_norm_scale(x_, a_, L.post_ffw_norm, L.out_scale, w_next, n, E, eps, h_,
                              last ? hq_ : Q8Act{}, stream_, t);
    mark(Stage::kEpilogue, p.layer);
    return;
  }
  const bool q_ffn = L.gate.type == L.up.type &&
                     (L.gate.type == WType::kQ4_0 || L.gate.type == WType::kQ8_0);
  if (q_ffn) {
    cuda::matmul_n_gated(L.gate, L.up, h_, hq_, n, g_, stream_, t);
    mark(Stage::kFfnGateUp, p.layer);
  } else {
    gate_up_by_row(L, n);  // other weight types (F32, mixed)
    mark(Stage::kFfnGateUp, p.layer);
    cuda::gelu_mul(gu_, n, F, g_, stream_);
    mark(Stage::kGelu, p.layer);
  }
  if (cuda::matmul_n_reads_q8(L.down, n)) {
    cuda::quantize_q8(g_, n, F, gq_, stream_);
    mark(Stage::kGelu, p.layer);
  }
  cuda::matmul_n(L.down, g_, gq_, n, a_, 0.0f, stream_, t);
  mark(Stage::kFfnDown, p.layer);
  const float* w_next = last ? output_norm_ : layers_[p.layer + 1].attn_norm;
  cuda::residual_norm_scale(x_, a_, L.post_ffw_norm, L.out_scale, w_next, n, E, eps, h_, hq_,
                            stream_, t);
  mark(Stage::kEpilogue, p.layer);
}

// The attention of an eval tile (rows from past_[tile_slot_] on, q_/k_/v_ from the prologue),
// and the store of its K/V. The tensor-core path (attention_prefill: f16 rows into x16_) from
// kGemmAttnMin rows; for a short eval (`small`: n-token products) only over an f16 cache, since
// an f32 cache multiplies in TF32 there and short evals keep the split kernel's f32 (which
// agrees with the CPU reference's greedy picks on the fixtures; TF32 moved one). Short evals at
// depth gain most (split kernel: every query re-reads the keys; bench/results/cuda.md "Short
// evals"). Otherwise the split kernel (f32 rows into att_). Returns whether the rows are in x16_.
bool CudaBackend::attention_tile(const model::LayerPlan& p, const DevLayer& L, int n, bool small) {
  const int D = p.head_dim, H = p.n_heads;
  const auto* sp = reinterpret_cast<const cuda::StepParams*>(step_dev_);
  auto store = [&] {
    cuda::kv_store(k_, v_, n, p.n_kv_heads, D, L.kv_f16, L.ring, L.n_slots, sp, k_of(L, tile_slot_),
                   v_of(L, tile_slot_), stream_);
    mark(Stage::kKvWrite, p.layer);
  };
  if (n >= kGemmAttnMin && prefill_scratch_ && (L.kv_f16 || !small)) {
    // A full layer reads the tile's keys from the cache (stored first), a ring layer from the
    // tile (stored after: the tile may overwrite slots it still needs).
    if (!L.ring) store();
    const cuda::PrefillAttnArgs pa{q_, k_, v_, k_of(L, tile_slot_), v_of(L, tile_slot_), L.kv_f16, L.ring,
                                   L.n_slots, past_[tile_slot_], n, T_, H, p.n_kv_heads, D,
                                   L.ring ? p.window : 0, x16_, prefill_scratch_,
                                   prefill_scratch_bytes_};
    cuda::attention_prefill(pa, cublas_, stream_);
    mark(Stage::kAttention, p.layer);
    if (L.ring) store();
    return true;
  }
  // The rows attend to the cache and to their own K/V; stored after (a ring may overwrite slots
  // the rows still read).
  cuda::AttnArgs a{q_, k_, v_, k_of(L, tile_slot_), v_of(L, tile_slot_), L.kv_f16, L.ring, L.n_slots, n, H,
                   p.n_kv_heads, D, p.window, splits_for(L, n), sp, part_, att_, Q8Act{}};
  cuda::attention(a, stream_, tuning_);
  mark(Stage::kAttention, p.layer);
  store();
  return false;
}

void CudaBackend::layer_prefill(const model::LayerPlan& p, const DevLayer& L, int n, bool last) {
  const int E = cfg_.n_embd, D = p.head_dim, H = p.n_heads;
  const float eps = cfg_.rms_eps;
  const auto* sp = reinterpret_cast<const cuda::StepParams*>(step_dev_);
  cuda::to_f16(h_, static_cast<int64_t>(n) * E, x16_, stream_);
  gemm(L.qkv, x16_, n, qkv_);
  mark(Stage::kQkv, p.layer);
  cuda::qkv_prologue(qkv_, n, H, p.n_kv_heads, D, p.v_from_k, L.q_norm, L.k_norm, eps,
                     L.inv_freq, sp, q_, k_, v_, cuda::KvDest{}, stream_);
  mark(Stage::kRope, p.layer);
  if (!attention_tile(p, L, n, false)) {
    cuda::to_f16(att_, static_cast<int64_t>(n) * H * D, x16_, stream_);
  }
  gemm(L.wo, x16_, n, a_);
  mark(Stage::kAttnOut, p.layer);
  cuda::residual_norm(x_, a_, L.post_attn_norm, L.ffn_norm, n, E, eps, h_, Q8Act{}, stream_,
                      tuning_);
  mark(Stage::kEpilogue, p.layer);
  ffn_block(p, L, n, last, false);
}

void CudaBackend::head_rows(int n) {
  cuda::matmul_n(embd_, h_, hq_, n, logits_dev_, cfg_.final_logit_softcap, stream_, tuning_);
}

void CudaBackend::head_row(int row) {
  const int E = cfg_.n_embd;
  Q8Act hq{hq_.q + static_cast<int64_t>(row) * E, hq_.ds + static_cast<int64_t>(row) * E / 32};
  cuda::matvec(embd_, h_ + static_cast<int64_t>(row) * E, hq, 1, logits_dev_,
               cfg_.final_logit_softcap, stream_, tuning_);
}

// Logs the decode graph's size and how many of its edges are programmatic (PDL) ones.
static void log_graph(cudaGraph_t graph) {
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
  if (profiler_ != nullptr) {
    prof_marks_.clear();
    prof_record(prof_events_[1]);  // the forward's start
  }
  // Profiled with stage events in the graph's chain (graph-inline): a kernel after one has no
  // kernel to overlap with, so the launches go without PDL.
  const bool inline_events = prof_capturing_ && prof_timing_ == ProfTiming::kGraphInline;
  cuda::set_pdl(!inline_events && (tuning_.pdl == cuda::PdlMode::kAll ||
                                   (tuning_.pdl == cuda::PdlMode::kPrefill && n > 1)));
  cuda::embed(embd_, step_dev_ + 1, n, std::sqrt(static_cast<float>(E)), x_, stream_);
  mark(Stage::kEmbed, -1);
  const bool small = n > 1 && n <= cuda::matmul_n_max();
  cuda::rms_norm(x_, layers_[0].attn_norm, n, E, cfg_.rms_eps, h_, n == 1 || small ? hq_ : Q8Act{},
                 stream_, tuning_);
  mark(Stage::kNorm, 0);
  for (int i = 0; i < cfg_.n_layers; ++i) {
    const bool last = i + 1 == cfg_.n_layers;
    if (n == 1) {
      layer_decode(model_.plan[i], layers_[i], last);
    } else if (small) {
      layer_small(model_.plan[i], layers_[i], n, last);
    } else {
      layer_prefill(model_.plan[i], layers_[i], n, last);
    }
  }
  if (want_head) {
    head_row(n - 1);
    mark(Stage::kHead, -1);
  }
}

Status CudaBackend::eval(std::span<const int32_t> tokens, bool all_logits,
                         const TileCallback& on_tile) {
  const int n_total = static_cast<int>(tokens.size());
  if (n_total == 0) return errorf("cuda eval: no tokens");
  if (past_[0] + n_total > opt_.n_ctx) {
    return errorf("cuda eval: %d tokens at position %d exceed the context of %d", n_total,
                  past_[0], opt_.n_ctx);
  }
  for (int32_t t : tokens) {
    if (t < 0 || t >= cfg_.n_vocab) {
      return errorf("cuda eval: token id %d outside the vocabulary [0, %d)", t, cfg_.n_vocab);
    }
  }
  const int V = cfg_.n_vocab;
  logits_rows_ = all_logits ? n_total : 1;
  batch_rows_ = 0;
  reserve_logits_host(static_cast<size_t>(logits_rows_) * V);
  logits_pending_ = false;
  logits_last_dev_ = logits_dev_;
  tile_slot_ = 0;
  begin_hidden(logits_rows_);
  for (int done = 0; done < n_total;) {
    const int n = std::min(T_, n_total - done);
    const bool last_tile = done + n == n_total;
    // Tiles of 2..kEvalRowsMax tokens go through the rows pass (each row computed as its decode
    // step would be); longer short tiles take the n-token products (layer_small).
    const bool as_rows = rows_ok_ && n >= 2 && n <= std::min(kEvalRowsMax, rows_max_);
    step_host_[0] = past_[0];
    std::memcpy(step_host_ + 1, tokens.data() + done, n * sizeof(int32_t));
    if (profiler_ != nullptr) GEM_CUDA_CHECK(cudaEventRecord(prof_events_[0], stream_));
    if (!as_rows) {
      GEM_CUDA_CHECK(cudaMemcpyAsync(step_dev_, step_host_, (1 + n) * sizeof(int32_t),
                                     cudaMemcpyHostToDevice, stream_));
    }
    if (last_tile) logits_last_dev_ = logits_dev_;
    if (as_rows) {
      for (int i = 0; i < n; ++i) rows_host_[i] = cuda::RowParams{past_[0] + i, 0, i, 0};
      // Copies the step's tokens itself; a prompt's last tile takes only its last row's logits.
      rows_pass(n, all_logits ? RowsHead::kAll : last_tile ? RowsHead::kLast : RowsHead::kNone);
      prof_step_marks_ = &prof_marks_;
      if (all_logits) {
        GEM_CUDA_CHECK(cudaMemcpyAsync(logits_host_.data() + static_cast<size_t>(done) * V,
                                       logits_dev_, static_cast<size_t>(n) * V * sizeof(float),
                                       cudaMemcpyDeviceToHost, stream_));
      } else if (last_tile) {
        logits_last_dev_ = logits_dev_;  // the last row's, alone (RowsHead::kLast)
      }
    } else if (n == 1 && profiler_ != nullptr) {
      prof_decode();
    } else if (n == 1) {
      const int k = decode_bucket(past_[0]);
      if (decode_graphs_.size() <= static_cast<size_t>(k)) decode_graphs_.resize(k + 1, nullptr);
      if (!decode_graphs_[k]) {
        capture_bucket_ = k;
        cudaGraph_t graph = nullptr;
        GEM_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
        forward_tile(1, true);
        GEM_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
        log_graph(graph);
        if (tuning_.decode_buckets) {
          GEM_LOG_INFO("cuda: that graph serves positions below %lld (bucket %d)",
                       std::min<long long>(static_cast<long long>(tuning_.decode_bucket_min) << k,
                                           opt_.n_ctx),
                       k);
        }
        GEM_CUDA_CHECK(cudaGraphInstantiate(&decode_graphs_[k], graph, 0));
        cudaGraphDestroy(graph);
      }
      GEM_CUDA_CHECK(cudaGraphLaunch(decode_graphs_[k], stream_));
    } else {
      forward_tile(n, last_tile && !all_logits);
      prof_step_marks_ = &prof_marks_;
    }
    if (as_rows) {
      // the logits were copied or kept above
    } else if (all_logits && n > 1 && n <= cuda::matmul_n_max()) {
      head_rows(n);
      mark(Stage::kHead, -1);
      GEM_CUDA_CHECK(cudaMemcpyAsync(logits_host_.data() + static_cast<size_t>(done) * V,
                                     logits_dev_, static_cast<size_t>(n) * V * sizeof(float),
                                     cudaMemcpyDeviceToHost, stream_));
    } else if (all_logits) {
      for (int t = 0; t < n; ++t) {
        if (n > 1) head_row(t);
        GEM_CUDA_CHECK(cudaMemcpyAsync(logits_host_.data() + static_cast<size_t>(done + t) * V,
                                       logits_dev_, V * sizeof(float), cudaMemcpyDeviceToHost,
                                       stream_));
      }
    }
    if (keep_hidden_ && (all_logits || last_tile)) {
      keep_hidden_rows(all_logits ? 0 : n - 1, all_logits ? done : 0, all_logits ? n : 1);
    }
    // One synchronisation per tile: the step parameters' pinned buffer is reused next tile.
    GEM_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (profiler_ != nullptr) prof_collect();
    past_[0] += n;
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
    GEM_CUDA_CHECK(cudaMemcpy(logits_host_.data(), logits_last_dev_,
                              cfg_.n_vocab * sizeof(float), cudaMemcpyDeviceToHost));
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
  const float* logits = logits_last_dev_;
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

// ---- Stage profiling (gem profile) ----

namespace {

// Marks a forward can make: about a dozen per layer, a few outside the layers.
constexpr int kProfMarksPerLayer = 16;
constexpr int kProfMarksGlobal = 16;

}  // namespace

Status CudaBackend::set_stage_profiler(StageProfiler* profiler) {
  if (profiler == nullptr) {
    profiler_ = nullptr;
    return ok_status();
  }
  const std::string& asked = profiler->timing();
  ProfTiming timing = ProfTiming::kGraphSide;
  if (asked == "graph-inline") {
    timing = ProfTiming::kGraphInline;
  } else if (asked == "eager") {
    timing = ProfTiming::kEager;
  } else if (asked != "auto" && asked != "graph-side") {
    return errorf("cuda backend: stage timing '%s', expected auto, graph-side, graph-inline or "
                  "eager", asked.c_str());
  }
  if (prof_graph_broken_ && timing != ProfTiming::kEager) {
    if (asked != "auto") {
      return errorf("cuda backend: a decode graph with stage events could not be built here; "
                    "--timing eager (or auto) times the same launches without a graph");
    }
    timing = ProfTiming::kEager;
  }
  if (timing != prof_timing_) {
    // The graphs hold the other way's record nodes.
    for (cudaGraphExec_t& g : prof_graphs_) {
      if (g) GEM_CUDA_CHECK(cudaGraphExecDestroy(g));
      g = nullptr;
    }
    prof_timing_ = timing;
  }
  if (prof_events_.empty()) {
    const size_t n = 2 + static_cast<size_t>(kProfMarksPerLayer) * cfg_.n_layers + kProfMarksGlobal;
    prof_events_.assign(n, nullptr);
    for (cudaEvent_t& e : prof_events_) {
      if (cudaEventCreate(&e) != cudaSuccess) {
        cudaGetLastError();
        return errorf("cuda backend: cannot create the %zu events of stage profiling", n);
      }
    }
  }
  switch (prof_timing_) {
    case ProfTiming::kGraphSide:
      profiler->set_method(
          "cuda graph-side: decode replays a graph of the production launches (PDL edges kept) "
          "with an event record node beside the chain at each stage boundary; prompt tiles "
          "record events between their eager launches");
      break;
    case ProfTiming::kGraphInline:
      profiler->set_method(
          "cuda graph-inline: decode replays a graph with an event record node in the chain at "
          "each stage boundary, launched without PDL; prompt tiles record events between "
          "their eager launches");
      break;
    case ProfTiming::kEager:
      profiler->set_method(
          "cuda eager: events recorded between eager launches at each stage boundary, decode "
          "without its graph (no PDL overlap across a boundary)");
      break;
  }
  profiler_ = profiler;
  return ok_status();
}

// Records `event` where the stream's work has got to: eagerly, or while the profiled decode
// graph is captured as a record node — inline (the next kernel waits for it), or beside the
// chain (a node that depends on the kernels so far while the stream's next kernel still
// depends on them alone, so programmatic edges and their overlap stay as in production).
void CudaBackend::prof_record(cudaEvent_t event) {
  if (!prof_capturing_) {
    GEM_CUDA_CHECK(cudaEventRecord(event, stream_));
    return;
  }
  if (prof_timing_ == ProfTiming::kGraphInline) {
    GEM_CUDA_CHECK(cudaEventRecordWithFlags(event, stream_, cudaEventRecordExternal));
    return;
  }
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  cudaGraph_t graph = nullptr;
  const cudaGraphNode_t* deps = nullptr;
  size_t n_deps = 0;
#if CUDART_VERSION >= 13000
  const cudaGraphEdgeData* edges = nullptr;
  cudaError_t err = cudaStreamGetCaptureInfo(stream_, &status, nullptr, &graph, &deps, &edges,
                                             &n_deps);
#elif CUDART_VERSION >= 12030
  const cudaGraphEdgeData* edges = nullptr;
  cudaError_t err = cudaStreamGetCaptureInfo_v3(stream_, &status, nullptr, &graph, &deps, &edges,
                                                &n_deps);
#else
  cudaError_t err = cudaStreamGetCaptureInfo(stream_, &status, nullptr, &graph, &deps, &n_deps);
#endif
  cudaGraphNode_t node = nullptr;
  if (err == cudaSuccess && status == cudaStreamCaptureStatusActive) {
    // A record node's incoming edges are plain ones whatever the edge data of the stream's
    // next node would have been: it fires once the kernels before it have completed. It also
    // follows the previous record node, so the events are recorded in the order of the marks
    // (a chain of their own beside the kernels').
    std::vector<cudaGraphNode_t> after(deps, deps + n_deps);
    if (prof_prev_node_ && std::find(after.begin(), after.end(), prof_prev_node_) == after.end()) {
      after.push_back(prof_prev_node_);
    }
    err = cudaGraphAddEventRecordNode(&node, graph, after.data(), after.size(), event);
  }
  if (err != cudaSuccess || status != cudaStreamCaptureStatusActive) {
    cudaGetLastError();  // not a launch error for the next GEM_CUDA_LAUNCHED
    prof_failed_ = true;
    return;
  }
  prof_prev_node_ = node;
}

void CudaBackend::prof_mark(Stage stage, int layer) {
  const size_t i = prof_marks_.size() + 2;
  GEM_CHECK(i < prof_events_.size(), "cuda: more than %zu stage marks in one forward",
            prof_events_.size() - 2);
  prof_marks_.emplace_back(stage, layer);
  prof_record(prof_events_[i]);
}

// A profiled decode step: the bucket's graph with the marks, captured at its first use (or the
// same launches eagerly).
void CudaBackend::prof_decode() {
  const int k = decode_bucket(past_[0]);
  capture_bucket_ = k;
  if (prof_timing_ != ProfTiming::kEager) {
    if (prof_graphs_.size() <= static_cast<size_t>(k)) {
      prof_graphs_.resize(k + 1, nullptr);
      prof_graph_marks_.resize(k + 1);
    }
    if (!prof_graphs_[k]) {
      cudaGraph_t graph = nullptr;
      prof_failed_ = false;
      prof_prev_node_ = nullptr;
      prof_capturing_ = true;
      GEM_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
      forward_tile(1, true);
      prof_capturing_ = false;
      cudaError_t err = cudaStreamEndCapture(stream_, &graph);
      if (err == cudaSuccess && !prof_failed_) {
        err = cudaGraphInstantiate(&prof_graphs_[k], graph, 0);
      }
      if (graph) cudaGraphDestroy(graph);
      if (err != cudaSuccess || prof_failed_) {
        GEM_LOG_WARN("cuda: the decode graph with stage events could not be built (%s); timing "
                     "the same launches eagerly instead",
                     err != cudaSuccess ? cudaGetErrorString(err) : "a record node failed");
        cudaGetLastError();
        if (prof_graphs_[k]) cudaGraphExecDestroy(prof_graphs_[k]);
        prof_graphs_[k] = nullptr;
        prof_graph_broken_ = true;
        prof_timing_ = ProfTiming::kEager;
        profiler_->set_method("cuda eager (the graph with stage events failed to build): events "
                              "between eager launches, decode without its graph");
      } else {
        prof_graph_marks_[k] = prof_marks_;
      }
    }
    if (prof_graphs_[k]) {
      GEM_CUDA_CHECK(cudaGraphLaunch(prof_graphs_[k], stream_));
      prof_step_marks_ = &prof_graph_marks_[k];
      return;
    }
  }
  forward_tile(1, true);
  prof_step_marks_ = &prof_marks_;
}

// After the tile's synchronisation: the time between consecutive events, to the profiler.
void CudaBackend::prof_collect() {
  float ms = 0.0f;
  GEM_CUDA_CHECK(cudaEventElapsedTime(&ms, prof_events_[0], prof_events_[1]));
  profiler_->add(Stage::kSetup, -1, ms * 1e-3);
  const std::vector<std::pair<Stage, int>>& marks = *prof_step_marks_;
  for (size_t i = 0; i < marks.size(); ++i) {
    GEM_CUDA_CHECK(cudaEventElapsedTime(&ms, prof_events_[i + 1], prof_events_[i + 2]));
    profiler_->add(marks[i].first, marks[i].second, ms * 1e-3);
  }
}

}  // namespace gem::cuda

namespace gem {

bool cuda_device_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

Result<std::unique_ptr<Backend>> make_cuda_backend(const model::Model& model,
                                                   const BackendOptions& options) {
  return make_cuda_backend(model, options, cuda::tuning_from_env());
}

Result<std::unique_ptr<Backend>> make_cuda_backend(const model::Model& model,
                                                   const BackendOptions& options,
                                                   const cuda::CudaTuning& tuning) {
  if (!cuda_device_available()) return errorf("cuda: no CUDA device found");
  auto backend = std::make_unique<cuda::CudaBackend>(model, options, tuning);
  GEM_RETURN_IF_ERROR(backend->init());
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace gem
