// matmul_ref (the specification), get_row, the activation rounding shared by every fast kernel,
// the portable scalar tiles, and the threaded driver that splits rows and tiles tokens.
#include "backend/cpu/matmul.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/isa.h"
#include "backend/cpu/simd_kernels.h"
#include "base/check.h"
#include "base/quant.h"
#include "base/timer.h"

namespace gem::cpu {
namespace {

using detail::QuantizedX;
using detail::TileFn;

inline float half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return fp16_to_f32(h);
}

// Rows decode through base/quant's bit-exact decoders (one f32 product per value).
void dequant_row(const model::TensorView& w, int64_t row, float* out) {
  GEM_CHECK(can_dequantize(w.type), "get_row(%.*s): dtype %.*s is not supported",
            static_cast<int>(w.name.size()), w.name.data(),
            static_cast<int>(dtype_name(w.type).size()), dtype_name(w.type).data());
  const uint8_t* p = w.data + static_cast<uint64_t>(row) * w.row_bytes();
  dequantize_row(w.type, p, out, w.cols);
}

void check_matmul_args(const model::TensorView& w, int n_tokens) {
  GEM_CHECK(matmul_supports(w.type), "matmul(%.*s): dtype %.*s, expected F32, Q4_0, Q8_0 or Q6_K",
            static_cast<int>(w.name.size()), w.name.data(),
            static_cast<int>(dtype_name(w.type).size()), dtype_name(w.type).data());
  GEM_CHECK(n_tokens >= 0 && w.rows >= 0 && w.cols >= 0, "matmul(%.*s): negative extent",
            static_cast<int>(w.name.size()), w.name.data());
  const int64_t blk = w.type == DType::kQ6_K ? kQK_K : (w.type == DType::kF32 ? 1 : 32);
  GEM_CHECK(w.cols % blk == 0, "matmul(%.*s): cols %lld not a multiple of the block %lld",
            static_cast<int>(w.name.size()), w.name.data(), static_cast<long long>(w.cols),
            static_cast<long long>(blk));
}

// ---- Activation rounding (matmul.h: Q8_0-style for 32-blocks, Q8_K-style for Q6_K) ----

// One 32-value block: d = amax/127 rounded to fp16; q = nearest-even(x·127/amax).
inline float quantize_block32(const float* x, int8_t* q) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  for (int j = 0; j < 32; ++j) {
    // nearbyint rounds to nearest even under the default rounding mode, like cvtps2dq.
    q[j] = static_cast<int8_t>(std::clamp(static_cast<int>(std::nearbyint(x[j] * id)), -127, 127));
  }
  return fp16_to_f32(f32_to_fp16(amax / 127.0f));
}


// One 256-value block, as llama.cpp's quantize_row_q8_K_ref: m = the value of largest |x|,
// q = nearest-even(x·(-127/m)) (at most 127), d = 1/(-127/m).
inline float quantize_block256(const float* x, int8_t* q, int16_t* bsums) {
  float amax = 0.0f, m = 0.0f;
  for (int j = 0; j < 256; ++j) {
    const float ax = std::fabs(x[j]);
    if (ax > amax) {
      amax = ax;
      m = x[j];
    }
  }
  if (amax == 0.0f) {
    std::memset(q, 0, 256);
    std::memset(bsums, 0, 16 * sizeof(int16_t));
    return 0.0f;
  }
  const float iscale = -127.0f / m;
  for (int j = 0; j < 256; ++j) {
    q[j] = static_cast<int8_t>(std::min(127, static_cast<int>(std::nearbyint(iscale * x[j]))));
  }
  for (int g = 0; g < 16; ++g) {
    int s = 0;
    for (int j = 0; j < 16; ++j) s += q[g * 16 + j];
    bsums[g] = static_cast<int16_t>(s);
  }
  return 1.0f / iscale;
}

