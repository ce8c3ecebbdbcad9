// Q4_0 / Q8_0 / Q6_K row decoders and reference quantisers (see quant.h).
#include "base/quant.h"

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
      // Two statements so the compiler cannot fuse them into an FMA (numpy rounds twice).
      float t = x[j] * inv;
      t = t + 8.5f;
      const float f = std::fmin(std::floor(t), 15.0f);
      q[j] = static_cast<uint8_t>(std::fmax(f, 0.0f));
    }
    for (int j = 0; j < 16; ++j) b[i].qs[j] = static_cast<uint8_t>(q[j] | (q[j + 16] << 4));
  }
}

void quantize_row_q6_k(const float* x, void* blocks, int64_t n) {
  GEM_CHECK(n % kQK_K == 0, "Q6_K row of %lld values", static_cast<long long>(n));
  auto* b = static_cast<BlockQ6_K*>(blocks);
  for (int64_t i = 0; i < n / kQK_K; ++i, x += kQK_K) {
    // Per group of 16: the signed scale that maps the largest-magnitude value to code -32.
    float group_scale[16];
    float max_scale = 0.0f;
    float max_abs_scale = 0.0f;
    for (int g = 0; g < 16; ++g) {
      float amax = std::fabs(x[16 * g]);
      float vmax = x[16 * g];
      for (int j = 1; j < 16; ++j) {
        if (std::fabs(x[16 * g + j]) > amax) {
          amax = std::fabs(x[16 * g + j]);
          vmax = x[16 * g + j];
        }
      }
      group_scale[g] = vmax / -32.0f;
      if (std::fabs(group_scale[g]) > max_abs_scale) {
        max_abs_scale = std::fabs(group_scale[g]);
        max_scale = group_scale[g];
      }
    }
    // Super-block scale: the largest group scale maps to sub-scale -128 (the widest int8 side).
    const uint16_t d16 = f32_to_fp16(max_scale / -128.0f);
    const float d = fp16_to_f32(d16);
    b[i].d = d16;
    int code[kQK_K];
    for (int g = 0; g < 16; ++g) {
      const float* xg = x + 16 * g;
      int* cg = code + 16 * g;
      int best_sc = 0;
      float best_err = INFINITY;
      if (d != 0.0f && std::isfinite(d)) {
        // The rounded sub-scale and its two neighbours: rounding the scale down clamps the
        // largest value, rounding it up coarsens the rest; keep the one with the least error.
        const float r = std::nearbyint(group_scale[g] / d);
        for (float cand = r - 1.0f; cand <= r + 1.0f; cand += 1.0f) {
          const int sc = static_cast<int>(std::fmin(std::fmax(cand, -128.0f), 127.0f));
          const float step = d * static_cast<float>(sc);
          const float inv = step != 0.0f ? 1.0f / step : 0.0f;
          float err = 0.0f;
          for (int j = 0; j < 16; ++j) {
            const float q = std::fmin(std::fmax(std::nearbyint(xg[j] * inv), -32.0f), 31.0f);
            const float e = xg[j] - step * q;
            err += e * e;
          }
          if (err < best_err) {
            best_err = err;
            best_sc = sc;
          }
        }
      }
      b[i].scales[g] = static_cast<int8_t>(best_sc);
      const float step = d * static_cast<float>(best_sc);
      const float inv = step != 0.0f ? 1.0f / step : 0.0f;
      for (int j = 0; j < 16; ++j) {
        const float q = std::nearbyint(xg[j] * inv);
        cg[j] = static_cast<int>(std::fmin(std::fmax(q, -32.0f), 31.0f)) + 32;
      }
    }
    // Pack the inverse of dequantize_row_q6_k's layout.
    std::memset(b[i].ql, 0, sizeof(b[i].ql));
    std::memset(b[i].qh, 0, sizeof(b[i].qh));
    for (int h = 0; h < 2; ++h) {
      uint8_t* ql = b[i].ql + 64 * h;
      uint8_t* qh = b[i].qh + 32 * h;
      const int* c = code + 128 * h;
      for (int l = 0; l < 32; ++l) {
        ql[l] = static_cast<uint8_t>((c[l] & 0x0F) | ((c[l + 64] & 0x0F) << 4));
        ql[l + 32] = static_cast<uint8_t>((c[l + 32] & 0x0F) | ((c[l + 96] & 0x0F) << 4));
        qh[l] = static_cast<uint8_t>((c[l] >> 4) | ((c[l + 32] >> 4) << 2) |
                                     ((c[l + 64] >> 4) << 4) | ((c[l + 96] >> 4) << 6));
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
