// The n-token products' launchers: which kernel serves which n, the groups above the largest n a
// kernel takes, and the fallbacks (one token: matvec; F32 weights: matvec over n tokens).
//
// The kernels (both read every weight byte once per launch):
//   dp4a (matmul_n_dp4a.cu): matvec widened to 2, 4 or 8 tokens; q8 activations, integer dot
//     products, the same per-block arithmetic as matvec, so its results equal matvec's up to the
//     order of float additions. Its cost grows by a dp4a chain and an activation read per token.
//   mma (matmul_n_mma.cu): tensor cores, up to 32 tokens per launch, nearly flat in n up to 8;
//     weights dequantised to f16 in registers, x rounded to f16 (not q8: more accurate, and no
//     per-block epilogue).
// The choice (choose() below) is the fastest measured on the H200 for the 12B and 31B products
// (bench/cuda/matmul_n_bench.cu; the figures are in bench/results/matmul_n.md). One forward's
// products, 12B (31B), against 1.87 ms (4.94 ms) for one token's matvecs:
//   n = 2: dp4a, 2.39 ms = 1.28x (5.86 ms = 1.19x); mma 3.35 ms. Wide dp4a form (4 rows a
//          warp) for Q4_0 matrices of 4096 rows or more: fewer blocks only hurt the 3840-row ones.
//   n = 3-4: dp4a wide, 3.15 ms = 1.68x (7.12 ms = 1.44x); mma 3.44 ms (7.81 ms). The gated
//          pair from 3 tokens on mma (gate|up at 3: 26.2 against 30.3 us).
//   n = 5-8: mma, 3.55 ms = 1.90x (8.07 ms = 1.63x) at 8; dp4a 6.27 ms. (Five to seven tokens
//          cost dp4a what eight do: its kernel is instantiated for 2, 4 and 8.)
//   n = 9-16: mma, 4.77 ms = 2.55x (10.19 ms = 2.06x) at 16.
//   n = 17-32: mma with x one chunk ahead (form 1: the form with x three chunks ahead needs
//          66 KB of shared memory at 32 tokens and ran 1.3-2.4x slower), 6.51 ms = 3.48x
//          (15.10 ms = 3.06x) at 32.
//   The tile path (dequantise to f16 + cuBLAS) costs 23.0-23.9 ms (57.6-59.6 ms) for any n up
//   to 64, the matvec once per token n x 1.87 ms: at 64 tokens (two groups of 32) these
//   products measured 18.2 ms against cuBLAS 23.9 (39.6 against 59.6) with the first split
//   rule, so kMaxN = 64 (about 96 for the 12B and 120 for the 31B by extrapolation; not
//   measured).
#include "backend/cuda/matmul_n.cuh"

#include <algorithm>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/matmul_n_parts.cuh"
#include "backend/cuda/matvec.cuh"
#include "backend/cuda/norm.cuh"
#include "base/check.h"

