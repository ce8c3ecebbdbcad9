// Q4_0 / Q8_0 / Q6_K row decoders and reference quantisers (see quant.h).
#include "base/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "base/check.h"

namespace gem {

// Blocks are copied out before use: a GGUF with a small general.alignment may place a tensor
// at an odd offset, where the block structs (2-byte aligned for their fp16 scale) cannot be
// accessed in place.
namespace {
template <typename Block>
Block load_block(const void* blocks, int64_t i) {
  Block b;
  std::memcpy(&b, static_cast<const uint8_t*>(blocks) + i * static_cast<int64_t>(sizeof(Block)),
              sizeof(Block));
  return b;
}
}  // namespace

void dequantize_row_q4_0(const void* blocks, float* out, int64_t n) {
  GEM_CHECK(n % kQK4_0 == 0, "Q4_0 row of %lld values", static_cast<long long>(n));
  for (int64_t i = 0; i < n / kQK4_0; ++i, out += kQK4_0) {
    const BlockQ4_0 b = load_block<BlockQ4_0>(blocks, i);
    const float d = fp16_to_f32(b.d);
    for (int j = 0; j < 16; ++j) {
      out[j] = d * static_cast<float>((b.qs[j] & 0x0F) - 8);
      out[j + 16] = d * static_cast<float>((b.qs[j] >> 4) - 8);
    }
  }
}

void dequantize_row_q8_0(const void* blocks, float* out, int64_t n) {
  GEM_CHECK(n % kQK8_0 == 0, "Q8_0 row of %lld values", static_cast<long long>(n));
  for (int64_t i = 0; i < n / kQK8_0; ++i, out += kQK8_0) {
    const BlockQ8_0 b = load_block<BlockQ8_0>(blocks, i);
    const float d = fp16_to_f32(b.d);
    for (int j = 0; j < kQK8_0; ++j) out[j] = d * static_cast<float>(b.qs[j]);
  }
}

void dequantize_row_q6_k(const void* blocks, float* out, int64_t n) {
  GEM_CHECK(n % kQK_K == 0, "Q6_K row of %lld values", static_cast<long long>(n));
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const BlockQ6_K b = load_block<BlockQ6_K>(blocks, i);
    const float d = fp16_to_f32(b.d);
    // Two halves of 128 values; each ql byte holds two codes' low bits (l and l + 64), each qh
    // byte the high bits of four codes (l, l + 32, l + 64, l + 96).
    for (int h = 0; h < 2; ++h, out += 128) {
      const uint8_t* ql = b.ql + 64 * h;
      const uint8_t* qh = b.qh + 32 * h;
      const int8_t* sc = b.scales + 8 * h;
      for (int l = 0; l < 32; ++l) {
        const int s = l / 16;
        const int q1 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        out[l] = d * static_cast<float>(sc[s + 0]) * static_cast<float>(q1);
        out[l + 32] = d * static_cast<float>(sc[s + 2]) * static_cast<float>(q2);
        out[l + 64] = d * static_cast<float>(sc[s + 4]) * static_cast<float>(q3);
        out[l + 96] = d * static_cast<float>(sc[s + 6]) * static_cast<float>(q4);
      }
    }
  }
}

bool can_dequantize(DType type) {
  switch (type) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kQ4_0:
    case DType::kQ8_0:
    case DType::kQ6_K: return true;
    default: return false;
  }
}