// Buffers for the rounded x, grown once and kept per calling thread (nothing allocated per call
// in steady state).
struct XBuffers {
  std::vector<int8_t> qs;
  std::vector<float> d;
  std::vector<int16_t> bsums;
  std::vector<int32_t> neg_corr;
  std::vector<detail::Q4PairX> pairs;
};
thread_local XBuffers t_xbuf;

// simd: the path's vector rounding of 32-value blocks, or null (same bits either way).
void quantize_token(DType wt, const float* x, int64_t cols, int8_t* qs, float* d, int16_t* bs,
                    detail::QuantizeFn simd) {
  if (wt == DType::kQ6_K) {
    for (int64_t b = 0; b < cols / 256; ++b) {
      d[b] = quantize_block256(x + 256 * b, qs + 256 * b, bs + 16 * b);
    }
    return;
  }
  if (simd != nullptr) {
    simd(x, cols / 32, qs, d);
    return;
  }
  for (int64_t b = 0; b < cols / 32; ++b) d[b] = quantize_block32(x + 32 * b, qs + 32 * b);
}

// What one matmul runs: the tile on the file's layout or on the packed one, the activation
// rounding, and which extra x records the tile reads.
struct Kernels {
  detail::TileFn tile = nullptr;
  detail::PackedTileFn packed = nullptr;  // set: run on the PackedMatrix
  detail::QuantizeFn quantize = nullptr;
  bool pairs = false;                     // the AVX2 Q4_0 tile's Q4PairX records
  int chunk_align = 4;                    // token chunks a multiple of this (the tile's width)
};

// The one table from (path, weight type, packed copy available) to kernels.
Kernels select_kernels(Isa isa, DType t, bool have_packed) {
  Kernels k;
  switch (isa) {
#ifdef GEM_CPU_X86
    case Isa::kAvx512:
      k.packed = have_packed ? detail::avx512_packed_fn(t) : nullptr;
      k.tile = detail::avx2_tile_fn(t);
      k.quantize = detail::avx2_quantize_q8;
      break;
    case Isa::kAmx:  // AVX-512, with tile products for token ranges of 16 and more (Q4_0, Q8_0)
      k.packed = have_packed ? detail::amx_packed_fn(t) : nullptr;
      k.tile = detail::avx2_tile_fn(t);
      k.quantize = detail::avx2_quantize_q8;
      if (k.packed != nullptr) {
        k.chunk_align = 16;
      } else if (have_packed) {
        k.packed = detail::avx512_packed_fn(t);
      }
      break;
    case Isa::kAvxVnni:  // AVX2, with 256-bit vpdpbusd for packed Q4_0/Q8_0
      k.packed = have_packed ? detail::avxvnni_packed_fn(t) : nullptr;
      if (k.packed == nullptr && have_packed) k.packed = detail::avx2_packed_fn(t);
      k.tile = detail::avx2_tile_fn(t);
      k.quantize = detail::avx2_quantize_q8;
      break;
    case Isa::kAvx2:
      k.packed = have_packed ? detail::avx2_packed_fn(t) : nullptr;
      k.tile = detail::avx2_tile_fn(t);
      k.quantize = detail::avx2_quantize_q8;
      break;
#endif
#ifdef GEM_CPU_NEON
    case Isa::kNeon:
      k.tile = detail::neon_tile_fn(t);
      break;
#endif
    default:
      break;
  }
  if (k.tile == nullptr) k.tile = detail::scalar_tile_fn(t);
  k.pairs = k.packed == nullptr && t == DType::kQ4_0 &&
            (isa == Isa::kAvx2 || isa == Isa::kAvxVnni || isa == Isa::kAvx512 || isa == Isa::kAmx);
  return k;
}

