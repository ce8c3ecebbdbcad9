// The CUDA backend's sequence slots (backend.h's batched calls): every layer's K/V cache holds
// options().n_slots sequences one after another (slot s at s·DevLayer::slot_bytes), each with its
// own n_past and checkpoint.
//
// eval_batch splits the rows into runs (a slot's consecutive rows). Runs of up to kRowsRunMax rows
// — decode steps of many sequences, speculative verifications — go through the rows pass, which
// computes every row exactly as its slot's decode step would: the decode products' arithmetic
// (matmul_rows: each row's result bit-identical to matvec's, however many rows share the weight
// pass), every row's K/V stored into its slot first, then the decode attention kernels with one
// query per row over its own slot's cache, with the splits and form of the decode graph of its
// position. A row's result therefore depends on nothing but its slot's cache and its token: a
// batch of sequences gives each the tokens it gets alone, and a verification the decode step's
// logits. Longer runs (prompts) go through the tile path of eval() on their own slot, one run at a
// time, as eval() would evaluate them.
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
#include "backend/cuda/sample.cuh"
#include "base/log.h"

namespace gem::cuda {

void CudaBackend::rows_pass(int n, RowsHead head) {
  // Group the rows by decode bucket (stable): one attention launch per group per layer.
  std::vector<int> bucket(n);
  for (int i = 0; i < n; ++i) bucket[i] = decode_bucket(rows_host_[i].pos0);
  row_groups_.clear();
  std::vector<int> order(n);
  for (int i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return bucket[x] < bucket[y]; });
  for (int j = 0; j < n; ++j) {
    const int i = order[j];
    rows_host_[rows_max_ + j] = rows_host_[i];
    rows_host_[rows_max_ + j].row = i;
    if (row_groups_.empty() || row_groups_.back().bucket != bucket[i]) {
      row_groups_.push_back(RowGroup{bucket[i], j, 0});
    }
    ++row_groups_.back().n;
  }
  GEM_CUDA_CHECK(cudaMemcpyAsync(step_dev_, step_host_, (1 + n) * sizeof(int32_t),
                                 cudaMemcpyHostToDevice, stream_));
  GEM_CUDA_CHECK(cudaMemcpyAsync(rows_dev_, rows_host_, 2 * rows_max_ * sizeof(cuda::RowParams),
                                 cudaMemcpyHostToDevice, stream_));
  if (profiler_ != nullptr) {
    forward_rows(n, head);
    return;
  }
  // The launches depend only on the buckets in pass order and the head: one graph per such key.
  std::vector<int> key(order.size() + 1);
  for (int j = 0; j < n; ++j) key[j] = bucket[order[j]];
  key[n] = static_cast<int>(head);
  auto it = rows_graphs_.find(key);
  if (it == rows_graphs_.end()) {
    if (rows_graphs_.size() >= 64) {
      for (auto& [k, g] : rows_graphs_) cudaGraphExecDestroy(g);
      rows_graphs_.clear();
    }
    cudaGraph_t graph = nullptr;
    GEM_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    forward_rows(n, head);
    GEM_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
    cudaGraphExec_t exec = nullptr;
    GEM_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    cudaGraphDestroy(graph);
    it = rows_graphs_.emplace(std::move(key), exec).first;
  }
  GEM_CUDA_CHECK(cudaGraphLaunch(it->second, stream_));
}

