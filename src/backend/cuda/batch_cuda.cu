// The CUDA backend's sequence slots (backend.h's batched calls): every layer's K/V cache holds
// options().n_slots sequences one after another (slot s at s·DevLayer::slot_bytes), each with its
// own n_past and checkpoint. eval_batch runs the products over all rows of a tile at once and
// RoPE, attention and the K/V store per run of one slot's consecutive rows, each over its own
// slot's cache at its own positions. A tile of slot 0's rows alone (a prompt, a verification)
// goes through eval(), which keeps the decode graphs and the prompt path; a decode-shaped tile
// (one row per slot) replays a graph captured for its slots.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>
#include <vector>

#include "backend/cuda/attention.cuh"
#include "backend/cuda/cuda_backend_impl.cuh"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/matmul_n.cuh"
#include "backend/cuda/matvec.cuh"
#include "backend/cuda/norm.cuh"
#include "backend/cuda/ops.cuh"
#include "base/log.h"

namespace gem::cuda {

void CudaBackend::forward_runs(int n) {
  const int E = cfg_.n_embd;
  const bool small = n <= cuda::matmul_n_max();
  cuda::set_pdl(tuning_.pdl == cuda::PdlMode::kAll || tuning_.pdl == cuda::PdlMode::kPrefill);
  cuda::embed(embd_, step_dev_ + 1, n, std::sqrt(static_cast<float>(E)), x_, stream_);
  cuda::rms_norm(x_, layers_[0].attn_norm, n, E, cfg_.rms_eps, h_, small ? hq_ : Q8Act{}, stream_,
                 tuning_);
  for (int i = 0; i < cfg_.n_layers; ++i) {
    layer_runs(model_.plan[i], layers_[i], n, i + 1 == cfg_.n_layers);
  }
}

void CudaBackend::layer_runs(const model::LayerPlan& p, const DevLayer& L, int n, bool last) {
  const int E = cfg_.n_embd, D = p.head_dim, H = p.n_heads, G = p.n_kv_heads;
  const float eps = cfg_.rms_eps;
  const cuda::CudaTuning& t = tuning_;
  const bool small = n <= cuda::matmul_n_max();
  if (small) {
    cuda::matmul_n(L.qkv, h_, hq_, n, qkv_, 0.0f, stream_, t);
  } else {
    cuda::to_f16(h_, static_cast<int64_t>(n) * E, x16_, stream_);
    gemm(L.qkv, x16_, n, qkv_);
  }
  const int64_t qkv_w = L.qkv.rows, q_w = static_cast<int64_t>(H) * D,
                kv_w = static_cast<int64_t>(G) * D;
  for (size_t r = 0; r < runs_.size(); ++r) {
    const Run& run = runs_[r];
    const int64_t o = run.row0;
    const cuda::StepParams* sp = run_sp_dev_ + r;
    cuda::qkv_prologue(qkv_ + o * qkv_w, run.n, H, G, D, p.v_from_k, L.q_norm, L.k_norm, eps,
                       L.inv_freq, sp, q_ + o * q_w, k_ + o * kv_w, v_ + o * kv_w,
                       cuda::KvDest{}, stream_);
    // The run attends to its slot's cache and its own K/V, then stores them (a ring may
    // overwrite slots the run still reads); a later run of the same slot sees them.
    cuda::AttnArgs a{q_ + o * q_w, k_ + o * kv_w, v_ + o * kv_w, k_of(L, run.slot),
                     v_of(L, run.slot), L.kv_f16, L.ring, L.n_slots, run.n, H, G, D, p.window,
                     splits_for(L, run.n), sp, part_, att_ + o * q_w, Q8Act{}};
    cuda::attention(a, stream_, t);
    cuda::kv_store(k_ + o * kv_w, v_ + o * kv_w, run.n, G, D, L.kv_f16, L.ring, L.n_slots, sp,
                   k_of(L, run.slot), v_of(L, run.slot), stream_);
  }
  if (small) {
    if (cuda::matmul_n_reads_q8(L.wo, n)) cuda::quantize_q8(att_, n, H * D, attq_, stream_);
    cuda::matmul_n(L.wo, att_, attq_, n, a_, 0.0f, stream_, t);
  } else {
    cuda::to_f16(att_, static_cast<int64_t>(n) * H * D, x16_, stream_);
    gemm(L.wo, x16_, n, a_);
  }
  cuda::residual_norm(x_, a_, L.post_attn_norm, L.ffn_norm, n, E, eps, h_, small ? hq_ : Q8Act{},
                      stream_, t);
  ffn_block(p, L, n, last, small);
}

Status CudaBackend::eval_batch(std::span<const BatchRow> rows) {
  const int V = cfg_.n_vocab;
  GEM_RETURN_IF_ERROR(validate_batch(rows, V, &batch_ends_));
  const int n_total = static_cast<int>(rows.size());
  int wanted = 0;
  bool one_run = true;  // slot 0's rows only (in order, as validated): eval() serves them
  for (int i = 0; i < n_total; ++i) {
    wanted += rows[i].logits ? 1 : 0;
    one_run = one_run && rows[i].slot == 0;
  }
  if (one_run) {
    std::vector<int32_t> tokens(n_total);
    std::vector<int> keep;
    for (int i = 0; i < n_total; ++i) {
      tokens[i] = rows[i].token;
      if (rows[i].logits) keep.push_back(i);
    }
    const bool all = wanted > 1 || (wanted == 1 && keep[0] != n_total - 1);
    GEM_RETURN_IF_ERROR(eval(tokens, all, TileCallback{}));
    // logits_host_ holds every row (all) or the last one: keep the wanted ones, in order.
    std::vector<float> kept(static_cast<size_t>(wanted) * V);
    for (int k = 0; k < wanted; ++k) {
      const std::span<const float> row = logits(all ? keep[k] : -1);
      std::copy(row.begin(), row.end(), kept.begin() + static_cast<size_t>(k) * V);
    }
    logits_host_ = std::move(kept);
    logits_rows_ = 0;
    logits_pending_ = false;
    batch_rows_ = wanted;
    return ok_status();
  }

  logits_rows_ = 0;
  logits_pending_ = false;
  batch_rows_ = 0;
  logits_host_.assign(static_cast<size_t>(wanted) * V, 0.0f);
  int out = 0;
  for (int done = 0; done < n_total;) {
    const int n = std::min(T_, n_total - done);
    runs_.clear();
    for (int i = 0; i < n; ++i) {
      const BatchRow& r = rows[done + i];
      step_host_[1 + i] = r.token;
      if (!runs_.empty() && runs_.back().slot == r.slot && runs_.back().pos0 + runs_.back().n == r.pos) {
        ++runs_.back().n;
      } else {
        runs_.push_back(Run{r.slot, r.pos, i, 1});
      }
    }
    step_host_[0] = runs_[0].pos0;
    for (size_t r = 0; r < runs_.size(); ++r) run_sp_host_[r].pos0 = runs_[r].pos0;
    GEM_CUDA_CHECK(cudaMemcpyAsync(step_dev_, step_host_, (1 + n) * sizeof(int32_t),
                                   cudaMemcpyHostToDevice, stream_));
    GEM_CUDA_CHECK(cudaMemcpyAsync(run_sp_dev_, run_sp_host_, runs_.size() * sizeof(cuda::StepParams),
                                   cudaMemcpyHostToDevice, stream_));
    int here = 0;
    for (int i = 0; i < n; ++i) here += rows[done + i].logits ? 1 : 0;
    const bool decode_shaped = here == n && n <= cuda::matmul_n_max() && profiler_ == nullptr &&
                               static_cast<int>(runs_.size()) == n;
    if (decode_shaped) {
      // One row per run: a graph per slot order, replayed (captured the first time).
      std::vector<int> key(n);
      for (int i = 0; i < n; ++i) key[i] = runs_[i].slot;
      auto it = batch_graphs_.find(key);
      if (it == batch_graphs_.end()) {
        if (batch_graphs_.size() >= 64) {
          for (auto& [slots, g] : batch_graphs_) cudaGraphExecDestroy(g);
          batch_graphs_.clear();
        }
        cudaGraph_t graph = nullptr;
        GEM_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
        forward_runs(n);
        head_rows(n);
        GEM_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
        cudaGraphExec_t exec = nullptr;
        GEM_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
        cudaGraphDestroy(graph);
        it = batch_graphs_.emplace(std::move(key), exec).first;
      }
      GEM_CUDA_CHECK(cudaGraphLaunch(it->second, stream_));
    } else {
      forward_runs(n);
    }
    if (here == n && n <= cuda::matmul_n_max()) {
      if (!decode_shaped) head_rows(n);
      GEM_CUDA_CHECK(cudaMemcpyAsync(logits_host_.data() + static_cast<size_t>(out) * V, logits_dev_,
                                     static_cast<size_t>(n) * V * sizeof(float),
                                     cudaMemcpyDeviceToHost, stream_));
      out += n;
    } else {
      for (int i = 0; i < n; ++i) {
        if (!rows[done + i].logits) continue;
        head_row(i);
        GEM_CUDA_CHECK(cudaMemcpyAsync(logits_host_.data() + static_cast<size_t>(out) * V,
                                       logits_dev_, V * sizeof(float), cudaMemcpyDeviceToHost,
                                       stream_));
        ++out;
      }
    }
    // One synchronisation per tile: the pinned step buffers are reused by the next.
    GEM_CUDA_CHECK(cudaStreamSynchronize(stream_));
    for (const Run& r : runs_) past_[r.slot] = r.pos0 + r.n;
    done += n;
  }
  batch_rows_ = out;
  return ok_status();
}

std::span<const float> CudaBackend::batch_logits(int i) {
  if (i < 0 || i >= batch_rows_) return {};
  return {logits_host_.data() + static_cast<size_t>(i) * cfg_.n_vocab,
          static_cast<size_t>(cfg_.n_vocab)};
}

// Allocation failures of the journal lose the cache, never correctness: the checkpoint is
// dropped, and the slot's restore() then empties it (the next request starts cold) instead of
// leaving rings that no longer match its n_past.
void CudaBackend::slot_checkpoint(int slot) {
  Checkpoint& c = ckpt_.at(slot);
  c.n_past = past_[slot];
  c.lost = false;
  if (c.saved.empty()) c.saved.assign(layers_.size(), {nullptr, nullptr});
  for (size_t i = 0; i < layers_.size(); ++i) {
    const DevLayer& L = layers_[i];
    if (!L.ring) continue;
    auto& [k, v] = c.saved[i];
    if (!k && !tuning_.fail_checkpoint_alloc) {
      if (cudaMalloc(&k, L.slot_bytes) != cudaSuccess) k = nullptr;
      if (k && cudaMalloc(&v, L.slot_bytes) != cudaSuccess) {
        cudaFree(k);
        k = nullptr;
        v = nullptr;
      }
      cudaGetLastError();  // a failed cudaMalloc is not a launch error for the next check
    }
    if (!k) {
      GEM_LOG_WARN("cuda: no device memory for the checkpoint journal of slot %d; its cache will "
                   "be dropped at the next restore", slot);
      c.n_past = -1;
      c.lost = true;
      return;
    }
    GEM_CUDA_CHECK(cudaMemcpyAsync(k, k_of(L, slot), L.slot_bytes, cudaMemcpyDeviceToDevice, stream_));
    GEM_CUDA_CHECK(cudaMemcpyAsync(v, v_of(L, slot), L.slot_bytes, cudaMemcpyDeviceToDevice, stream_));
  }
  GEM_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::slot_restore(int slot) {
  Checkpoint& c = ckpt_.at(slot);
  logits_rows_ = 0;
  batch_rows_ = 0;
  if (c.lost) {
    past_[slot] = 0;
    c.lost = false;
    return;
  }
  if (c.n_past < 0) return;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const DevLayer& L = layers_[i];
    if (!L.ring || !c.saved[i].first) continue;
    GEM_CUDA_CHECK(cudaMemcpyAsync(k_of(L, slot), c.saved[i].first, L.slot_bytes,
                                   cudaMemcpyDeviceToDevice, stream_));
    GEM_CUDA_CHECK(cudaMemcpyAsync(v_of(L, slot), c.saved[i].second, L.slot_bytes,
                                   cudaMemcpyDeviceToDevice, stream_));
  }
  GEM_CUDA_CHECK(cudaStreamSynchronize(stream_));
  past_[slot] = c.n_past;
}

void CudaBackend::slot_reset(int slot) {
  past_.at(slot) = 0;
  ckpt_[slot].n_past = -1;
  ckpt_[slot].lost = false;
  logits_rows_ = 0;
  batch_rows_ = 0;
}

// The kernels find a key's slot from its position and read only positions below the query's,
// so forgetting a tail is setting n_past back; the ring's spare slots keep the keys the window
// still needs (writing position q overwrote only position q − n_slots).
Status CudaBackend::slot_truncate(int slot, int n_past) {
  if (slot < 0 || slot >= opt_.n_slots) {
    return errorf("cuda truncate: slot %d outside [0, %d)", slot, opt_.n_slots);
  }
  if (n_past < 0 || n_past > past_[slot]) {
    return errorf("cuda truncate: slot %d to %d positions, expected 0..%d (its n_past)", slot,
                  n_past, past_[slot]);
  }
  bool has_ring = false;
  for (const DevLayer& L : layers_) has_ring = has_ring || L.ring;
  if (past_[slot] - n_past > model::kRingSpare && has_ring) {
    return errorf("cuda truncate: slot %d by %d positions, at most %d (the sliding rings' spare "
                  "slots); restore a checkpoint or reset instead",
                  slot, past_[slot] - n_past, model::kRingSpare);
  }
  past_[slot] = n_past;
  logits_rows_ = 0;
  logits_pending_ = false;
  batch_rows_ = 0;
  return ok_status();
}

// Copies src's K/V into dst: a ring whole (its slots hold the last positions in any order), a
// full layer the first n_past positions of each KV head.
Status CudaBackend::slot_fork(int src, int dst) {
  if (src < 0 || src >= opt_.n_slots || dst < 0 || dst >= opt_.n_slots) {
    return errorf("cuda fork: slots %d -> %d, expected both in [0, %d)", src, dst, opt_.n_slots);
  }
  if (src == dst) return ok_status();
  const int n = past_[src];
  for (size_t i = 0; i < layers_.size(); ++i) {
    const DevLayer& L = layers_[i];
    const model::LayerPlan& p = model_.plan[i];
    const size_t row = static_cast<size_t>(L.n_slots) * p.head_dim * (L.kv_f16 ? 2 : 4);
    const size_t width = L.ring ? row : static_cast<size_t>(n) * p.head_dim * (L.kv_f16 ? 2 : 4);
    if (width == 0) continue;
    for (void* (CudaBackend::*of)(const DevLayer&, int) const : {&CudaBackend::k_of, &CudaBackend::v_of}) {
      GEM_CUDA_CHECK(cudaMemcpy2DAsync((this->*of)(L, dst), row, (this->*of)(L, src), row, width,
                                       p.n_kv_heads, cudaMemcpyDeviceToDevice, stream_));
    }
  }
  GEM_CUDA_CHECK(cudaStreamSynchronize(stream_));
  past_[dst] = n;
  ckpt_[dst].n_past = -1;
  ckpt_[dst].lost = false;
  return ok_status();
}

}  // namespace gem::cuda