// One token's Q4_0 pair records (simd_kernels.h) from its rounded blocks.
void build_q4_pairs(const int8_t* qs, const float* d, int64_t n_blocks, detail::Q4PairX* out) {
  for (int64_t p = 0; p < (n_blocks + 1) / 2; ++p) {
    detail::Q4PairX& r = out[p];
    std::memset(&r, 0, sizeof(r));
    for (int64_t h = 0; h < 2 && 2 * p + h < n_blocks; ++h) {
      const int64_t b = 2 * p + h;
      std::memcpy(r.lo + 16 * h, qs + 32 * b, 16);
      std::memcpy(r.hi + 16 * h, qs + 32 * b + 16, 16);
      int sum = 0;
      for (int j = 0; j < 32; ++j) sum += qs[32 * b + j];
      r.corr[4 * h] = 8 * sum;
      for (int j = 0; j < 4; ++j) r.d[4 * h + j] = d[b];
    }
  }
}

QuantizedX quantize_x(DType wt, const float* x, int64_t cols, int n_tokens, ThreadPool& pool,
                      const Kernels& kern) {
  QuantizedX q;
  q.cols = cols;
  if (wt == DType::kF32) {
    q.xf = x;
    q.n_blocks = 0;
    return q;
  }
  const int64_t block = wt == DType::kQ6_K ? 256 : 32;
  q.n_blocks = cols / block;
  XBuffers& buf = t_xbuf;
  const size_t n = static_cast<size_t>(n_tokens);
  if (buf.qs.size() < n * cols) buf.qs.resize(n * cols);
  if (buf.d.size() < n * q.n_blocks) buf.d.resize(n * q.n_blocks);
  if (buf.bsums.size() < n * (cols / 16)) buf.bsums.resize(n * (cols / 16));
  const bool pairs = kern.pairs;
  const bool corr = kern.packed != nullptr;
  // Packed kernels' integer offsets, per 32-value block (Q4_0, Q8_0) or 16-value group (Q6_K).
  const bool q6 = wt == DType::kQ6_K;
  const int64_t n_corr = q6 ? cols / 16 : q.n_blocks;
  if (corr && buf.neg_corr.size() < n * n_corr) buf.neg_corr.resize(n * n_corr);
  const int corr_shift = wt == DType::kQ4_0 ? 3 : 7;  // -8·Σq or -128·Σq (packed.h)
  const int64_t np = pairs ? (q.n_blocks + 1) / 2 : 0;
  if (buf.pairs.size() < n * np) buf.pairs.resize(n * np);
  int8_t* qs = buf.qs.data();
  float* d = buf.d.data();
  int16_t* bs = buf.bsums.data();
  detail::Q4PairX* pr = buf.pairs.data();
  int32_t* nc = buf.neg_corr.data();
  const int64_t nb = q.n_blocks;
  auto rows = [&](int64_t t0, int64_t t1, int) {
    for (int64_t t = t0; t < t1; ++t) {
      quantize_token(wt, x + t * cols, cols, qs + t * cols, d + t * nb, bs + t * (cols / 16),
                     kern.quantize);
      if (pairs) build_q4_pairs(qs + t * cols, d + t * nb, nb, pr + t * np);
      if (corr && q6) {
        // -32·Σq per group: the codes' offset (code - 32), the Q6_K kernel's start value.
        for (int64_t gi = 0; gi < n_corr; ++gi) nc[t * n_corr + gi] = -32 * bs[t * n_corr + gi];
      } else if (corr) {
        for (int64_t b = 0; b < nb; ++b) {
          const int8_t* qb = qs + t * cols + 32 * b;
          int sum = 0;
          for (int j = 0; j < 32; ++j) sum += qb[j];
          nc[t * nb + b] = -(sum * (1 << corr_shift));
        }
      }
    }
  };
  // One token of a few thousand values takes a few microseconds: not worth waking the pool.
  if (n_tokens == 1) {
    rows(0, 1, 0);
  } else {
    pool.parallel_for(n_tokens, rows);
  }
  q.qs = qs;
  q.d = d;
  q.bsums = bs;
  if (pairs) {
    q.q4_pairs = pr;
    q.n_pairs = np;
  }
  if (corr) q.neg_corr = nc;
  return q;
}