void CudaBackend::forward_rows(int n, RowsHead head) {
  const int E = cfg_.n_embd;
  if (profiler_ != nullptr) {
    prof_marks_.clear();
    prof_record(prof_events_[1]);  // the forward's start
  }
  cuda::set_pdl(tuning_.pdl == cuda::PdlMode::kAll || tuning_.pdl == cuda::PdlMode::kPrefill);
  cuda::embed(embd_, step_dev_ + 1, n, std::sqrt(static_cast<float>(E)), x_, stream_);
  mark(Stage::kEmbed, -1);
  cuda::rms_norm(x_, layers_[0].attn_norm, n, E, cfg_.rms_eps, h_, hq_, stream_, tuning_, true);
  mark(Stage::kNorm, 0);
  for (int i = 0; i < cfg_.n_layers; ++i) {
    layer_rows(model_.plan[i], layers_[i], n, i + 1 == cfg_.n_layers);
  }
  if (head == RowsHead::kAll) {
    cuda::matmul_rows(embd_, h_, hq_, n, logits_dev_, cfg_.final_logit_softcap, stream_, tuning_);
    mark(Stage::kHead, -1);
  } else if (head == RowsHead::kLast) {
    const size_t last = static_cast<size_t>(n - 1) * E;
    const cuda::Q8Act lq{hq_.q + last, hq_.ds + last / 32};
    cuda::matmul_rows(embd_, h_ + last, lq, 1, logits_dev_, cfg_.final_logit_softcap, stream_,
                      tuning_);
    mark(Stage::kHead, -1);
  }
}

// layer_decode's work for n rows at once (the same kernels, or their rows forms).
void CudaBackend::layer_rows(const model::LayerPlan& p, const DevLayer& L, int n, bool last) {
  const int E = cfg_.n_embd, F = cfg_.n_ff, D = p.head_dim, H = p.n_heads, G = p.n_kv_heads;
  const float eps = cfg_.rms_eps;
  const cuda::CudaTuning& t = tuning_;
  cuda::matmul_rows(L.qkv, h_, hq_, n, qkv_, 0.0f, stream_, t);
  mark(Stage::kQkv, p.layer);
  // Every row's K/V into its slot first: a row then reads its own key from the cache, as the
  // decode step does. Rows of one slot (at most kRowsRunMax, below model::kRingSpare + 1) never
  // overwrite a ring slot another row of that slot still sees.
  const cuda::KvDest dest{L.k_cache, L.v_cache, L.kv_f16, L.ring, L.n_slots, rows_dev_,
                          L.slot_bytes};
  cuda::qkv_prologue(qkv_, n, H, G, D, p.v_from_k, L.q_norm, L.k_norm, eps, L.inv_freq, nullptr,
                     q_, k_, v_, dest, stream_);
  mark(Stage::kRope, p.layer);
  for (const RowGroup& grp : row_groups_) {
    cuda::AttnArgs a{q_, k_, v_, L.k_cache, L.v_cache, L.kv_f16, L.ring, L.n_slots, 1, H, G, D,
                     p.window, bucket_splits(p, L, grp.bucket), nullptr, part_, att_, attq_};
    a.tile_in_cache = true;
    a.max_keys = bucket_keys(L, grp.bucket);
    if (L.kv_shared) a.k_shared_w = L.k_norm;
    a.rows = rows_dev_ + rows_max_ + grp.offset;
    a.n_rows = grp.n;
    a.slot_bytes = L.slot_bytes;
    cuda::attention(a, stream_, t);
  }
  mark(Stage::kAttention, p.layer);
  cuda::matmul_rows(L.wo, att_, attq_, n, a_, 0.0f, stream_, t);
  mark(Stage::kAttnOut, p.layer);
  cuda::residual_norm(x_, a_, L.post_attn_norm, L.ffn_norm, n, E, eps, h_, hq_, stream_, t, true);
  mark(Stage::kEpilogue, p.layer);
  const bool down_q8 = cuda::matvec_reads_q8(L.down.type);
  if (L.gate.type == WType::kQ4_0 && L.up.type == WType::kQ4_0) {
    // With the down product's q8 input (gq_), as layer_decode's quantize_q8 makes it.
    cuda::matmul_rows_gated(L.gate, L.up, hq_, n, g_, down_q8 ? gq_ : Q8Act{}, stream_, t);
    mark(Stage::kFfnGateUp, p.layer);
  } else {
    gate_up_by_row(L, n);  // layer_decode's separate products (matvec), row by row
    mark(Stage::kFfnGateUp, p.layer);
    cuda::gelu_mul(gu_, n, F, g_, stream_);
    mark(Stage::kGelu, p.layer);
    if (down_q8) {
      cuda::quantize_q8(g_, n, F, gq_, stream_);
      mark(Stage::kGelu, p.layer);
    }
  }
  cuda::matmul_rows(L.down, g_, gq_, n, a_, 0.0f, stream_, t);
  mark(Stage::kFfnDown, p.layer);
  const float* w_next = last ? output_norm_ : layers_[p.layer + 1].attn_norm;
  cuda::residual_norm_scale(x_, a_, L.post_ffw_norm, L.out_scale, w_next, n, E, eps, h_, hq_,
                            stream_, t, true);
  mark(Stage::kEpilogue, p.layer);
}

