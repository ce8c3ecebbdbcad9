// Reference ops (see ops_ref.h): the plain loops the fast path and the CUDA kernels are checked
// against.
#include "backend/cpu/ops_ref.h"

#include <cmath>
#include <limits>
#include <vector>

#include "base/check.h"
#include "base/dtype.h"

namespace gem::cpu {

void rms_norm(const float* x, const float* w, int64_t n_rows, int n_cols, float eps, float* y) {
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* xr = x + r * n_cols;
    float* yr = y + r * n_cols;
    double sum_sq = 0.0;
    for (int i = 0; i < n_cols; ++i) sum_sq += static_cast<double>(xr[i]) * xr[i];
    // llama.cpp's ggml_rms_norm: scale = 1/sqrt(mean + eps), applied before the weight.
    const float inv_rms = static_cast<float>(1.0 / std::sqrt(sum_sq / n_cols + eps));
    for (int i = 0; i < n_cols; ++i) {
      const float v = xr[i] * inv_rms;
      yr[i] = w != nullptr ? v * w[i] : v;
    }
  }
}

void rope_inv_freq(int head_dim, float theta, const float* freq_factors, double* out) {
  for (int i = 0; i < head_dim / 2; ++i) {
    double f = std::pow(static_cast<double>(theta), -2.0 * i / head_dim);
    if (freq_factors != nullptr) f /= freq_factors[i];
    out[i] = f;
  }
}

void rope_neox(float* x, int64_t n_tokens, int n_heads, int head_dim, const int32_t* pos,
               const double* inv_freq) {
  const int half = head_dim / 2;
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int i = 0; i < half; ++i) {
      const double angle = pos[t] * inv_freq[i];
      const float c = static_cast<float>(std::cos(angle));
      const float s = static_cast<float>(std::sin(angle));
      for (int h = 0; h < n_heads; ++h) {
        float* xh = x + (t * n_heads + h) * head_dim;
        const float a = xh[i];
        const float b = xh[i + half];
        xh[i] = a * c - b * s;
        xh[i + half] = a * s + b * c;
      }
    }
  }
}

namespace {

float kv_at(const KvSegment& seg, const void* base, int64_t index) {
  return seg.f16 ? fp16_to_f32(static_cast<const uint16_t*>(base)[index])
                 : static_cast<const float*>(base)[index];
}

}  // namespace

void attention(const float* q, const int32_t* q_pos, int n_tokens, int n_heads, int n_kv_heads,
               int head_dim, int window, float scale, std::span<const KvSegment> segments,
               float* out) {
  GEM_CHECK(n_kv_heads > 0 && n_heads % n_kv_heads == 0, "heads %d / kv heads %d", n_heads,
            n_kv_heads);
  const int group = n_heads / n_kv_heads;
  std::vector<double> scores;
  std::vector<double> acc(head_dim);
  for (int t = 0; t < n_tokens; ++t) {
    for (int j = 0; j < n_heads; ++j) {
      const int g = j / group;
      const float* qj = q + (static_cast<int64_t>(t) * n_heads + j) * head_dim;
      // Scores of every visible key, in segment order (-inf marks an invisible one).
      scores.clear();
      double max_score = -std::numeric_limits<double>::infinity();
      for (const KvSegment& seg : segments) {
        for (int i = 0; i < seg.n_slots; ++i) {
          const int s = seg.slot_at(i);
          if (!attention_visible(q_pos[t], seg.slot_pos(s), window)) {
            scores.push_back(-std::numeric_limits<double>::infinity());
            continue;
          }
          const int64_t base = g * seg.head_stride + s * seg.slot_stride;
          double dot = 0.0;
          for (int d = 0; d < head_dim; ++d) dot += static_cast<double>(qj[d]) * kv_at(seg, seg.k, base + d);
          scores.push_back(dot * scale);
          if (scores.back() > max_score) max_score = scores.back();
        }
      }
      GEM_CHECK(std::isfinite(max_score), "query at position %d sees no key", q_pos[t]);
      double sum = 0.0;
      for (double& sc : scores) {
        sc = std::exp(sc - max_score);  // exp(-inf) = 0 for invisible keys
        sum += sc;
      }
      for (int d = 0; d < head_dim; ++d) acc[d] = 0.0;
      size_t index = 0;
      for (const KvSegment& seg : segments) {
        for (int i = 0; i < seg.n_slots; ++i) {
          const int s = seg.slot_at(i);
          const double p = scores[index++] / sum;
          if (p == 0.0) continue;
          const int64_t base = g * seg.head_stride + s * seg.slot_stride;
          for (int d = 0; d < head_dim; ++d) acc[d] += p * kv_at(seg, seg.v, base + d);
        }
      }
      float* oj = out + (static_cast<int64_t>(t) * n_heads + j) * head_dim;
      for (int d = 0; d < head_dim; ++d) oj[d] = static_cast<float>(acc[d]);
    }
  }
}

float gelu_tanh(float u) {
  const double x = u;
  const double k = 0.79788456080286535588;  // sqrt(2/pi)
  return static_cast<float>(0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x))));
}

void gelu_tanh_mul(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) gate[i] = gelu_tanh(gate[i]) * up[i];
}

void softcap(float* x, int64_t n, float cap) {
  for (int64_t i = 0; i < n; ++i) {
    x[i] = static_cast<float>(cap * std::tanh(static_cast<double>(x[i]) / cap));
  }
}

void add(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void scale(float* x, int64_t n, float s) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

}  // namespace gem::cpu