// ---- Portable scalar tiles: the same integer arithmetic as the SIMD kernels ----

void scalar_tile_f32(const model::TensorView& w, const QuantizedX& x, int64_t r0, int64_t r1,
                     int t0, int t1, float* y, int64_t ldy) {
  const float* wf = w.f32();
  for (int t = t0; t < t1; ++t) {
    const float* xt = x.xf + t * x.cols;
    for (int64_t r = r0; r < r1; ++r) {
      const float* wr = wf + r * w.cols;
      float acc[8] = {};
      int64_t c = 0;
      for (; c + 8 <= w.cols; c += 8) {
        for (int j = 0; j < 8; ++j) acc[j] += wr[c + j] * xt[c + j];
      }
      for (; c < w.cols; ++c) acc[0] += wr[c] * xt[c];
      float s = 0.0f;
      for (float a : acc) s += a;
      y[t * ldy + r] = s;
    }
  }
}

template <bool kQ4>
void scalar_tile_q32(const model::TensorView& w, const QuantizedX& x, int64_t r0, int64_t r1,
                     int t0, int t1, float* y, int64_t ldy) {
  const uint64_t rb = w.row_bytes();
  const int64_t bb = kQ4 ? sizeof(BlockQ4_0) : sizeof(BlockQ8_0);
  for (int t = t0; t < t1; ++t) {
    const int8_t* xq = x.qs + t * x.cols;
    const float* xd = x.d + t * x.n_blocks;
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t* row = w.data + r * rb;
      float acc = 0.0f;
      for (int64_t b = 0; b < x.n_blocks; ++b) {
        const uint8_t* blk = row + b * bb;
        const int8_t* q = xq + 32 * b;
        int isum = 0;
        if constexpr (kQ4) {
          for (int j = 0; j < 16; ++j) {
            isum += ((blk[2 + j] & 0x0F) - 8) * q[j] + ((blk[2 + j] >> 4) - 8) * q[j + 16];
          }
        } else {
          const int8_t* wq = reinterpret_cast<const int8_t*>(blk + 2);
          for (int j = 0; j < 32; ++j) isum += wq[j] * q[j];
        }
        acc += half(blk) * xd[b] * static_cast<float>(isum);
      }
      y[t * ldy + r] = acc;
    }
  }
}

void scalar_tile_q6_k(const model::TensorView& w, const QuantizedX& x, int64_t r0, int64_t r1,
                      int t0, int t1, float* y, int64_t ldy) {
  const uint64_t rb = w.row_bytes();
  for (int t = t0; t < t1; ++t) {
    const int8_t* xq = x.qs + t * x.cols;
    const float* xd = x.d + t * x.n_blocks;
    const int16_t* xs = x.bsums + t * (x.cols / 16);
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t* row = w.data + r * rb;
      float acc = 0.0f;
      for (int64_t b = 0; b < x.n_blocks; ++b) {
        BlockQ6_K blk;
        std::memcpy(&blk, row + b * sizeof(BlockQ6_K), sizeof(blk));
        const int8_t* q = xq + 256 * b;
        // Σ_g sc_g Σ_i code_i q_i  -  32 Σ_g sc_g bsum_g  =  Σ_i sc (code_i - 32) q_i, exactly.
        int isum = 0;
        for (int g = 0; g < 16; ++g) {
          int gsum = 0;
          for (int j = 0; j < 16; ++j) gsum += q6k_code(blk, 16 * g + j) * q[16 * g + j];
          isum += blk.scales[g] * (gsum - 32 * xs[16 * b + g]);
        }
        acc += fp16_to_f32(blk.d) * xd[b] * static_cast<float>(isum);
      }
      y[t * ldy + r] = acc;
    }
  }
}

// ---- The threaded driver ----

