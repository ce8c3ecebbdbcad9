// The CUDA backend's tuning record: every choice of kernel form and every size the backend and
// its launchers use, with its default and the reason for it, in one place. The backend fills it
// once when it is made (make_cuda_backend: the defaults with the few environment overrides of
// tuning_from_env) and passes it to the launchers; tests set fields. Plain C++ (no CUDA headers),
// so that the CLI can print it (`gem bench -v`). bench/results/cuda.md holds the measurements
// behind the defaults.
#pragma once

#include <functional>
#include <string>

namespace gem::cuda {

// Which launches carry the programmatic-dependent-launch attribute.
enum class PdlMode { kOff, kPrefill, kAll };

struct CudaTuning {
  // ---- launches ----
  // Every launch: a decode product then loads its first weights while the previous kernel
  // finishes (12B decode 344.7 vs 308.8 tok/s without; prompt tiles +3 %).
  PdlMode pdl = PdlMode::kAll;

  // ---- products (matvec.cu) ----
  // Weights read with the L2 evict-first policy: each weight byte is read once per step, and the
  // activations, norms and K/V should outlive them (12B 305 vs 295 tok/s). The Q6_K product's
  // shared-memory copies take no L2 hint (matvec.cu says why).
  bool mv_evict_first = true;
  // The first round of weights is loaded before pdl_wait, the activations after: a product's
  // first bytes are in flight while the previous kernel finishes.
  bool mv_preload = true;

  // ---- norms and epilogues (norm.cu) ----
  // Blocks per row of a one-row (decode) residual epilogue, 1, 2, 4 or 8 (a cluster whose
  // reductions go through distributed shared memory); prompt tiles keep one block per row. 8:
  // 31B decode 1.2-1.9 % faster than 1, the 12B within noise; 2 was 1-2 % slower.
  // The MTP drafter's 1,024-wide rows take 1 (drafter_cuda.cu).
  int res_cluster = 8;

  // ---- decode attention (attention_decode.cu) ----
  // Decode form for f16 caches with 8 or 16 heads per KV head: -1 by the rule below, 0 the
  // CUDA-core kernel, 1 the tensor-core form that computes S whole in every warp, 2 the split
  // tensor-core form. Tests force each.
  int attn_form = -1;
  // The rule: the split tensor-core form for launches that can see at least this many keys,
  // else form 1 (depth 32768: 12B 296.0 vs 278.0 tok/s, 31B 133.4 vs 126.4; wins at 4096 too).
  int attn_split_min_keys = 4096;
  // Keys per tile × stages of the split form: 0 = 16×3, 1 = 16×4, 2 = 32×2, 3 = 32×3. With the
  // shared K/V rows the 16-key shapes fit two blocks per SM; 16×4 was the fastest of the four.
  int attn_split_shape = 1;
  // Decode blocks whose key range does not hold the token's position issue their first K/V
  // copies before pdl_wait (what made the split form win at depth 4096).
  bool attn_early_kv = true;
  // Full-layer decode blocks per SM (the split count over the KV heads): 1, 3 and 4 were slower.
  int splits_per_sm = 2;
  // Output elements per merge block: 0 = the rule (32 above 128 splits, else 64), or 32 or 64.
  int merge_chunk = 0;

  // ---- decode graphs (forward_cuda.cu) ----
  // One decode graph per bucket of positions, so that a short conversation in a long context
  // does not pay for the splits of the whole length (12B at depth 0 in a 32,896-position context:
  // 335.0 tok/s with buckets from 1024, 328.7 from 256, 315.8 without).
  bool decode_buckets = true;
  int decode_bucket_min = 1024;

  // ---- test hooks ----
  // checkpoint() behaves as if its device allocation failed.
  bool fail_checkpoint_alloc = false;
};

// The record every launcher uses when the caller passes none.
inline const CudaTuning kDefaultTuning{};

// The defaults with the overrides a benchmark sweeps, read through `get` (std::getenv by
// default): GEM_CUDA_PDL (0, prefill, 1), GEM_CUDA_RES_CLUSTER (1, 2, 4, 8),
// GEM_CUDA_SPLITS_PER_SM (1-8), GEM_CUDA_ATTN_SPLIT_SHAPE (0-3). A value out of range is
// reported on stderr and the default kept.
CudaTuning tuning_from_env(const std::function<const char*(const char*)>& get = {});

// One line per field, "name = value".
std::string describe(const CudaTuning& t);

}  // namespace gem::cuda