void dequantize_row(DType type, const void* data, float* out, int64_t n) {
  switch (type) {
    case DType::kF32:
      std::memcpy(out, data, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::kF16: {
      const auto* h = static_cast<const uint8_t*>(data);
      for (int64_t i = 0; i < n; ++i) {
        uint16_t v;
        std::memcpy(&v, h + 2 * i, 2);
        out[i] = fp16_to_f32(v);
      }
      return;
    }
    case DType::kBF16: {
      const auto* h = static_cast<const uint8_t*>(data);
      for (int64_t i = 0; i < n; ++i) {
        uint16_t v;
        std::memcpy(&v, h + 2 * i, 2);
        out[i] = bf16_to_f32(v);
      }
      return;
    }
    case DType::kQ4_0: dequantize_row_q4_0(data, out, n); return;
    case DType::kQ8_0: dequantize_row_q8_0(data, out, n); return;
    case DType::kQ6_K: dequantize_row_q6_k(data, out, n); return;
    default: break;
  }
  GEM_CHECK(false, "dequantize_row: type %s is not decoded by gem",
            std::string(dtype_name(type)).c_str());
}

void quantize_row_q8_0(const float* x, void* blocks, int64_t n) {
  GEM_CHECK(n % kQK8_0 == 0, "Q8_0 row of %lld values", static_cast<long long>(n));
  auto* b = static_cast<BlockQ8_0*>(blocks);
  for (int64_t i = 0; i < n / kQK8_0; ++i, x += kQK8_0) {
    float amax = 0.0f;
    for (int j = 0; j < kQK8_0; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float inv = d > 0.0f ? 1.0f / d : 0.0f;
    b[i].d = f32_to_fp16(d);
    for (int j = 0; j < kQK8_0; ++j) {
      // np.rint: round half to even (the default rounding mode).
      float q = std::nearbyint(x[j] * inv);
      q = std::fmin(std::fmax(q, -127.0f), 127.0f);
      b[i].qs[j] = static_cast<int8_t>(q);
    }
  }
}

void quantize_row_q4_0(const float* x, void* blocks, int64_t n) {
  GEM_CHECK(n % kQK4_0 == 0, "Q4_0 row of %lld values", static_cast<long long>(n));
  auto* b = static_cast<BlockQ4_0*>(blocks);
  for (int64_t i = 0; i < n / kQK4_0; ++i, x += kQK4_0) {
    // The signed value of largest magnitude (first one on ties, as numpy's argmax) maps to -8.
    float amax = std::fabs(x[0]);
    float vmax = x[0];
    for (int j = 1; j < kQK4_0; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        vmax = x[j];
      }
    }
    const float d = vmax / -8.0f;
    const float inv = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = f32_to_fp16(d);
    uint8_t q[kQK4_0];
    for (int j = 0; j < kQK4_0; ++j) {
      // Rounded twice, as numpy does (this file is compiled with -ffp-contract=off).
      float t = x[j] * inv;
      t = t + 8.5f;
      const float f = std::fmin(std::floor(t), 15.0f);
      q[j] = static_cast<uint8_t>(std::fmax(f, 0.0f));
    }
    for (int j = 0; j < 16; ++j) b[i].qs[j] = static_cast<uint8_t>(q[j] | (q[j + 16] << 4));
  }
}

namespace {

// Round to nearest, ties to even, for |v| < 2^22: adding 1.5·2^23 leaves the integer in the
// mantissa (the rounding llama-quantize's K-quant search uses, so the same ties go the same way).
inline int round_magic(float v) {
  const float t = v + 12582912.0f;
  int32_t i;
  std::memcpy(&i, &t, 4);
  return (i & 0x007FFFFF) - 0x00400000;
}

// The scale of one group of 16 values and their codes in [0, 2·nmax): the largest-magnitude value
// maps to −nmax, then 18 nearby scales are tried and the one with the smallest x²-weighted error
// (largest Σwxl²/Σwl²) kept. Float operations in the order llama-quantize performs them, each
// rounded (no FMA contraction: see CMakeLists.txt), so the bytes equal its Q6_K output (checked
// by the tiny256 test model's tensor checksum).
float group_scale_search(const float* x, int nmax, int8_t* codes) {
  float amax = 0.0f, vmax = 0.0f;
  for (int i = 0; i < 16; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) amax = ax, vmax = x[i];
  }
  if (amax < 1e-15f) {
    for (int i = 0; i < 16; ++i) codes[i] = 0;
    return 0.0f;
  }
  auto code_of = [nmax](float iscale, float v) {
    return std::max(-nmax, std::min(nmax - 1, round_magic(iscale * v)));
  };
  auto sums = [&](float iscale, float* sumlx, float* suml2) {
    *sumlx = 0.0f, *suml2 = 0.0f;
    for (int i = 0; i < 16; ++i) {
      const int l = code_of(iscale, x[i]);
      const float w = x[i] * x[i];
      *sumlx += w * x[i] * static_cast<float>(l);
      *suml2 += w * static_cast<float>(l) * static_cast<float>(l);
    }
  };
  float iscale = static_cast<float>(-nmax) / vmax;
  float sumlx, suml2;
  sums(iscale, &sumlx, &suml2);
  for (int i = 0; i < 16; ++i) codes[i] = static_cast<int8_t>(code_of(iscale, x[i]) + nmax);
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / vmax;
    sums(iscale, &sumlx, &suml2);
    const float lhs = sumlx * sumlx;
    const float rhs = best * suml2;
    if (suml2 > 0.0f && lhs > rhs) {
      for (int i = 0; i < 16; ++i) codes[i] = static_cast<int8_t>(code_of(iscale, x[i]) + nmax);
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

}  // namespace

void quantize_row_q6_k(const float* x, void* blocks, int64_t n) {
  GEM_CHECK(n % kQK_K == 0, "Q6_K row of %lld values", static_cast<long long>(n));
  auto* b = static_cast<BlockQ6_K*>(blocks);
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    int8_t codes[kQK_K];
    float scales[16];
    float max_scale = 0.0f, max_abs_scale = 0.0f;
    for (int g = 0; g < 16; ++g) {
      scales[g] = group_scale_search(x + 16 * g, 32, codes + 16 * g);
      if (std::fabs(scales[g]) > max_abs_scale) max_abs_scale = std::fabs(scales[g]), max_scale = scales[g];
    }
    std::memset(&b[i], 0, sizeof(BlockQ6_K));
    if (max_abs_scale < 1e-15f) continue;  // all zero (d = +0)
    // Sub-scales in int8 against an fp16 super-block scale (the largest group scale ↦ −128),
    // then every code re-rounded with the stored scale.
    const float iscale = -128.0f / max_scale;
    b[i].d = f32_to_fp16(1.0f / iscale);
    const float d = fp16_to_f32(b[i].d);
    for (int g = 0; g < 16; ++g) {
      b[i].scales[g] = static_cast<int8_t>(std::min(127, round_magic(iscale * scales[g])));
      const float dg = d * static_cast<float>(b[i].scales[g]);
      if (dg == 0.0f) continue;
      for (int j = 0; j < 16; ++j) {
        const int l = std::max(-32, std::min(31, round_magic(x[16 * g + j] / dg)));
        codes[16 * g + j] = static_cast<int8_t>(l + 32);
      }
    }
    // Pack the inverse of dequantize_row_q6_k's layout.
    for (int h = 0; h < 2; ++h) {
      uint8_t* ql = b[i].ql + 64 * h;
      uint8_t* qh = b[i].qh + 32 * h;
      const int8_t* c = codes + 128 * h;
      for (int l = 0; l < 32; ++l) {
        ql[l] = static_cast<uint8_t>((c[l] & 0x0F) | ((c[l + 64] & 0x0F) << 4));
        ql[l + 32] = static_cast<uint8_t>((c[l + 32] & 0x0F) | ((c[l + 96] & 0x0F) << 4));
        qh[l] = static_cast<uint8_t>((c[l] >> 4) | ((c[l + 32] >> 4) << 2) | ((c[l + 64] >> 4) << 4) |
                                     ((c[l + 96] >> 4) << 6));
      }
    }
  }
}

void quantize_row(DType type, const float* x, void* data, int64_t n) {
  switch (type) {
    case DType::kF32:
      std::memcpy(data, x, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::kF16:
    case DType::kBF16: {
      auto* h = static_cast<uint8_t*>(data);
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t v = type == DType::kF16 ? f32_to_fp16(x[i]) : f32_to_bf16(x[i]);
        std::memcpy(h + 2 * i, &v, 2);
      }
      return;
    }
    case DType::kQ4_0: quantize_row_q4_0(x, data, n); return;
    case DType::kQ8_0: quantize_row_q8_0(x, data, n); return;
    case DType::kQ6_K: quantize_row_q6_k(x, data, n); return;
    default: break;
  }
  GEM_CHECK(false, "quantize_row: type %s is not written by gem",
            std::string(dtype_name(type)).c_str());
}

}  // namespace gem