// Rows per work unit: a unit's weights (16 rows × at most ~12 KB) stay in L2 while every token
// tile of a chunk passes over them. Each chunk of tokens streams the thread's share of the
// weights from DRAM once, and each unit's first token tile waits on that stream, so chunks are
// long: up to 1 MiB of rounded x (read from L3 once per unit; the 4-token tile in use stays in
// L2) and 128 tokens. Measured on the 12B's Q4_0 shapes at 512 tokens, 2 threads
// (gem_cpu_matmul_bench): ffn_gate/up 445-470 -> 398-431 ms, ffn_down 435-523 -> 367-397 ms
// against 256 KiB / 64-token chunks; 512 KiB was in between, 2 MiB / 256 tokens no better.
constexpr int64_t kRowUnit = 16;
constexpr int64_t kXChunkBytes = 1024 * 1024;
constexpr int64_t kMaxChunkTokens = 128;

void run_matmul(const model::TensorView& w, const float* x, int n_tokens, float* y,
                ThreadPool& pool, const Kernels& kern, const PackedMatrix* packed) {
  check_matmul_args(w, n_tokens);
  if (n_tokens == 0 || w.rows == 0) return;
  const QuantizedX qx = quantize_x(w.type, x, w.cols, n_tokens, pool, kern);
  const int64_t rows = w.rows;
  // Bytes of rounded x a tile reads per token: the Q4PairX records are 2 per value.
  const int64_t x_bytes_per_token =
      w.type == DType::kF32 ? 4 * w.cols : (qx.q4_pairs != nullptr ? 2 * w.cols : w.cols);
  // A multiple of the tile's width in tokens (4; AMX: 16), so that every chunk but the last
  // runs full tiles.
  const int align = kern.chunk_align;
  const int chunk = static_cast<int>(
      std::clamp<int64_t>(kXChunkBytes / std::max<int64_t>(1, x_bytes_per_token), align,
                          kMaxChunkTokens) / align * align);
  // Rows [u·16, (u+1)·16) for u in [u0, u1): one packed group or 16 rows of the file's layout.
  auto run_units = [&](int64_t u0, int64_t u1, int t0, int t1) {
    if (kern.packed != nullptr) {
      kern.packed(*packed, qx, u0, u1, t0, t1, y, rows);
      return;
    }
    for (int64_t u = u0; u < u1; ++u) {
      kern.tile(w, qx, u * kRowUnit, std::min(rows, (u + 1) * kRowUnit), t0, t1, y, rows);
    }
  };
  static_assert(kRowUnit == kPackRows, "a work unit is one packed group");
  const int64_t n_units = (rows + kRowUnit - 1) / kRowUnit;
  if (n_units >= pool.size() || n_tokens < 2 * pool.size()) {
    // Split rows: every thread streams its own share of the weights once per token chunk.
    pool.parallel_for(n_units, [&](int64_t u0, int64_t u1, int) {
      for (int t0 = 0; t0 < n_tokens; t0 += chunk) {
        const int t1 = std::min(n_tokens, t0 + chunk);
        for (int64_t u = u0; u < u1; ++u) run_units(u, u + 1, t0, t1);
      }
    });
  } else {
    // Few rows, many tokens: split the tokens instead.
    pool.parallel_for(n_tokens, [&](int64_t t0, int64_t t1, int) {
      run_units(0, n_units, static_cast<int>(t0), static_cast<int>(t1));
    });
  }
}

}  // namespace

namespace detail {

TileFn scalar_tile_fn(DType t) {
  switch (t) {
    case DType::kF32:
      return scalar_tile_f32;
    case DType::kQ4_0:
      return scalar_tile_q32<true>;
    case DType::kQ8_0:
      return scalar_tile_q32<false>;
    case DType::kQ6_K:
      return scalar_tile_q6_k;
    default:
      return nullptr;
  }
}

}  // namespace detail

