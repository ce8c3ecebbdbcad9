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

// A GEM_CUDA_* integer that must be one of `allowed` (or `fallback`); another value, or one
// that is not an integer, is reported on stderr (once per name and value, as env_int reports
// its own) and replaced by `fallback`. Host code (tests run it without a GPU).
int env_pick(const char* name, int fallback, std::initializer_list<int> allowed);
// A GEM_CUDA_* switch: `fallback` when unset or empty; 1/true/on/yes or 0/false/off/no; any
// other value is reported on stderr (once per name and value) and replaced by `fallback`. Host
// code (tests run it without a GPU).
bool env_flag(const char* name, bool fallback);

// Per-eval values the captured decode graph reads from device memory, so one graph serves
// every position.
struct StepParams {
  int32_t pos0;  // position of the tile's first token (= n_past before the eval)
};

// ---- forward_cuda.cu ----
// Decode kernels that GEM_CUDA_SKIP may leave out of the graph (timing experiments only: the
// output is wrong), as bits.
enum DecodeSkip : unsigned {
  kSkipRes = 1u << 0,       // "res": the residual/norm epilogues
  kSkipQ8 = 1u << 1,        // "q8": the FFN activations' q8
  kSkipPrologue = 1u << 2,  // "prologue": q/k/v norms, RoPE, KV store
  kSkipAttn = 1u << 3,      // "attn": decode attention and its merge
  kSkipQkv = 1u << 4,       // "qkv", "wo", "gated", "down": the weight products
  kSkipWo = 1u << 5,
  kSkipGated = 1u << 6,
  kSkipDown = 1u << 7,
};
// A comma-separated list of those names ("res,attn") as bits; an unknown or empty name is an
// error that names it and lists the valid ones.
Result<unsigned> parse_decode_skip(std::string_view list);

// ---- ops.cu ----
// x[t, :] = row(tokens[t]) of the embedding · scale.   x: [n, emb.cols].
void embed(const DevMatrix& emb, const int32_t* tokens, int n, float scale, float* x,
           cudaStream_t s);
// y = rms_norm(x, w) row-wise (w may be null); optional q8 copy of y (cols % 32 == 0).
void rms_norm(const float* x, const float* w, int n, int cols, float eps, float* y, Q8Act yq,
              cudaStream_t s);
// After attention: x += rms_norm(a, w_post); h = rms_norm(x, w_next); hq = q8(h) if hq.q.
void residual_norm(float* x, const float* a, const float* w_post, const float* w_next, int n,
                   int cols, float eps, float* h, Q8Act hq, cudaStream_t s);
// After the FFN: x = (x + rms_norm(f, w_post)) · out_scale[0]; then h = rms_norm(x, w_next)
// and its q8 copy when w_next is given (the next layer's attn_norm or the final output_norm).
void residual_norm_scale(float* x, const float* f, const float* w_post, const float* out_scale,
                         const float* w_next, int n, int cols, float eps, float* h, Q8Act hq,
                         cudaStream_t s);
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
// How the quantised products load their weights: L2 evict-first (every weight byte is read once
// per step; GEM_CUDA_MV_EF=0 for the default policy); preload: the first round's weights into
// registers before pdl_wait, its activations after (under PDL a product's first bytes are in
// flight while the previous kernel finishes; GEM_CUDA_MV_PRELOAD=0 waits first). (An L2
// prefetch of the first round before pdl_wait, the form before it, measured slower: run 9.)
// bulk: stream the weights through shared memory with cp.async.bulk (matvec.cu) instead of
// register loads: bulk_warps consumer warps per block (bulk_rows consecutive rows each per chunk)
// and a producer warp, a ring of bulk_slots chunks (bulk_plan). GEM_CUDA_MV_BULK,
// GEM_CUDA_MV_BULK_WARPS, _R, _SLOTS, _SLOT_BYTES, _MIN_COPY. Used for one token with
// nb % 8 == 0 (cols a multiple of 256); the other calls keep the register form.
// Off by default: measured slower (bench/results/cuda.md, runs 7 and 8).
// x_smem: the register products stage the token's q8 activations in shared memory per block
// (matrices of at most 65,536 rows) and read them from there when used, so a round's registers
// hold weights only; q4_unroll: Q4_0 blocks per lane and round with x_smem (4 or 8; the gated
// product loads half as many per matrix). GEM_CUDA_MV_XSMEM, GEM_CUDA_MV_UNROLL. Off: measured
// slower on the H200 (run 8: 12B 291.9 vs 317.5 tok/s; the per-block staging costs more than
// the extra resident warps give).
struct MatvecConfig {
  bool evict_first = true;
  bool preload = true;  // first round's weights before pdl_wait (GEM_CUDA_MV_PRELOAD)
  bool x_smem = false;
  int q4_unroll = 4;
  bool bulk = false;
  int bulk_warps = 8;
  int bulk_rows = 1;
  int bulk_slots = 4;
  int bulk_slot_bytes = 36864;
  int bulk_min_copy = 2048;
};
// How a bulk product cuts `rows` consecutive rows of nb 32-weight blocks of qb quant bytes (+2
// scale bytes each, `mats` matrices side by side) into chunks of at most `budget` bytes: `parts`
// column ranges of kb blocks each, kb % 8 == 0 so that every copy is 16-byte sized and aligned
// (needs nb % 8 == 0); over budget only when even 8 blocks are. slot_bytes: one chunk's bytes
// rounded up to 128.
struct BulkShape {
  int parts = 1;
  int kb = 0;
  int slot_bytes = 0;
};
BulkShape bulk_shape(int nb, int qb, int mats, int rows, int budget);
// The chunk shape and ring of a bulk product whose chunks have `rows` rows: chunks within
// `budget`, unless that cuts rows into column parts whose copies (kb·qb quant bytes per row)
// are under min_copy bytes and two slots of whole rows fit in max_smem with the staged
// activations: then whole rows (rows cut into parts are copied row by row, and small copies are
// slow: bench/results/cuda.md, runs 7 and 8). Then as many of `slots` slots as fit (at least 1).
struct BulkPlan {
  BulkShape shape;
  int slots = 1;
  size_t smem = 0;
};
BulkPlan bulk_plan(int nb, int qb, int mats, int rows, int slots, int budget, int min_copy,
                   int max_smem);
