// Launchers of the n-token products (2 ≤ n ≤ matmul_n_max()): each quantised weight is read once
// for all n tokens, the shape of speculative verification (n tokens of one sequence) and of
// batched decode (one token of n sequences). matmul_n.cu says which kernel serves which n, and why.
#pragma once

#include <cuda_runtime.h>

#include "backend/cuda/types.cuh"

namespace gem::cuda {

// y[t, r] = Σ_c W[r, c]·x[t, c] for t < n, r < w.rows; with cap > 0 soft-capped, cap·tanh(y/cap)
// (the output head). x: [n, cols] f32; xq: its q8 copy ([n, cols] int8 + [n, cols/32] ds);
// y: [n, rows] f32. Which of x and xq a call reads: matmul_n_reads_q8 (the other may be null).
// Q4_0/Q8_0 (split layout) and Q6_K weights; F32 weights take matvec. Any n ≥ 1 is accepted
// (above matmul_n_max() in groups of that many tokens); cols a multiple of 32 (256 for Q6_K).
void matmul_n(const DevMatrix& w, const float* x, Q8Act xq, int n, float* y, float cap,
              cudaStream_t s, const CudaTuning& t = kDefaultTuning);
// The FFN's gate|up product: g[t, r] = gelu_tanh(gate[r]·x[t]) · (up[r]·x[t]); gate and up of one
// type, Q4_0 or Q8_0, and one shape. g: [n, gate.rows] f32.
void matmul_n_gated(const DevMatrix& gate, const DevMatrix& up, const float* x, Q8Act xq, int n,
                    float* g, cudaStream_t s, const CudaTuning& t = kDefaultTuning);

// The products of a rows pass (batch_cuda.cu): every row y[t] equals, bit for bit, what the
// decode step's product (matvec, matvec_gated) gives for that row alone, whatever n and the
// other rows are — the arithmetic of decode (block_terms.cuh: q8 activations for Q4_0/Q8_0/Q6_K,
// f32 for F32). Each weight is read once per group of up to 32 rows (Q4_0/Q8_0 from 3 rows on the
// tensor cores: matmul_rows_mma.cu; 2 rows, or where its shape rules fail, dp4a in groups of 8),
// 8 rows (Q6_K) or 16 rows (F32): matvec's kernels over several tokens.
// matmul_rows reads both x and xq; matmul_rows_gated only xq (Q4_0 gate and up, as
// matvec_gated), and with gq set also writes g's q8 copy (as quantize_q8 makes it from g: the
// down product's input; its 32-row tiles of up to 16 rows write it themselves).
void matmul_rows(const DevMatrix& w, const float* x, Q8Act xq, int n, float* y, float cap,
                 cudaStream_t s, const CudaTuning& t = kDefaultTuning);
void matmul_rows_gated(const DevMatrix& gate, const DevMatrix& up, Q8Act xq, int n, float* g,
                       Q8Act gq, cudaStream_t s, const CudaTuning& t = kDefaultTuning);

// True when matmul_n (gated = false) or matmul_n_gated (w the gate) reads the q8 copy xq for
// this weight and n, false when it reads the f32 x.
bool matmul_n_reads_q8(const DevMatrix& w, int n, bool gated = false);

// The largest n for which these products were measured to beat the tile path (dequantised f16
// weights and cuBLAS): the forward uses them for 2 ≤ n ≤ matmul_n_max(). Above 32 tokens they run
// in groups of 32 (each group reads the weights again).
int matmul_n_max();

// ---- variants, for the tests and the benchmark ----
// kDp4a: integer dot products on the q8 copy, weights in registers reused across the tokens
// (matvec's kernel widened to several tokens; any cols). kMma: tensor cores (mma.sync f16,
// weights dequantised in registers, x rounded to f16; cols a multiple of 128).
enum class MatmulNKernel { kAuto, kDp4a, kMma };
struct MatmulNVariant {
  MatmulNKernel kernel = MatmulNKernel::kAuto;
  int split = 0;  // mma: blocks per cluster along K (1-16); 0 = the kernel's rule
  int form = 0;   // the kernel's tile/pipeline shape: dp4a 0-1, mma 0-1 (matmul_n_parts.cuh)
};
// How many forms `k` has.
int matmul_n_forms(MatmulNKernel k);
// Whether `k` can run this product (weight type, cols).
bool matmul_n_supports(MatmulNKernel k, const DevMatrix& w);
// matmul_rows (up == nullptr) or matmul_rows_gated (w the gate); mma: the tensor-core kernel for
// every n ≥ 2 where it applies (else the production rule: dp4a for the fewest rows).
// yq: the gated form's q8 copy of y (as matmul_rows_gated's gq), or none.
void matmul_rows_variant(bool mma, const DevMatrix& w, const DevMatrix* up, const float* x,
                         Q8Act xq, int n, float* y, float cap, cudaStream_t s,
                         const CudaTuning& t = kDefaultTuning, Q8Act yq = {});
// matmul_n (up == nullptr) or matmul_n_gated (w the gate) on a given variant.
void matmul_n_variant(const MatmulNVariant& v, const DevMatrix& w, const DevMatrix* up,
                      const float* x, Q8Act xq, int n, float* y, float cap, cudaStream_t s,
                      const CudaTuning& t = kDefaultTuning);

}  // namespace gem::cuda