Status CudaBackend::eval_run(int slot, std::span<const BatchRow> rows, std::span<const int> rank) {
  const int V = cfg_.n_vocab, n_total = static_cast<int>(rows.size());
  tile_slot_ = slot;
  for (int done = 0; done < n_total;) {
    const int n = std::min(T_, n_total - done);
    step_host_[0] = past_[slot];
    for (int i = 0; i < n; ++i) step_host_[1 + i] = rows[done + i].token;
    if (n <= kRowsRunMax && rows_ok_) {
      // A short tail: as a rows pass (the tile path's decode kernels are slot 0's graphs).
      for (int i = 0; i < n; ++i) rows_host_[i] = cuda::RowParams{past_[slot] + i, slot, i, 0};
      bool any = false;
      for (int i = 0; i < n; ++i) any = any || rank[done + i] >= 0;
      rows_pass(n, any ? RowsHead::kAll : RowsHead::kNone);
      for (int i = 0; i < n; ++i) {
        if (rank[done + i] < 0) continue;
        GEM_CUDA_CHECK(cudaMemcpyAsync(logits_host_.data() + static_cast<size_t>(rank[done + i]) * V,
                                       logits_dev_ + static_cast<size_t>(i) * V, V * sizeof(float),
                                       cudaMemcpyDeviceToHost, stream_));
      }
    } else {
      GEM_CUDA_CHECK(cudaMemcpyAsync(step_dev_, step_host_, (1 + n) * sizeof(int32_t),
                                     cudaMemcpyHostToDevice, stream_));
      capture_bucket_ = decode_bucket(past_[slot]);  // a one-token tile's eager decode splits
      forward_tile(n, false);
      for (int i = 0; i < n; ++i) {
        if (rank[done + i] < 0) continue;
        head_row(i);
        GEM_CUDA_CHECK(cudaMemcpyAsync(logits_host_.data() + static_cast<size_t>(rank[done + i]) * V,
                                       logits_dev_, V * sizeof(float), cudaMemcpyDeviceToHost,
                                       stream_));
      }
    }
    if (keep_hidden_) keep_batch_hidden(rank.subspan(done, n));
    // One synchronisation per tile: the pinned step buffers are reused by the next.
    GEM_CUDA_CHECK(cudaStreamSynchronize(stream_));
    past_[slot] += n;
    done += n;
  }
  tile_slot_ = 0;
  return ok_status();
}