namespace gem::cuda {
namespace {

// The crossover with the tile path (above).
constexpr int kMaxN = 64;
// The mma form with x copied one chunk ahead (matmul_n_mma_*.cu), for more than 16 tokens and
// for Q6_K (where it was the fastest at every n: 894 against 911 us at 8 tokens, 12B head).
constexpr int kMmaFormNear = 1;
// Q4_0 matrices from this many rows take dp4a's wide form at 2 tokens.
constexpr int64_t kDp4aWideMinRows = 4096;

bool split_type(WType t) { return t == WType::kQ4_0 || t == WType::kQ8_0; }

struct Choice {
  MatmulNKernel kernel;
  int form;
};
// The kernel and form for n ≥ 2 tokens (the file's opening comment says why).
Choice choose(const DevMatrix& w, int n, bool gated) {
  if (w.type == WType::kQ6_K) return {MatmulNKernel::kMma, kMmaFormNear};
  if (w.cols % 128 != 0) return {MatmulNKernel::kDp4a, 0};
  if (n <= (gated ? 2 : 4)) {
    const bool wide = !gated && (n > 2 || (w.type == WType::kQ4_0 && w.rows >= kDp4aWideMinRows));
    return {MatmulNKernel::kDp4a, wide ? 1 : 0};
  }
  return {MatmulNKernel::kMma, n > 16 ? kMmaFormNear : 0};
}

// Calls launch(g) for the tokens in groups of at most `group` (g: the group's arguments).
template <typename F>
void in_groups(const mmn::NArgs& a, int group, F&& launch_group) {
  const int n = a.n;
  const int64_t cols = a.cols;
  for (int t0 = 0; t0 < n; t0 += group) {
    mmn::NArgs g = a;
    g.n = std::min(group, n - t0);
    if (a.x) g.x = a.x + t0 * cols;
    if (a.xq.q) g.xq.q = a.xq.q + t0 * cols;
    if (a.xq.ds) g.xq.ds = a.xq.ds + t0 * cols / 32;
    g.y = a.y + t0 * a.rows;
    if (a.yq.q) g.yq = Q8Act{a.yq.q + t0 * a.rows, a.yq.ds + t0 * a.rows / 32};
    launch_group(g);
  }
}

// Runs `k` over the tokens in groups of at most the kernel's largest n.
void run(MatmulNKernel k, int split, const mmn::NArgs& a, cudaStream_t s) {
  if (k == MatmulNKernel::kDp4a) {
    in_groups(a, mmn::kDp4aMaxN, [&](const mmn::NArgs& g) { mmn::launch_dp4a(g, s); });
  } else {
    in_groups(a, mmn::kMmaMaxN, [&](const mmn::NArgs& g) { mmn::launch_mma(g, split, s); });
  }
}

mmn::NArgs args_of(const DevMatrix& w, const DevMatrix* up, const float* x, Q8Act xq, int n,
                   float* y, float cap, const CudaTuning& t) {
  mmn::NArgs a;
  a.type = w.type;
  a.n_mats = up ? 2 : 1;
  a.q[0] = w.type == WType::kQ6_K ? w.raw : w.qs;
  a.d[0] = w.d;
  if (up) {
    a.q[1] = up->qs;
    a.d[1] = up->d;
  }
  a.rows = w.rows;
  a.cols = static_cast<int>(w.cols);
  a.x = x;
  a.xq = xq;
  a.n = n;
  a.y = y;
  a.cap = up ? 0.0f : cap;
  a.evict_first = t.mv_evict_first;
  a.preload = t.mv_preload;
  return a;
}

}  // namespace

namespace mmn {

int launch_mma(const NArgs& a, int split, cudaStream_t s) {
  int used = 0;
  switch (a.type) {
    case WType::kQ4_0: used = launch_mma_q4_0(a, split, s); break;
    case WType::kQ8_0: used = launch_mma_q8_0(a, split, s); break;
    default: used = launch_mma_q6_k(a, split, s); break;
  }
  GEM_CUDA_LAUNCHED();
  return used;
}

}  // namespace mmn

bool matmul_n_supports(MatmulNKernel k, const DevMatrix& w) {
  switch (k) {
    case MatmulNKernel::kDp4a: return split_type(w.type);
    case MatmulNKernel::kMma:
      return (split_type(w.type) || w.type == WType::kQ6_K) && w.cols % 128 == 0;
    default: return true;
  }
}

int matmul_n_forms(MatmulNKernel k) {
  switch (k) {
    case MatmulNKernel::kDp4a: return mmn::kDp4aForms;
    case MatmulNKernel::kMma: return mmn::kMmaForms;
    default: return 1;
  }
}

void matmul_n_variant(const MatmulNVariant& v, const DevMatrix& w, const DevMatrix* up,
                      const float* x, Q8Act xq, int n, float* y, float cap, cudaStream_t s,
                      const CudaTuning& t) {
  MatmulNKernel k = v.kernel;
  GEM_CHECK(n >= 1, "matmul_n: n = %d", n);
  GEM_CHECK(w.cols % 32 == 0 && (w.type != WType::kQ6_K || w.cols % 256 == 0),
            "matmul_n: %lld columns", static_cast<long long>(w.cols));
  if (up) {
    GEM_CHECK(split_type(w.type) && up->type == w.type && up->rows == w.rows &&
                  up->cols == w.cols,
              "matmul_n_gated: gate and up must be Q4_0 or Q8_0 of one type and shape");
  }
  if (w.type == WType::kF32) {
    GEM_CHECK(!up, "matmul_n_gated: F32 weights");
    matvec(w, x, xq, n, y, cap, s, t);
    return;
  }
  mmn::NArgs a = args_of(w, up, x, xq, n, y, cap, t);
  a.form = v.form;
  if (k == MatmulNKernel::kAuto) {
    if (n == 1 && (!up || w.type == WType::kQ4_0)) {
      // One token: the decode kernels.
      if (up) {
        matvec_gated(w, *up, xq, 1, y, s, t);
      } else {
        matvec(w, x, xq, 1, y, cap, s, t);
      }
      return;
    }
    const Choice c = choose(w, std::max(n, 2), up != nullptr);
    k = c.kernel;
    a.form = c.form;
  }
  GEM_CHECK(matmul_n_supports(k, w), "matmul_n: kernel %d cannot run this product",
            static_cast<int>(k));
  GEM_CHECK(a.form >= 0 && a.form < matmul_n_forms(k), "matmul_n: form %d", a.form);
  run(k, v.split, a, s);
}

void matmul_n(const DevMatrix& w, const float* x, Q8Act xq, int n, float* y, float cap,
              cudaStream_t s, const CudaTuning& t) {
  matmul_n_variant({}, w, nullptr, x, xq, n, y, cap, s, t);
}

void matmul_n_gated(const DevMatrix& gate, const DevMatrix& up, const float* x, Q8Act xq, int n,
                    float* g, cudaStream_t s, const CudaTuning& t) {
  matmul_n_variant({}, gate, &up, x, xq, n, g, 0.0f, s, t);
}

namespace {

// The rows pass's dp4a form (where the tensor-core form does not apply): as choose() up to 2
// rows, four rows a warp from 3. (Eight rows a warp measured slower at 8 rows on the 12B's
// matrices — 120 to 512 blocks for 3840 to 8192 rows: down 673 GB/s, qkv 816, attn_out
// 439-561 — bench/results/matmul_n.md.)
int rows_form(const DevMatrix& w, int n, bool gated) {
  if (n <= 2) return !gated && w.type == WType::kQ4_0 && w.rows >= kDp4aWideMinRows ? 1 : 0;
  return 1;
}

// Rows passes of up to this many rows take dp4a, more the tensor-core kernel: measured on the H200
// (12B, bench/results/batched.md run 27, batched decode S_TG) at 2 rows 514 (dp4a) against 454, at 4
// rows 799 against 866.
constexpr int kRowsDp4aMaxN = 2;

// The rows pass's Q4_0/Q8_0 products: the tensor-core kernel (matmul_rows_mma.cu) from
// kRowsDp4aMaxN + 1 rows (from 2 when `mma`) where its shape and alignment rules hold, else dp4a;
// both are matvec's arithmetic.
// With a.yq set (the gated pair), y's q8 copy as well: from the tensor-core kernel where it
// writes it, else by quantize_q8 after it.
void run_rows(mmn::NArgs a, const DevMatrix& w, bool gated, bool mma, cudaStream_t s) {
  bool q8_done = false;
  if ((mma || a.n > kRowsDp4aMaxN) && mmn::rows_mma_supports(a)) {
    q8_done = a.yq.q != nullptr;
    in_groups(a, mmn::kRowsMmaMaxN,
              [&](const mmn::NArgs& g) { q8_done = mmn::launch_rows_mma(g, s) && q8_done; });
  } else {
    a.form = rows_form(w, std::min(a.n, mmn::kDp4aMaxN), gated);
    run(MatmulNKernel::kDp4a, 0, a, s);
  }
  if (a.yq.q && !q8_done) quantize_q8(a.y, a.n, static_cast<int>(a.rows), a.yq, s);
}

}  // namespace

void matmul_rows_variant(bool mma, const DevMatrix& w, const DevMatrix* up, const float* x,
                         Q8Act xq, int n, float* y, float cap, cudaStream_t s,
                         const CudaTuning& t, Q8Act yq) {
  if (up) {
    GEM_CHECK(w.type == WType::kQ4_0 && up->type == WType::kQ4_0 && up->rows == w.rows &&
                  up->cols == w.cols,
              "matmul_rows_gated: gate and up must be Q4_0 of one shape");
    if (n == 1) {
      matvec_gated(w, *up, xq, 1, y, s, t);
      if (yq.q) quantize_q8(y, 1, static_cast<int>(w.rows), yq, s);
      return;
    }
  } else if (n == 1 || !split_type(w.type)) {
    matvec(w, x, xq, n, y, cap, s, t);  // the decode kernel (over n tokens for Q6_K and F32)
    return;
  }
  mmn::NArgs a = args_of(w, up, x, xq, n, y, cap, t);
  if (up) a.yq = yq;
  run_rows(a, w, up != nullptr, mma, s);
}

void matmul_rows(const DevMatrix& w, const float* x, Q8Act xq, int n, float* y, float cap,
                 cudaStream_t s, const CudaTuning& t) {
  matmul_rows_variant(false, w, nullptr, x, xq, n, y, cap, s, t);
}

void matmul_rows_gated(const DevMatrix& gate, const DevMatrix& up, Q8Act xq, int n, float* g,
                       Q8Act gq, cudaStream_t s, const CudaTuning& t) {
  matmul_rows_variant(false, gate, &up, nullptr, xq, n, g, 0.0f, s, t, gq);
}

bool matmul_n_reads_q8(const DevMatrix& w, int n, bool gated) {
  if (n == 1) return matvec_reads_q8(w.type);  // matvec
  if (!split_type(w.type)) return false;
  return choose(w, n, gated).kernel == MatmulNKernel::kDp4a;
}

int matmul_n_max() { return kMaxN; }

}  // namespace gem::cuda
