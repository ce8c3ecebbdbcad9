// AArch64 NEON matmul tiles: one row × one token at a time, the same integer block dots as the
// AVX2 and scalar kernels (sdot where the target has the dot-product extension, else widening
// multiplies), scales applied in f32. Kept plain: it is compiled, not run, on the x86 CI.
#include "backend/cpu/simd_kernels.h"

#ifdef GEM_CPU_NEON

#include <arm_neon.h>

#include <cstring>

namespace gem::cpu::detail {
namespace {

inline float load_half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return fp16_to_f32(h);
}

// acc + Σ a·b over 16 int8 pairs, in four int32 lanes (exact).
inline int32x4_t dot16(int32x4_t acc, int8x16_t a, int8x16_t b) {
#if defined(__ARM_FEATURE_DOTPROD)
  return vdotq_s32(acc, a, b);
#else
  const int16x8_t lo = vmull_s8(vget_low_s8(a), vget_low_s8(b));
  const int16x8_t hi = vmull_high_s8(a, b);
  return vpadalq_s16(vpadalq_s16(acc, lo), hi);
#endif
}

template <bool kQ4>
float dot_q32(const uint8_t* row, const int8_t* xq, const float* xd, int64_t nb) {
  constexpr int64_t kBlockBytes = kQ4 ? sizeof(BlockQ4_0) : sizeof(BlockQ8_0);
  float32x4_t acc = vdupq_n_f32(0.0f);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = row + b * kBlockBytes;
    int8x16_t w_lo, w_hi;  // weights 0..15 and 16..31
    if constexpr (kQ4) {
      const uint8x16_t v = vld1q_u8(blk + 2);
      w_lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(0x0F))), vdupq_n_s8(8));
      w_hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(v, 4)), vdupq_n_s8(8));
    } else {
      w_lo = vld1q_s8(reinterpret_cast<const int8_t*>(blk + 2));
      w_hi = vld1q_s8(reinterpret_cast<const int8_t*>(blk + 18));
    }
    int32x4_t p = dot16(vdupq_n_s32(0), w_lo, vld1q_s8(xq + 32 * b));
    p = dot16(p, w_hi, vld1q_s8(xq + 32 * b + 16));
    acc = vfmaq_n_f32(acc, vcvtq_f32_s32(p), load_half(blk) * xd[b]);
  }
  return vaddvq_f32(acc);
}

// Q6_K: for each 16-value group g, sc_g·(Σ code·q - 32·bsum_g), summed exactly in int32.
float dot_q6_k(const uint8_t* row, const int8_t* xq, const float* xd, const int16_t* xs,
               int64_t nb) {
  const uint8x16_t m4 = vdupq_n_u8(0x0F);
  const uint8x16_t m3 = vdupq_n_u8(0x03);
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    const auto* blk = reinterpret_cast<const BlockQ6_K*>(row) + b;
    const int8_t* q = xq + 256 * b;
    int32_t isum = 0;
    for (int h = 0; h < 2; ++h) {
      for (int m = 0; m < 2; ++m) {  // l = 16m .. 16m+15 of the 32 lanes
        const uint8x16_t qla = vld1q_u8(blk->ql + 64 * h + 16 * m);
        const uint8x16_t qlb = vld1q_u8(blk->ql + 64 * h + 32 + 16 * m);
        const uint8x16_t qh = vld1q_u8(blk->qh + 32 * h + 16 * m);
        // Codes of elements 128h + 32k + 16m + i, k = 0..3 (see q6k_code in base/dtype.h).
        const uint8x16_t code[4] = {
            vorrq_u8(vandq_u8(qla, m4), vshlq_n_u8(vandq_u8(qh, m3), 4)),
            vorrq_u8(vandq_u8(qlb, m4), vshlq_n_u8(vandq_u8(vshrq_n_u8(qh, 2), m3), 4)),
            vorrq_u8(vshrq_n_u8(qla, 4), vshlq_n_u8(vandq_u8(vshrq_n_u8(qh, 4), m3), 4)),
            vorrq_u8(vshrq_n_u8(qlb, 4), vshlq_n_u8(vshrq_n_u8(qh, 6), 4)),
        };
        for (int k = 0; k < 4; ++k) {
          const int g = 8 * h + 2 * k + m;
          const int32x4_t p = dot16(vdupq_n_s32(0), vreinterpretq_s8_u8(code[k]), vld1q_s8(q + 16 * g));
          isum += blk->scales[g] * (vaddvq_s32(p) - 32 * xs[16 * b + g]);
        }
      }
    }
    acc += load_half(reinterpret_cast<const uint8_t*>(&blk->d)) * xd[b] * static_cast<float>(isum);
  }
  return acc;
}

float dot_f32(const float* w, const float* x, int64_t n) {
  float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0, a2 = a0, a3 = a0;
  int64_t c = 0;
  for (; c + 16 <= n; c += 16) {
    a0 = vfmaq_f32(a0, vld1q_f32(w + c), vld1q_f32(x + c));
    a1 = vfmaq_f32(a1, vld1q_f32(w + c + 4), vld1q_f32(x + c + 4));
    a2 = vfmaq_f32(a2, vld1q_f32(w + c + 8), vld1q_f32(x + c + 8));
    a3 = vfmaq_f32(a3, vld1q_f32(w + c + 12), vld1q_f32(x + c + 12));
  }
  float s = vaddvq_f32(vaddq_f32(vaddq_f32(a0, a1), vaddq_f32(a2, a3)));
  for (; c < n; ++c) s += w[c] * x[c];
  return s;
}

enum class Kind { kF32, kQ4_0, kQ8_0, kQ6_K };

template <Kind K>
void tile(const model::TensorView& w, const QuantizedX& x, int64_t r0, int64_t r1, int t0, int t1,
          float* y, int64_t ldy) {
  const uint64_t rb = w.row_bytes();
  for (int t = t0; t < t1; ++t) {
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t* row = w.data + r * rb;
      float v = 0.0f;
      if constexpr (K == Kind::kF32) {
        v = dot_f32(reinterpret_cast<const float*>(row), x.xf + t * x.cols, w.cols);
      } else if constexpr (K == Kind::kQ6_K) {
        v = dot_q6_k(row, x.qs + t * x.cols, x.d + t * x.n_blocks, x.bsums + t * (x.cols / 16),
                     x.n_blocks);
      } else {
        v = dot_q32<K == Kind::kQ4_0>(row, x.qs + t * x.cols, x.d + t * x.n_blocks, x.n_blocks);
      }
      y[t * ldy + r] = v;
    }
  }
}

}  // namespace

TileFn neon_tile_fn(DType t) {
  switch (t) {
    case DType::kF32:
      return tile<Kind::kF32>;
    case DType::kQ4_0:
      return tile<Kind::kQ4_0>;
    case DType::kQ8_0:
      return tile<Kind::kQ8_0>;
    case DType::kQ6_K:
      return tile<Kind::kQ6_K>;
    default:
      return nullptr;
  }
}

}  // namespace gem::cpu::detail

#endif  // GEM_CPU_NEON