Status CudaBackend::eval_batch(std::span<const BatchRow> rows) {
  const int V = cfg_.n_vocab;
  GEM_RETURN_IF_ERROR(validate_batch(rows, V, &batch_ends_));
  const int n_total = static_cast<int>(rows.size());
  std::vector<int> rank(n_total, -1);
  int wanted = 0;
  for (int i = 0; i < n_total; ++i) {
    if (rows[i].logits) rank[i] = wanted++;
  }
  logits_rows_ = 0;
  logits_pending_ = false;
  batch_rows_ = 0;
  reserve_logits_host(static_cast<size_t>(wanted) * V);
  batch_dev_row_.assign(wanted, -1);
  batch_on_host_.assign(wanted, 1);
  begin_hidden(wanted);

  // Runs: a slot's consecutive rows.
  struct Run {
    int row0 = 0;
    int n = 0;
  };
  std::vector<Run> runs;
  for (int i = 0; i < n_total; ++i) {
    if (!runs.empty() && rows[i].slot == rows[runs.back().row0].slot &&
        rows[runs.back().row0].pos + runs.back().n == rows[i].pos) {
      ++runs.back().n;
    } else {
      runs.push_back(Run{i, 1});
    }
  }
  // Short runs gather into rows passes (flushed when full, or before a long run of one of their
  // slots); long runs go through the tile path on their own. Only the last pass's logits stay on
  // the device until read (or sampled there), so the runs whose every row wants logits (decode
  // rows, verifications) are taken last: a step's prompt tail then goes in an earlier pass
  // instead of pushing decode rows out of the last one (their logits to the host, drawn there).
  // Only runs of slots with no other run in the batch move (a slot's runs keep their order).
  std::vector<int> runs_of(static_cast<size_t>(options().n_slots), 0);
  for (const Run& r : runs) ++runs_of[static_cast<size_t>(rows[r.row0].slot)];
  const auto last_group = std::stable_partition(runs.begin(), runs.end(), [&](const Run& r) {
    if (runs_of[static_cast<size_t>(rows[r.row0].slot)] > 1) return true;
    for (int i = r.row0; i < r.row0 + r.n; ++i) {
      if (!rows[i].logits) return true;
    }
    return false;
  });
  const size_t first_last = static_cast<size_t>(last_group - runs.begin());
  const bool short_ok = rows_ok_;
  auto is_short = [&](const Run& r) { return r.n <= std::min(kRowsRunMax, rows_max_) && short_ok; };
  int last_rows = 0;  // the last group's rows that gather into passes
  for (auto it = last_group; it != runs.end(); ++it) last_rows += is_short(*it) ? it->n : 0;
  std::vector<int> pending;  // batch rows of the pass being gathered
  auto flush = [&](bool final_op) -> Status {
    if (pending.empty()) return ok_status();
    const int n = static_cast<int>(pending.size());
    bool any = false;
    for (int j = 0; j < n; ++j) {
      const BatchRow& r = rows[pending[j]];
      step_host_[1 + j] = r.token;
      rows_host_[j] = cuda::RowParams{r.pos, r.slot, j, 0};
      any = any || r.logits;
    }
    // Profiled (gem profile --parallel): the pass runs eagerly with its stage marks; collected
    // after the synchronisation below, as eval() collects a tile's.
    if (profiler_ != nullptr) GEM_CUDA_CHECK(cudaEventRecord(prof_events_[0], stream_));
    rows_pass(n, any ? RowsHead::kAll : RowsHead::kNone);
    if (keep_hidden_) {
      std::vector<int> ranks(n);
      for (int j = 0; j < n; ++j) ranks[j] = rank[pending[j]];
      keep_batch_hidden(ranks);
    }
    for (int j = 0; j < n; ++j) {
      const int k = rank[pending[j]];
      if (k < 0) continue;
      if (final_op) {
        batch_dev_row_[k] = j;
        batch_on_host_[k] = 0;
      } else {
        GEM_CUDA_CHECK(cudaMemcpyAsync(logits_host_.data() + static_cast<size_t>(k) * V,
                                       logits_dev_ + static_cast<size_t>(j) * V, V * sizeof(float),
                                       cudaMemcpyDeviceToHost, stream_));
      }
    }
    GEM_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (profiler_ != nullptr) {
      prof_step_marks_ = &prof_marks_;
      prof_collect();
    }
    for (int i : pending) past_[rows[i].slot] = std::max(past_[rows[i].slot], rows[i].pos + 1);
    pending.clear();
    return ok_status();
  };
  for (size_t ri = 0; ri < runs.size(); ++ri) {
    const Run& run = runs[ri];
    const int slot = rows[run.row0].slot;
    // The earlier group's gathered rows go in a pass of their own when the last group's would
    // not fit beside them.
    if (ri == first_last && static_cast<int>(pending.size()) + last_rows > rows_max_) {
      GEM_RETURN_IF_ERROR(flush(false));
    }
    if (is_short(run)) {  // a pass holds rows_max_ rows
      if (static_cast<int>(pending.size()) + run.n > rows_max_) GEM_RETURN_IF_ERROR(flush(false));
      for (int i = run.row0; i < run.row0 + run.n; ++i) pending.push_back(i);
      continue;
    }
    // A slot's rows stay in order: its gathered rows go first. Other slots' rows wait, so that
    // the pass of a step's decode rows comes last and its logits stay on the device.
    bool pending_slot = false;
    for (int i : pending) pending_slot = pending_slot || rows[i].slot == slot;
    if (pending_slot) GEM_RETURN_IF_ERROR(flush(false));
    GEM_RETURN_IF_ERROR(eval_run(slot, rows.subspan(run.row0, run.n),
                                 std::span<const int>(rank).subspan(run.row0, run.n)));
  }
  GEM_RETURN_IF_ERROR(flush(true));
  batch_rows_ = wanted;
  return ok_status();
}