float round_block_q8(const float* x, int8_t* q) { return quantize_block32(x, q); }

bool has_packed_kernel(Isa isa, DType t) {
  return isa_supported(isa) && select_kernels(isa, t, true).packed != nullptr;
}

bool matmul_supports(DType t) {
  return t == DType::kF32 || t == DType::kQ4_0 || t == DType::kQ8_0 || t == DType::kQ6_K;
}

void matmul_ref(const model::TensorView& w, const float* x, int n_tokens, float* y) {
  check_matmul_args(w, n_tokens);
  std::vector<float> row(static_cast<size_t>(w.cols));
  for (int64_t r = 0; r < w.rows; ++r) {
    dequant_row(w, r, row.data());
    for (int t = 0; t < n_tokens; ++t) {
      const float* xt = x + static_cast<int64_t>(t) * w.cols;
      double acc = 0.0;
      for (int64_t c = 0; c < w.cols; ++c) acc += static_cast<double>(row[c]) * xt[c];
      y[static_cast<int64_t>(t) * w.rows + r] = static_cast<float>(acc);
    }
  }
}

void get_row(const model::TensorView& w, int64_t row, float* out) {
  GEM_CHECK(row >= 0 && row < w.rows, "get_row(%.*s): row %lld outside [0, %lld)",
            static_cast<int>(w.name.size()), w.name.data(), static_cast<long long>(row),
            static_cast<long long>(w.rows));
  dequant_row(w, row, out);
}

namespace {
void round_activations_impl(DType weight_type, const float* x, int64_t cols, float* out,
                            detail::QuantizeFn simd) {
  if (weight_type == DType::kF32) {
    std::memcpy(out, x, static_cast<size_t>(cols) * sizeof(float));
    return;
  }
  const int64_t block = weight_type == DType::kQ6_K ? 256 : 32;
  GEM_CHECK(cols % block == 0, "round_activations: cols %lld not a multiple of %lld",
            static_cast<long long>(cols), static_cast<long long>(block));
  std::vector<int8_t> q(static_cast<size_t>(cols));
  std::vector<float> d(static_cast<size_t>(cols / block));
  std::vector<int16_t> bs(static_cast<size_t>(cols / 16));
  quantize_token(weight_type, x, cols, q.data(), d.data(), bs.data(), simd);
  for (int64_t i = 0; i < cols; ++i) out[i] = static_cast<float>(q[i]) * d[i / block];
}
}  // namespace

void round_activations(DType weight_type, const float* x, int64_t cols, float* out) {
  round_activations_impl(weight_type, x, cols, out, nullptr);
}

void round_activations_simd(DType weight_type, const float* x, int64_t cols, float* out) {
  round_activations_impl(weight_type, x, cols, out,
                         select_kernels(active_isa(), weight_type, false).quantize);
}

std::string_view matmul_isa() { return isa_name(active_isa()); }

void matmul_on(Isa isa, const model::TensorView& w, const float* x, int n_tokens, float* y,
               ThreadPool& pool, const PackedMatrix* packed) {
  GEM_CHECK(isa_supported(isa), "matmul: path %s is not supported on this CPU",
            std::string(isa_name(isa)).c_str());
  const bool have_packed = packed != nullptr && packed->type == w.type && packed->rows == w.rows &&
                           packed->cols == w.cols;
  run_matmul(w, x, n_tokens, y, pool, select_kernels(isa, w.type, have_packed), packed);
}

void matmul_scalar(const model::TensorView& w, const float* x, int n_tokens, float* y,
                   ThreadPool& pool) {
  matmul_on(Isa::kScalar, w, x, n_tokens, y, pool, nullptr);
}

void matmul(const model::TensorView& w, const float* x, int n_tokens, float* y, ThreadPool& pool,
            const PackedMatrix* packed) {
  matmul_on(active_isa(), w, x, n_tokens, y, pool, packed);
}

}  // namespace gem::cpu