MatvecConfig matvec_config();
// y[t, r] = Σ_c W[r, c]·x[t, c] for n ≤ a few rows; Q4_0/Q8_0 take xq (q8), F32/Q6_K take x.
// With cap > 0 the result is soft-capped (the output head).
void matvec(const DevMatrix& w, const float* x, Q8Act xq, int n, float* y, float cap,
            cudaStream_t s);
// The same with an explicit configuration (tests).
void matvec(const DevMatrix& w, const float* x, Q8Act xq, int n, float* y, float cap,
            cudaStream_t s, const MatvecConfig& mc);
// Fused FFN for decode: g[t, i] = gelu_tanh(gate[i]·x) · (up[i]·x), gate/up Q4_0.
void matvec_gated(const DevMatrix& gate, const DevMatrix& up, Q8Act xq, int n, float* g,
                  cudaStream_t s);
void matvec_gated(const DevMatrix& gate, const DevMatrix& up, Q8Act xq, int n, float* g,
                  cudaStream_t s, const MatvecConfig& mc);
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
// layers) slower in run 11; 16 with 4 or 8 sliding-layer splits per SM no faster in run 13
// (12B 2-2.5 % slower at depth 0; the 31B within 1 % at 4 per SM, 1.5-2.7 % slower at 8).
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
  // the split tensor-core form (attention.cu, GEM_CUDA_ATTN_MMA2_MIN_KEYS).
  int64_t max_keys = 0;
  // Set by attention(): decode blocks of an empty split write l = 0 and exit at once.
  bool skip_empty = false;
  // Set by attention(): decode blocks whose key range does not hold the token's position issue
  // their first K/V copies before pdl_wait (GEM_CUDA_ATTN_EARLY_KV, on by default).
  bool early_kv = false;
  // Full layers whose V is the raw K projection and whose RoPE turns only the pairs below D/8
  // (Gemma 4's proportional RoPE): the K norm's weight w_k, with which K = V ⊙ w_k on the dims
  // that do not rotate. The split tensor-core decode then reads only K's rotated quarter besides
  // V (attention.cu, shared_kv_rotated). nullptr: K is read whole.
  const float* k_shared_w = nullptr;
};
size_t attention_part_floats(int n, int n_heads, int head_dim, int n_splits);
void attention(const AttnArgs& a, cudaStream_t s);
// Whether attention() takes the decode kernel for these arguments (n = 1, tile_in_cache, a
// group of 1, 2, 4, 8 or 16 heads per KV head).
bool attention_decode_supported(const AttnArgs& a);
// Whether that decode takes a tensor-core form (f16 cache, 8 or 16 heads per KV head — also 2
// or 4 with GEM_CUDA_ATTN_MMA_SMALL=1 —, D 256 or 512; GEM_CUDA_ATTN_MMA=0 turns them off).
bool attention_decode_uses_mma(const AttnArgs& a);
// Whether that decode reads only K's rotated dims besides V (the split tensor-core form with
// AttnArgs::k_shared_w set).
bool attention_decode_shares_kv(const AttnArgs& a);
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
