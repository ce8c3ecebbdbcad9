// The weight upload: Q4_0/Q8_0 matrices repacked on the device into the split layout (quants
// of a row contiguous and 16-byte aligned, f16 scales apart), F32/Q6_K copied as they are, norms
// as f32, RoPE frequencies as f64.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "backend/cuda/cuda_backend_impl.cuh"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/matvec.cuh"
#include "base/log.h"
#include "base/timer.h"

namespace gem::cuda {
namespace {

WType wtype_of(DType t, bool* ok) {
  *ok = true;
  switch (t) {
    case DType::kF32: return WType::kF32;
    case DType::kQ4_0: return WType::kQ4_0;
    case DType::kQ8_0: return WType::kQ8_0;
    case DType::kQ6_K: return WType::kQ6_K;
    default: *ok = false; return WType::kF32;
  }
}

}  // namespace

// Uploads the row-concatenation of `parts` (same type and cols). Q4_0/Q8_0 go through a raw
// staging copy and the repack kernel; F32/Q6_K rows are copied as they are.
Status CudaBackend::upload_matrix(std::span<const model::TensorView* const> parts,
                                  DevMatrix* out) {
  const model::TensorView& first = *parts[0];
  bool ok = false;
  out->type = wtype_of(first.type, &ok);
  if (!ok) {
    return errorf("cuda: tensor %.*s has type %.*s; expected F32, Q4_0, Q8_0 or Q6_K",
                  static_cast<int>(first.name.size()), first.name.data(),
                  static_cast<int>(dtype_name(first.type).size()), dtype_name(first.type).data());
  }
  out->cols = first.cols;
  out->rows = 0;
  uint64_t raw_bytes = 0;
  for (const model::TensorView* t : parts) {
    if (t->type != first.type || t->cols != first.cols) {
      return errorf("cuda: tensors %.*s and %.*s cannot be fused (type or width differs)",
                    static_cast<int>(first.name.size()), first.name.data(),
                    static_cast<int>(t->name.size()), t->name.data());
    }
    out->rows += t->rows;
    raw_bytes += t->n_bytes;
  }
  const bool split = out->type == WType::kQ4_0 || out->type == WType::kQ8_0;
  const bool q8 = out->type == WType::kQ8_0;
  const int64_t nb = out->cols / 32;
  if (split) {
    out->qs = static_cast<uint8_t*>(dev_alloc(out->rows * nb * (q8 ? 32 : 16)));
    out->d = static_cast<__half*>(dev_alloc(out->rows * nb * sizeof(__half)));
    if (!out->qs || !out->d) return errorf("cuda: out of device memory uploading %.*s",
                                           static_cast<int>(first.name.size()), first.name.data());
    uint8_t* staging = nullptr;
    uint64_t max_part = 0;
    for (const model::TensorView* t : parts) max_part = std::max(max_part, t->n_bytes);
    if (cudaMalloc(&staging, max_part) != cudaSuccess) {
      return errorf("cuda: out of device memory staging %.*s", static_cast<int>(first.name.size()),
                    first.name.data());
    }
    int64_t row0 = 0;
    for (const model::TensorView* t : parts) {
      GEM_CUDA_CHECK(cudaMemcpyAsync(staging, t->data, t->n_bytes, cudaMemcpyHostToDevice, stream_));
      cuda::repack_blocks(staging, t->rows * nb, q8, out->qs + row0 * nb * (q8 ? 32 : 16),
                          out->d + row0 * nb, stream_);
      row0 += t->rows;
    }
    GEM_CUDA_CHECK(cudaStreamSynchronize(stream_));
    cudaFree(staging);
  } else {
    out->raw = static_cast<uint8_t*>(dev_alloc(raw_bytes));
    if (!out->raw) return errorf("cuda: out of device memory uploading %.*s",
                                 static_cast<int>(first.name.size()), first.name.data());
    uint64_t off = 0;
    for (const model::TensorView* t : parts) {
      GEM_CUDA_CHECK(cudaMemcpy(out->raw + off, t->data, t->n_bytes, cudaMemcpyHostToDevice));
      off += t->n_bytes;
    }
  }
  weight_bytes_ += raw_bytes;
  return ok_status();
}

Status CudaBackend::upload_f32(const model::TensorView& t, const float** out) {
  if (t.type != DType::kF32) {
    return errorf("cuda: tensor %.*s must be F32", static_cast<int>(t.name.size()), t.name.data());
  }
  void* p = dev_alloc(t.n_bytes);
  if (!p) return errorf("cuda: out of device memory");
  GEM_CUDA_CHECK(cudaMemcpy(p, t.data, t.n_bytes, cudaMemcpyHostToDevice));
  *out = static_cast<const float*>(p);
  weight_bytes_ += t.n_bytes;
  return ok_status();
}

Status CudaBackend::upload_inv_freq(int head_dim, float theta, const float* factors,
                                    const double** out) {
  const int D = head_dim;
  std::vector<double> inv(D / 2);
  for (int k = 0; k < D / 2; ++k) {
    inv[k] = std::pow(static_cast<double>(theta), -2.0 * k / D) /
             (factors ? static_cast<double>(factors[k]) : 1.0);
  }
  void* dinv = dev_alloc(inv.size() * sizeof(double));
  if (!dinv) return errorf("cuda: out of device memory for RoPE frequencies");
  GEM_CUDA_CHECK(cudaMemcpy(dinv, inv.data(), inv.size() * sizeof(double), cudaMemcpyHostToDevice));
  *out = static_cast<const double*>(dinv);
  return ok_status();
}

Status CudaBackend::upload_weights() {
  const model::Weights& w = model_.weights;
  Timer timer;
  uint64_t total = w.token_embd.n_bytes;
  for (const model::LayerWeights& lw : w.layers) {
    total += lw.attn_q.n_bytes + lw.attn_k.n_bytes + lw.attn_v.n_bytes + lw.attn_output.n_bytes +
             lw.ffn_gate.n_bytes + lw.ffn_up.n_bytes + lw.ffn_down.n_bytes;
  }
  GEM_LOG_INFO("cuda: uploading %.2f GB of weights", static_cast<double>(total) / 1e9);
  {
    const model::TensorView* parts[] = {&w.token_embd};
    GEM_RETURN_IF_ERROR(upload_matrix(parts, &embd_));
  }
  GEM_RETURN_IF_ERROR(upload_f32(w.output_norm, &output_norm_));
  layers_.resize(cfg_.n_layers);
  int last_pct = 0;
  for (int i = 0; i < cfg_.n_layers; ++i) {
    const model::LayerPlan& p = model_.plan[i];
    const model::LayerWeights& lw = w.layers[i];
    DevLayer& L = layers_[i];
    std::vector<const model::TensorView*> qkv = {&lw.attn_q, &lw.attn_k};
    if (!p.v_from_k) qkv.push_back(&lw.attn_v);
    GEM_RETURN_IF_ERROR(upload_matrix(qkv, &L.qkv));
    const model::TensorView* wo[] = {&lw.attn_output};
    GEM_RETURN_IF_ERROR(upload_matrix(wo, &L.wo));
    const model::TensorView* gate[] = {&lw.ffn_gate};
    GEM_RETURN_IF_ERROR(upload_matrix(gate, &L.gate));
    const model::TensorView* up[] = {&lw.ffn_up};
    GEM_RETURN_IF_ERROR(upload_matrix(up, &L.up));
    const model::TensorView* down[] = {&lw.ffn_down};
    GEM_RETURN_IF_ERROR(upload_matrix(down, &L.down));
    GEM_RETURN_IF_ERROR(upload_f32(lw.attn_norm, &L.attn_norm));
    GEM_RETURN_IF_ERROR(upload_f32(lw.attn_q_norm, &L.q_norm));
    GEM_RETURN_IF_ERROR(upload_f32(lw.attn_k_norm, &L.k_norm));
    GEM_RETURN_IF_ERROR(upload_f32(lw.post_attention_norm, &L.post_attn_norm));
    GEM_RETURN_IF_ERROR(upload_f32(lw.ffn_norm, &L.ffn_norm));
    GEM_RETURN_IF_ERROR(upload_f32(lw.post_ffw_norm, &L.post_ffw_norm));
    if (lw.layer_output_scale.present()) {
      GEM_RETURN_IF_ERROR(upload_f32(lw.layer_output_scale, &L.out_scale));
    } else {
      float one = 1.0f;
      void* d = dev_alloc(sizeof(float));
      GEM_CUDA_CHECK(cudaMemcpy(d, &one, sizeof(float), cudaMemcpyHostToDevice));
      L.out_scale = static_cast<const float*>(d);
    }
    // RoPE inverse frequencies, freq factors (rope_freqs) folded in on full layers.
    const float* ff = (p.kind == model::AttnKind::kFull && w.rope_freqs.present())
                          ? w.rope_freqs.f32()
                          : nullptr;
    GEM_RETURN_IF_ERROR(upload_inv_freq(p.head_dim, p.rope_theta, ff, &L.inv_freq));
    const int pct = (i + 1) * 100 / cfg_.n_layers;
    if (pct / 10 != last_pct / 10) {
      GEM_LOG_INFO("cuda: uploaded %d%% (%d/%d layers, %.1f s)", pct, i + 1, cfg_.n_layers,
                   timer.seconds());
      last_pct = pct;
    }
  }
  return ok_status();
}

}  // namespace gem::cuda