std::span<const float> CudaBackend::batch_logits(int i) {
  if (i < 0 || i >= batch_rows_) return {};
  const size_t V = static_cast<size_t>(cfg_.n_vocab);
  if (!batch_on_host_[i]) {
    GEM_CUDA_CHECK(cudaMemcpy(logits_host_.data() + i * V, logits_dev_ + batch_dev_row_[i] * V,
                              V * sizeof(float), cudaMemcpyDeviceToHost));
    batch_on_host_[i] = 1;
  }
  return {logits_host_.data() + i * V, V};
}

// Device sampling of the rows of the last eval_batch still on the device: greedy rows with no
// penalty window in one arg-max over all of them, sampled rows with none (and one top-k) in one
// top-k chain over all of them, the others a launch each; one copy of the picks, one
// synchronisation. Rows whose parameters the device sampler does not take (sample()'s
// rule) or whose logits went to the host are left to the caller.
std::vector<std::optional<int32_t>> CudaBackend::sample_batch(std::span<const BatchSample> reqs) {
  std::vector<std::optional<int32_t>> out(reqs.size());
  const int V = cfg_.n_vocab;
  struct Pick {
    int i;        // the request
    size_t n_hist;
  };
  // greedy: greedy rows with no penalty window; drawn: sampled rows with none and the top-k of
  // the first of them; other: the rest, a launch each.
  std::vector<Pick> greedy_rows, drawn, other;
  for (size_t i = 0; i < reqs.size() && static_cast<int>(i) < batch_rows_; ++i) {
    if (batch_on_host_[i] || reqs[i].params == nullptr) continue;
    const SamplingParams& params = *reqs[i].params;
    const bool greedy = params.temperature <= 0.0f;
    if (!greedy && (params.top_k < 1 || params.top_k > cuda::kMaxTopK)) continue;
    const bool any = params.repeat_penalty != 1.0f || params.frequency_penalty != 0.0f ||
                     params.presence_penalty != 0.0f;
    const std::span<const int32_t> history = reqs[i].history;
    size_t n_hist = 0;
    if (any && params.repeat_last_n != 0) {
      n_hist = history.size();
      if (params.repeat_last_n > 0) n_hist = std::min(n_hist, static_cast<size_t>(params.repeat_last_n));
    }
    if (n_hist > 256) continue;
    const Pick pick{static_cast<int>(i), n_hist};
    if (n_hist > 0) {
      other.push_back(pick);
    } else if (greedy) {
      greedy_rows.push_back(pick);
    } else if (drawn.empty() || params.top_k == reqs[drawn.front().i].params->top_k) {
      drawn.push_back(pick);
    } else {
      other.push_back(pick);
    }
  }
  const size_t n_g = greedy_rows.size(), n_d = drawn.size();
  if (n_g + n_d + other.size() == 0) return out;
  // Picks (and the device's row list): the greedy rows' first (k = 0 ..), then the drawn ones',
  // then the others'.
  int32_t* rows_host = pinned_batch_ + static_cast<size_t>(rows_max_) * 257;
  for (size_t k = 0; k < n_g; ++k) rows_host[k] = batch_dev_row_[greedy_rows[k].i];
  for (size_t k = 0; k < n_d; ++k) {
    const BatchSample& r = reqs[drawn[k].i];
    rows_host[n_g + k] = batch_dev_row_[drawn[k].i];
    pinned_draws_[k] = cuda::DrawArgs{r.params->top_k, r.params->top_p, r.params->min_p,
                                      r.params->temperature, r.coin};
  }
  if (n_g + n_d > 0) {
    GEM_CUDA_CHECK(cudaMemcpyAsync(argmax_rows_dev_, rows_host, (n_g + n_d) * sizeof(int32_t),
                                   cudaMemcpyHostToDevice, stream_));
  }
  const int chunk = cuda::argmax_rows_max(V);
  for (size_t k0 = 0; k0 < n_g; k0 += static_cast<size_t>(chunk)) {
    const int n = static_cast<int>(std::min(n_g - k0, static_cast<size_t>(chunk)));
    cuda::argmax_rows(logits_dev_, V, argmax_rows_dev_ + k0, n, sample_outs_dev_ + k0,
                      sample_scratch_, stream_);
  }
  if (n_d > 0) {
    GEM_CUDA_CHECK(cudaMemcpyAsync(draws_dev_, pinned_draws_, n_d * sizeof(cuda::DrawArgs),
                                   cudaMemcpyHostToDevice, stream_));
    cuda::sample_top_k_rows(logits_dev_, V, argmax_rows_dev_ + n_g, static_cast<int>(n_d),
                            reqs[drawn.front().i].params->top_k, draws_dev_,
                            sample_outs_dev_ + n_g, topk_rows_scratch_, stream_);
  }
  for (size_t j = 0; j < other.size(); ++j) {
    const size_t k = n_g + n_d + j;
    const SamplingParams& params = *reqs[other[j].i].params;
    const std::span<const int32_t> history = reqs[other[j].i].history;
    const size_t n_hist = other[j].n_hist;
    int32_t* hist_host = pinned_batch_ + rows_max_ + k * 256;
    int32_t* hist_dev = hists_dev_ + k * 256;
    std::memcpy(hist_host, history.data() + (history.size() - n_hist), n_hist * sizeof(int32_t));
    if (n_hist > 0) {
      GEM_CUDA_CHECK(cudaMemcpyAsync(hist_dev, hist_host, n_hist * sizeof(int32_t),
                                     cudaMemcpyHostToDevice, stream_));
    }
    const cuda::PenaltyArgs pen{hist_dev, static_cast<int>(n_hist), params.repeat_penalty,
                                params.presence_penalty, params.frequency_penalty};
    const float* logits = logits_dev_ + static_cast<size_t>(batch_dev_row_[other[j].i]) * V;
    if (params.temperature <= 0.0f) {
      cuda::argmax_penalized(logits, V, pen, sample_outs_dev_ + k, sample_scratch_, stream_);
    } else {
      const cuda::DrawArgs draw{params.top_k, params.top_p, params.min_p, params.temperature,
                                reqs[other[j].i].coin};
      cuda::sample_top_k(logits, V, pen, draw, sample_outs_dev_ + k, sample_scratch_, stream_);
    }
  }
  const size_t n_picks = n_g + n_d + other.size();
  GEM_CUDA_CHECK(cudaMemcpyAsync(pinned_batch_, sample_outs_dev_, n_picks * sizeof(int32_t),
                                 cudaMemcpyDeviceToHost, stream_));
  GEM_CUDA_CHECK(cudaStreamSynchronize(stream_));
  for (size_t k = 0; k < n_g; ++k) out[greedy_rows[k].i] = pinned_batch_[k];
  for (size_t k = 0; k < n_d; ++k) out[drawn[k].i] = pinned_batch_[n_g + k];
  for (size_t j = 0; j < other.size(); ++j) out[other[j].i] = pinned_batch_[n_g + n_d + j];
  return out;
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
