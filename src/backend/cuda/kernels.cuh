// Kernel launchers of the CUDA backend: one function per op, each enqueueing its kernel(s) on a
// stream. The forward (forward_cuda.cu) calls them in layer order; tests/cuda checks each one
// against the CPU reference. All activations are row-major f32 unless a name says otherwise.
#pragma once

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <string_view>

#include "backend/cuda/tuning.h"
#include "base/status.h"

// cuBLAS failures are programming errors (bad shapes or handles), like launch errors: abort with
// the place.
#define GEM_CUBLAS_CHECK(expr)                                                         \
  do {                                                                                 \
    cublasStatus_t gem_st_ = (expr);                                                   \
    if (gem_st_ != CUBLAS_STATUS_SUCCESS) {                                            \
      std::fprintf(stderr, "%s:%d: cuBLAS error %d: %s\n", __FILE__, __LINE__,          \
                   static_cast<int>(gem_st_), #expr);                                  \
      std::abort();                                                                    \
    }                                                                                  \
  } while (0)

namespace gem::cuda {

// A weight matrix on the device, [rows, cols] (rows = out features). Q4_0 and Q8_0 are stored
// repacked ("split" layout, derived at load from the GGUF blocks): the quant bytes of every row
// contiguous and 16-byte aligned (Q4_0: 16 bytes per block in GGUF nibble order; Q8_0: 32 int8
// per block), the fp16 block scales in a separate [rows, cols/32] array. Q6_K and F32 keep the
// GGUF bytes as they are (`raw`).
enum class WType { kF32, kQ4_0, kQ8_0, kQ6_K };
struct DevMatrix {
  WType type = WType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  uint8_t* qs = nullptr;   // Q4_0: [rows, cols/2]; Q8_0: [rows, cols]
  __half* d = nullptr;     // Q4_0/Q8_0: [rows, cols/32]
  uint8_t* raw = nullptr;  // F32: [rows, cols] floats; Q6_K: GGUF super-blocks
};

// Activations quantised for the integer dot products of the decode matrix-vector kernels,
// llama.cpp's q8_1 idea: per 32 values one scale s = max|x|/127, q = round(x·127/max|x|), and
// ds = (s, s·Σq) so that Σ w·x over a Q4_0 block is d_w·(s·Σ nib·q − 8·s·Σq).
// q: [n, cols] int8.   ds: [n, cols/32].
struct Q8Act {
  int8_t* q = nullptr;
  float2* ds = nullptr;
};

// Per-eval values the captured decode graph reads from device memory, so one graph serves
// every position.
struct StepParams {
  int32_t pos0;  // position of the tile's first token (= n_past before the eval)
};

// ---- ops.cu ----
// x[t, :] = row(tokens[t]) of the embedding · scale.   x: [n, emb.cols].
void embed(const DevMatrix& emb, const int32_t* tokens, int n, float scale, float* x,
           cudaStream_t s);
// y = rms_norm(x, w) row-wise (w may be null); optional q8 copy of y (cols % 32 == 0).
// One-row launches run as clusters of t.res_cluster blocks (every epilogue launcher).
void rms_norm(const float* x, const float* w, int n, int cols, float eps, float* y, Q8Act yq,
              cudaStream_t s, const CudaTuning& t = kDefaultTuning);
// After attention: x += rms_norm(a, w_post); h = rms_norm(x, w_next); hq = q8(h) if hq.q.
void residual_norm(float* x, const float* a, const float* w_post, const float* w_next, int n,
                   int cols, float eps, float* h, Q8Act hq, cudaStream_t s,
                   const CudaTuning& t = kDefaultTuning);
// After the FFN: x = (x + rms_norm(f, w_post)) · out_scale[0]; then h = rms_norm(x, w_next)
// and its q8 copy when w_next is given (the next layer's attn_norm or the final output_norm).
void residual_norm_scale(float* x, const float* f, const float* w_post, const float* out_scale,
                         const float* w_next, int n, int cols, float eps, float* h, Q8Act hq,
                         cudaStream_t s, const CudaTuning& t = kDefaultTuning);
// The attention prologue of one layer for n tokens at positions sp->pos0 + t. qkv: [n, qkv_cols]
// = [q (n_heads·D) | k (n_kv·D) | v (n_kv·D), absent when v_from_k]. Writes q: [n, n_heads, D]
// (q-norm, RoPE), k: [n, n_kv, D] (k-norm, RoPE), v: [n, n_kv, D] (RMS₀ of v, or of raw k).
// inv_freq: [D/2] f64 (freq factors folded in).
// With cache.k set, k and v also land in the layer's cache at slot pos % n_slots (ring) or pos:
// decode's store (n = 1: the ring slot it takes holds a position the query no longer sees).
struct KvDest {
  void* k = nullptr;  // [n_kv, n_slots, D], f32 or f16
  void* v = nullptr;
  bool f16 = false;
  bool ring = false;
  int n_slots = 0;
};
void qkv_prologue(const float* qkv, int n, int n_heads, int n_kv, int head_dim, bool v_from_k,
                  const float* q_norm, const float* k_norm, float eps, const double* inv_freq,
                  const StepParams* sp, float* q, float* k, float* v, KvDest cache,
                  cudaStream_t s);
// Writes the tile's k/v ([n, n_kv, D] f32) into a layer's cache ([n_kv, n_slots, D], f32 or
// f16). Ring layers (ring = true): slot = pos % n_slots, only the last n_slots positions land.
void kv_store(const float* k, const float* v, int n, int n_kv, int head_dim, bool f16, bool ring,
              int n_slots, const StepParams* sp, void* k_cache, void* v_cache, cudaStream_t s);
void quantize_q8(const float* x, int n, int cols, Q8Act xq, cudaStream_t s);
void to_f16(const float* x, int64_t count, __half* y, cudaStream_t s);
// g[t, i] = gelu_tanh(gu[t, i]) · gu[t, F + i]   (gu: [n, 2F] from the fused gate|up product).
void gelu_mul(const float* gu, int n, int F, float* g, cudaStream_t s);
void softcap(float* x, int64_t count, float cap, cudaStream_t s);

// ---- matvec.cu ----
// y[t, r] = Σ_c W[r, c]·x[t, c] for n ≤ a few rows; Q4_0/Q8_0 take xq (q8), F32/Q6_K take x.
// With cap > 0 the result is soft-capped (the output head). The weights' load policy:
// t.mv_evict_first, t.mv_preload.
void matvec(const DevMatrix& w, const float* x, Q8Act xq, int n, float* y, float cap,
            cudaStream_t s, const CudaTuning& t = kDefaultTuning);
// Fused FFN for decode: g[t, i] = gelu_tanh(gate[i]·x) · (up[i]·x), gate/up Q4_0.
void matvec_gated(const DevMatrix& gate, const DevMatrix& up, Q8Act xq, int n, float* g,
                  cudaStream_t s, const CudaTuning& t = kDefaultTuning);
// GGUF blocks (Q4_0 when !q8, Q8_0 when q8) → split layout: qs [n_blocks, 16|32], d [n_blocks].
void repack_blocks(const uint8_t* raw, int64_t n_blocks, bool q8, uint8_t* qs, __half* d,
                   cudaStream_t s);
// Dequantises rows [r0, r0+nr) of w into f16 [nr, cols] (prefill products).
void dequant_f16(const DevMatrix& w, int64_t r0, int64_t nr, __half* out, cudaStream_t s);

// ---- attention.cu ----
// One attention of a layer for the tile's n queries at positions sp->pos0 + t. Keys at
// positions < pos0 come from the cache ([n_kv, n_slots, D], f32 or f16; ring: slot = pos %
// n_slots), keys of the tile itself from k/v ([n, n_kv, D] f32). Visible: causal, and within
// `window` on sliding layers (0 = unlimited). Scale 1.0. out: [n, n_heads, D] f32, plus its
// q8 copy when outq.q. `part` is scratch of attention_part_floats() floats.
// The fewest keys of an attention split (decode and prompt kernels), the rule the backend's
// split counts follow too. Measured on the H200: 64 (fewer, longer splits for the sliding
// layers) was slower; 16 with 4 or 8 sliding-layer splits per SM no faster.
constexpr int kSplitMinKeys = 32;

struct AttnArgs {
  const float* q;
  const float* k_tile;
  const float* v_tile;
  const void* k_cache;
  const void* v_cache;
  bool f16;
  bool ring;
  int n_slots;
  int n;
  int n_heads;
  int n_kv;
  int head_dim;
  int window;
  int n_splits;  // key ranges per (query, head) done by separate blocks (flash decoding)
  const StepParams* sp;
  float* part;
  float* out;
  Q8Act outq;
  // n = 1 only: the query's own K/V were already stored in the cache (qkv_prologue's KvDest),
  // so every key comes from the cache: the decode kernel (K/V tiles shared by a group's heads).
  bool tile_in_cache = false;
  // The most keys this launch can see (a decode graph's bucket; 0: unknown): long ranges take
  // the split tensor-core form (CudaTuning::attn_split_min_keys).
  int64_t max_keys = 0;
  // Set by attention() from CudaTuning::attn_early_kv: decode blocks whose key range does not
  // hold the token's position issue their first K/V copies before pdl_wait.
  bool early_kv = false;
  // Full layers whose V is the raw K projection and whose RoPE turns only the pairs below D/8
  // (Gemma 4's proportional RoPE): the K norm's weight w_k, with which K = V ⊙ w_k on the dims
  // that do not rotate. The split tensor-core decode then reads only K's rotated quarter besides
  // V (attention.cu, shared_kv_rotated). nullptr: K is read whole.
  const float* k_shared_w = nullptr;
};
size_t attention_part_floats(int n, int n_heads, int head_dim, int n_splits);
void attention(const AttnArgs& a, cudaStream_t s, const CudaTuning& t = kDefaultTuning);
// Whether attention() takes the decode kernel for these arguments (n = 1, tile_in_cache, a
// group of 1, 2, 4, 8 or 16 heads per KV head).
bool attention_decode_supported(const AttnArgs& a);
// Whether that decode takes a tensor-core form (f16 cache, 8 or 16 heads per KV head, D 256 or
// 512; t.attn_form = 0 turns them off).
bool attention_decode_uses_mma(const AttnArgs& a, const CudaTuning& t = kDefaultTuning);
// Whether that decode reads only K's rotated dims besides V (the split tensor-core form with
// AttnArgs::k_shared_w set).
bool attention_decode_shares_kv(const AttnArgs& a, const CudaTuning& t = kDefaultTuning);
// One-time kernel attributes (the tensor-core decode's shared memory); call outside graph capture.
void attention_setup();

// ---- attention_prefill.cu ----
// The same attention for a prompt tile, on the tensor cores through cuBLAS (see the file).
// Ring layers (ring = true): the cache still holds the positions before pos0 (store the tile
// after this call); k_tile/v_tile are the tile's keys. Full layers: the tile's K/V are already in
// the cache (store before this call); k_tile/v_tile are unused. pos0 is the host's copy.
// out16: [n, n_heads·D] f16. scratch: attention_prefill_scratch_bytes(...) bytes, of which
// score_bytes hold the f32 scores and probabilities of as many query rows as fit.
struct PrefillAttnArgs {
  const float* q;
  const float* k_tile;
  const float* v_tile;
  void* k_cache;
  void* v_cache;
  bool f16;
  bool ring;
  int n_slots;
  int pos0;
  int n;
  int max_n;  // the tile size the scratch was sized for
  int n_heads;
  int n_kv;
  int head_dim;
  int window;
  __half* out16;
  void* scratch;
  size_t scratch_bytes;
};
size_t attention_prefill_scratch_bytes(int max_n, int n_heads, int n_kv, int head_dim,
                                       int window, bool f16, size_t score_bytes);
void attention_prefill(const PrefillAttnArgs& a, cublasHandle_t h, cudaStream_t s);

// ---- sample.cu ----
// Greedy pick on the device: penalties over history (hist: [n_hist] token ids) applied to a
// copy of the candidates' logits, then argmax. out: one int32.
struct PenaltyArgs {
  const int32_t* hist;
  int n_hist;
  float repeat_penalty;
  float presence_penalty;
  float frequency_penalty;
};
// hist holds at most 256 entries (the window repeat_last_n selects). scratch: floats of
// argmax_scratch_floats(n_vocab).
void argmax_penalized(const float* logits, int n_vocab, const PenaltyArgs& pen, int32_t* out,
                      float* scratch, cudaStream_t s);
int argmax_scratch_floats(int n_vocab);

// The host sampler's chain (sampler/sampler.cc: penalties, top-k, top-p, min-p, temperature,
// one draw with `coin`) on the device, for 1 <= top_k <= kMaxTopK and temperature > 0. Same
// scratch as argmax_penalized. out: one int32 (-1 if there is no candidate).
constexpr int kMaxTopK = 256;
struct DrawArgs {
  int top_k;
  float top_p;
  float min_p;
  float temperature;
  double coin;
};
void sample_top_k(const float* logits, int n_vocab, const PenaltyArgs& pen, const DrawArgs& d,
                  int32_t* out, float* scratch, cudaStream_t s);

}  // namespace gem::cuda
