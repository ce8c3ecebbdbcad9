// The CUDA backend's MTP drafter (spec §7.4–7.6) and the kept hidden rows it starts from.
//
// One draft step is the decode step's launches on one row, with the assistant's weights (uploaded
// as the target's, upload.cu): the target's embedding of c (embed), the pre-projection, four
// layers of [norm, Q product, q-norm + RoPE at P (qkv_prologue with no K/V heads), the decode
// attention over the target's cache of layer N−2 or N−1 of the slot, O product, epilogue, FFN,
// epilogue], the final norm, the tied head (raw logits) and the post-projection, whose h_next is
// written where the next step's pre-projection reads h. No cache is written. The assistant's
// weights live in the backend's allocations (freed with it); the drafter's scratch is its own.
//
// The attention: the decode kernel takes a query whose own key is already in the cache at its
// position, and sees keys pos−window+1 .. pos. The draft query at P must see 0 .. P−1 (full) and
// P−window+1 .. P−1 (sliding, llama.cpp's rule), which is what a query at P−1 with window−1 sees:
// so the attention reads step parameters {P−1} while RoPE reads {P}.
//
// draft_greedy: the arg-max on the device (sample.cuh) writes the next step's token where its
// embedding lookup reads it; the k steps are captured once per (slot, k) as one graph, so a round
// costs the h/position upload, one graph launch and the k tokens' copy back.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "backend/cuda/attention.cuh"
#include "backend/cuda/attention_decode.cuh"
#include "backend/cuda/cuda_backend_impl.cuh"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/matvec.cuh"
#include "backend/cuda/norm.cuh"
#include "backend/cuda/ops.cuh"
#include "backend/cuda/sample.cuh"
#include "model/assistant.h"

namespace gem::cuda {

// ---- Kept hidden rows ----

void CudaBackend::begin_hidden(int rows) {
  hidden_valid_ = keep_hidden_;
  if (keep_hidden_) hidden_host_.assign(static_cast<size_t>(rows) * cfg_.n_embd, 0.0f);
}

void CudaBackend::keep_hidden_rows(int src, int dst, int n) {
  const size_t E = cfg_.n_embd;
  GEM_CUDA_CHECK(cudaMemcpyAsync(hidden_host_.data() + dst * E, h_ + src * E, n * E * sizeof(float),
                                 cudaMemcpyDeviceToHost, stream_));
}

void CudaBackend::keep_batch_hidden(std::span<const int> rank) {
  for (size_t i = 0; i < rank.size(); ++i) {
    if (rank[i] >= 0) keep_hidden_rows(static_cast<int>(i), rank[i], 1);
  }
}

std::span<const float> CudaBackend::hidden(int row) {
  if (!hidden_valid_ || logits_rows_ == 0) return {};
  if (row < 0) row = logits_rows_ - 1;
  if (row >= logits_rows_) return {};
  const size_t E = cfg_.n_embd;
  return {hidden_host_.data() + static_cast<size_t>(row) * E, E};
}

std::span<const float> CudaBackend::batch_hidden(int i) {
  if (!hidden_valid_ || i < 0 || i >= batch_rows_) return {};
  const size_t E = cfg_.n_embd;
  return {hidden_host_.data() + static_cast<size_t>(i) * E, E};
}

// ---- The drafter ----

namespace {

// Draft steps one draft_greedy call may ask for (the token chain's device buffer).
constexpr int kMaxDraftSteps = 64;

}  // namespace

class CudaDrafter final : public Drafter {
 public:
  CudaDrafter(CudaBackend& backend, const model::Assistant& assistant)
      : be_(backend), asst_(assistant), cfg_(assistant.config), tuning_(drafter_tuning(backend)) {}
  ~CudaDrafter() override {
    for (auto& [key, g] : graphs_) cudaGraphExecDestroy(g);
    for (void* p : allocs_) cudaFree(p);
    if (pinned_) cudaFreeHost(pinned_);
  }

  Status init();
  Status step(int slot, int32_t token, std::span<const float> h, int pos) override;
  Result<std::vector<int32_t>> draft_greedy(int slot, int32_t root, std::span<const float> h0,
                                            int pos, int k) override;
  std::span<const float> logits() const override { return logits_host_; }
  std::span<const float> h_next() const override { return h_next_host_; }

 private:
  struct Layer {
    DevMatrix q, wo, gate, up, down;
    const float* attn_norm = nullptr;
    const float* q_norm = nullptr;
    const float* post_attn_norm = nullptr;
    const float* ffn_norm = nullptr;
    const float* post_ffw_norm = nullptr;
    const float* out_scale = nullptr;
    const double* inv_freq = nullptr;
    int target = 0;  // the target layer whose cache it reads
    int window = 0;  // the attention's window for a query at P−1 (sliding: window−1; full: 0)
  };

  float* alloc_f(size_t n) {
    void* p = nullptr;
    if (cudaMalloc(&p, (n < 64 ? 64 : n) * sizeof(float)) != cudaSuccess) {
      cudaGetLastError();  // not a launch error for the next check
      oom_ = true;
      return nullptr;
    }
    allocs_.push_back(p);
    return static_cast<float*>(p);
  }
  Q8Act alloc_q8(size_t cols) {
    Q8Act a;
    a.q = reinterpret_cast<int8_t*>(alloc_f((cols + 3) / 4));
    a.ds = reinterpret_cast<Q8Ds*>(alloc_f(cols / 32 * 2));
    return a;
  }
  Status check(int slot, int32_t token, size_t h_size, int pos) const;
  // Uploads the step's inputs: the token at tok_dev_[0], h where the pre-projection reads it,
  // the positions (RoPE P, attention P−1).
  void upload(int32_t token, std::span<const float> h, int pos);
  // Enqueues step i of a round: its token at tok_dev_[i]; logits to logits_dev_, h_next over h.
  void enqueue_step(int slot, int i);

  // The backend's choices but one: the epilogues over the assistant's 1,024-wide rows take one
  // block a row, not the decode step's cluster (H100, 12B, MTP forced 1.0: drafts 1.548 against
  // 1.633 ms a round with a Q4_0 assistant, 1.755 against 1.799 with a Q8_0 one; 4 and 2
  // blocks a row in between).
  static CudaTuning drafter_tuning(const CudaBackend& be) {
    CudaTuning t = be.tuning_;
    t.res_cluster = 1;
    return t;
  }

  CudaBackend& be_;
  const model::Assistant& asst_;
  const model::AssistantConfig& cfg_;
  const CudaTuning tuning_;
  std::vector<void*> allocs_;  // the drafter's scratch (its weights are the backend's)
  bool oom_ = false;           // an alloc_f failed

  DevMatrix pre_, post_, head_;
  const float* output_norm_ = nullptr;
  std::vector<Layer> layers_;

  float* in_ = nullptr;      // [2·Et]: the target's embedding of c · √Et, then h (h_next lands here)
  Q8Act inq_;
  float* z_ = nullptr;       // [E] residual stream
  float* a_ = nullptr;       // [E] normed input of the next product; finally y
  Q8Act aq_;
  float* qraw_ = nullptr;    // [H·Dmax] the Q product
  float* q_ = nullptr;       // [H·Dmax] normed and turned
  float* att_ = nullptr;     // [H·Dmax]
  Q8Act attq_;
  float* part_ = nullptr;    // attention splits
  float* proj_ = nullptr;    // [E]
  float* gu_ = nullptr;      // [2F]
  float* g_ = nullptr;       // [F]
  Q8Act gq_;
  float* logits_dev_ = nullptr;  // [V]
  float* argmax_scratch_ = nullptr;
  int32_t* tok_dev_ = nullptr;   // [1 + kMaxDraftSteps]: the round's token chain
  StepParams* sp_dev_ = nullptr;  // [2]: {P} for RoPE, {P−1} for the attention
  // Pinned: [0] P, [1] P−1, [2] the root token, [3..3+k) the drafts back; then h [Et] floats.
  int32_t* pinned_ = nullptr;
  float* pinned_h_ = nullptr;

  std::vector<float> logits_host_;
  std::vector<float> h_next_host_;
  std::map<std::pair<int, int>, cudaGraphExec_t> graphs_;  // (slot, k) → the round's k steps
};

Status CudaDrafter::init() {
  const model::AssistantWeights& w = asst_.weights;
  const int E = cfg_.n_embd, Et = cfg_.n_embd_out, F = cfg_.n_ff, H = cfg_.n_heads,
            V = cfg_.n_vocab;
  auto mat = [&](const model::TensorView& t, DevMatrix* out) {
    const model::TensorView* parts[] = {&t};
    return be_.upload_matrix(parts, out);
  };
  GEM_RETURN_IF_ERROR(mat(w.pre_projection, &pre_));
  GEM_RETURN_IF_ERROR(mat(w.post_projection, &post_));
  GEM_RETURN_IF_ERROR(mat(w.token_embd, &head_));
  GEM_RETURN_IF_ERROR(be_.upload_f32(w.output_norm, &output_norm_));
  int max_dim = 0;
  size_t part_floats = 0;
  const int n_target = be_.cfg_.n_layers;
  for (const model::LayerPlan& p : asst_.plan) {
    const model::AssistantLayerWeights& lw = w.layers[p.layer];
    const bool sliding = p.kind == model::AttnKind::kSliding;
    Layer L;
    L.target = model::assistant_target_layer(sliding, n_target);
    const DevLayer& T = be_.layers_[L.target];
    if (sliding && p.window < 2) {
      return errorf("cuda drafter: assistant layer %d has a sliding window of %d, expected >= 2",
                    p.layer, p.window);
    }
    L.window = sliding ? p.window - 1 : 0;
    GEM_RETURN_IF_ERROR(mat(lw.attn_q, &L.q));
    GEM_RETURN_IF_ERROR(mat(lw.attn_output, &L.wo));
    GEM_RETURN_IF_ERROR(mat(lw.ffn_gate, &L.gate));
    GEM_RETURN_IF_ERROR(mat(lw.ffn_up, &L.up));
    GEM_RETURN_IF_ERROR(mat(lw.ffn_down, &L.down));
    GEM_RETURN_IF_ERROR(be_.upload_f32(lw.attn_norm, &L.attn_norm));
    GEM_RETURN_IF_ERROR(be_.upload_f32(lw.attn_q_norm, &L.q_norm));
    GEM_RETURN_IF_ERROR(be_.upload_f32(lw.post_attention_norm, &L.post_attn_norm));
    GEM_RETURN_IF_ERROR(be_.upload_f32(lw.ffn_norm, &L.ffn_norm));
    GEM_RETURN_IF_ERROR(be_.upload_f32(lw.post_ffw_norm, &L.post_ffw_norm));
    GEM_RETURN_IF_ERROR(be_.upload_f32(lw.layer_output_scale, &L.out_scale));
    // The assistant's own rope_freqs on its full layer (proportional RoPE, as the CPU drafter).
    GEM_RETURN_IF_ERROR(be_.upload_inv_freq(p.head_dim, p.rope_theta,
                                            sliding ? nullptr : w.rope_freqs.f32(), &L.inv_freq));
    // The decode kernel's form for this layer's launch (its grouping, head width).
    AttnArgs probe{};
    probe.n = 1;
    probe.tile_in_cache = true;
    probe.n_heads = H;
    probe.n_kv = p.n_kv_heads;
    probe.head_dim = p.head_dim;
    if (!attention_decode_supported(probe)) {
      return errorf("cuda drafter: assistant layer %d (%d heads over %d KV heads of width %d) has "
                    "no decode attention kernel; expected 1, 2, 4, 8 or 16 heads per KV head and "
                    "a power-of-two width of 32..512", p.layer, H, p.n_kv_heads, p.head_dim);
    }
    max_dim = std::max(max_dim, p.head_dim);
    part_floats = std::max(part_floats, attention_part_floats(1, H, p.head_dim, T.n_splits_decode));
    layers_.push_back(L);
  }

  const size_t hd = static_cast<size_t>(H) * max_dim;
  in_ = alloc_f(2 * static_cast<size_t>(Et));
  inq_ = alloc_q8(2 * static_cast<size_t>(Et));
  z_ = alloc_f(E);
  a_ = alloc_f(E);
  aq_ = alloc_q8(E);
  qraw_ = alloc_f(hd);
  q_ = alloc_f(hd);
  att_ = alloc_f(hd);
  attq_ = alloc_q8(hd);
  part_ = alloc_f(part_floats);
  proj_ = alloc_f(E);
  gu_ = alloc_f(2 * static_cast<size_t>(F));
  g_ = alloc_f(F);
  gq_ = alloc_q8(F);
  logits_dev_ = alloc_f(V);
  argmax_scratch_ = alloc_f(argmax_scratch_floats(V));
  tok_dev_ = reinterpret_cast<int32_t*>(alloc_f(1 + kMaxDraftSteps));
  sp_dev_ = reinterpret_cast<StepParams*>(alloc_f(2 * sizeof(StepParams) / sizeof(float)));
  if (oom_) return errorf("cuda drafter: out of device memory for its scratch buffers");
  if (cudaMallocHost(&pinned_, (3 + kMaxDraftSteps) * sizeof(int32_t) + Et * sizeof(float)) !=
      cudaSuccess) {
    cudaGetLastError();
    return errorf("cuda drafter: no pinned host memory for its inputs");
  }
  pinned_h_ = reinterpret_cast<float*>(pinned_ + 3 + kMaxDraftSteps);
  logits_host_.assign(V, 0.0f);
  h_next_host_.assign(Et, 0.0f);
  return ok_status();
}

Status CudaDrafter::check(int slot, int32_t token, size_t h_size, int pos) const {
  if (slot < 0 || slot >= be_.opt_.n_slots) {
    return errorf("cuda draft: slot %d outside [0, %d)", slot, be_.opt_.n_slots);
  }
  if (pos != be_.past_[slot] || pos < 1) {
    return errorf("cuda draft: position %d, expected the slot's n_past %d (>= 1: the target cache "
                  "covers 0..P-1)", pos, be_.past_[slot]);
  }
  if (h_size != static_cast<size_t>(cfg_.n_embd_out)) {
    return errorf("cuda draft: h of %zu values, expected %d", h_size, cfg_.n_embd_out);
  }
  if (token < 0 || token >= cfg_.n_vocab) {
    return errorf("cuda draft: token %d outside the vocabulary [0, %d)", token, cfg_.n_vocab);
  }
  return ok_status();
}

void CudaDrafter::upload(int32_t token, std::span<const float> h, int pos) {
  cudaStream_t s = be_.stream_;
  pinned_[0] = pos;
  pinned_[1] = pos - 1;
  pinned_[2] = token;
  std::memcpy(pinned_h_, h.data(), h.size() * sizeof(float));
  static_assert(sizeof(StepParams) == sizeof(int32_t));
  GEM_CUDA_CHECK(cudaMemcpyAsync(sp_dev_, pinned_, 2 * sizeof(int32_t), cudaMemcpyHostToDevice, s));
  GEM_CUDA_CHECK(cudaMemcpyAsync(tok_dev_, pinned_ + 2, sizeof(int32_t), cudaMemcpyHostToDevice, s));
  GEM_CUDA_CHECK(cudaMemcpyAsync(in_ + cfg_.n_embd_out, pinned_h_, h.size() * sizeof(float),
                                 cudaMemcpyHostToDevice, s));
}

void CudaDrafter::enqueue_step(int slot, int i) {
  const int E = cfg_.n_embd, Et = cfg_.n_embd_out, F = cfg_.n_ff, H = cfg_.n_heads;
  const float eps = cfg_.rms_eps;
  const CudaTuning& t = tuning_;
  cudaStream_t s = be_.stream_;
  set_pdl(t.pdl == PdlMode::kAll);
  // z = W_pre · concat(E_target[c]·√Et, h).
  embed(be_.embd_, tok_dev_ + i, 1, std::sqrt(static_cast<float>(Et)), in_, s);
  quantize_q8(in_, 1, 2 * Et, inq_, s);
  matvec(pre_, in_, inq_, 1, z_, 0.0f, s, t);
  rms_norm(z_, layers_[0].attn_norm, 1, E, eps, a_, aq_, s, t);
  for (size_t il = 0; il < layers_.size(); ++il) {
    const Layer& L = layers_[il];
    const model::LayerPlan& p = asst_.plan[il];
    const DevLayer& T = be_.layers_[L.target];
    const int D = p.head_dim;
    matvec(L.q, a_, aq_, 1, qraw_, 0.0f, s, t);
    qkv_prologue(qraw_, 1, H, 0, D, false, L.q_norm, nullptr, eps, L.inv_freq, sp_dev_, q_,
                 nullptr, nullptr, KvDest{}, s);
    AttnArgs a{q_, nullptr, nullptr, be_.k_of(T, slot), be_.v_of(T, slot), T.kv_f16, T.ring,
               T.n_slots, 1, H, p.n_kv_heads, D, L.window, T.n_splits_decode, sp_dev_ + 1, part_,
               att_, attq_};
    a.tile_in_cache = true;
    a.max_keys = T.n_slots;
    if (T.kv_shared) a.k_shared_w = T.k_norm;
    attention(a, s, t);
    matvec(L.wo, att_, attq_, 1, proj_, 0.0f, s, t);
    residual_norm(z_, proj_, L.post_attn_norm, L.ffn_norm, 1, E, eps, a_, aq_, s, t);
    if (L.gate.type == WType::kQ4_0 && L.up.type == WType::kQ4_0) {
      matvec_gated(L.gate, L.up, aq_, 1, g_, s, t);
    } else {
      matvec(L.gate, a_, aq_, 1, gu_, 0.0f, s, t);
      matvec(L.up, a_, aq_, 1, gu_ + F, 0.0f, s, t);
      gelu_mul(gu_, 1, F, g_, s);
    }
    if (matvec_reads_q8(L.down.type)) quantize_q8(g_, 1, F, gq_, s);
    matvec(L.down, g_, gq_, 1, proj_, 0.0f, s, t);
    const float* w_next = il + 1 == layers_.size() ? output_norm_ : layers_[il + 1].attn_norm;
    residual_norm_scale(z_, proj_, L.post_ffw_norm, L.out_scale, w_next, 1, E, eps, a_, aq_, s, t);
  }
  // a_ = y: raw logits from the tied table, h_next over h (the next step's input).
  matvec(head_, a_, aq_, 1, logits_dev_, 0.0f, s, t);
  matvec(post_, a_, aq_, 1, in_ + Et, 0.0f, s, t);
}

Status CudaDrafter::step(int slot, int32_t token, std::span<const float> h, int pos) {
  GEM_RETURN_IF_ERROR(check(slot, token, h.size(), pos));
  cudaStream_t s = be_.stream_;
  upload(token, h, pos);
  enqueue_step(slot, 0);
  GEM_CUDA_CHECK(cudaMemcpyAsync(logits_host_.data(), logits_dev_, logits_host_.size() * sizeof(float),
                                 cudaMemcpyDeviceToHost, s));
  GEM_CUDA_CHECK(cudaMemcpyAsync(h_next_host_.data(), in_ + cfg_.n_embd_out,
                                 h_next_host_.size() * sizeof(float), cudaMemcpyDeviceToHost, s));
  GEM_CUDA_CHECK(cudaStreamSynchronize(s));
  return ok_status();
}

Result<std::vector<int32_t>> CudaDrafter::draft_greedy(int slot, int32_t root,
                                                       std::span<const float> h0, int pos, int k) {
  GEM_RETURN_IF_ERROR(check(slot, root, h0.size(), pos));
  if (k < 1 || k > kMaxDraftSteps) {
    return errorf("cuda draft: %d steps asked, expected 1..%d", k, kMaxDraftSteps);
  }
  cudaStream_t s = be_.stream_;
  upload(root, h0, pos);
  auto it = graphs_.find({slot, k});
  if (it == graphs_.end()) {
    const PenaltyArgs none{nullptr, 0, 1.0f, 0.0f, 0.0f};
    cudaGraph_t graph = nullptr;
    GEM_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < k; ++i) {
      enqueue_step(slot, i);
      argmax_penalized(logits_dev_, cfg_.n_vocab, none, tok_dev_ + i + 1, argmax_scratch_, s);
    }
    GEM_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
    cudaGraphExec_t exec = nullptr;
    GEM_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    cudaGraphDestroy(graph);
    it = graphs_.emplace(std::make_pair(slot, k), exec).first;
  }
  GEM_CUDA_CHECK(cudaGraphLaunch(it->second, s));
  GEM_CUDA_CHECK(cudaMemcpyAsync(pinned_ + 3, tok_dev_ + 1, k * sizeof(int32_t),
                                 cudaMemcpyDeviceToHost, s));
  GEM_CUDA_CHECK(cudaStreamSynchronize(s));
  return std::vector<int32_t>(pinned_ + 3, pinned_ + 3 + k);
}

Result<std::unique_ptr<Drafter>> CudaBackend::make_drafter(const model::Assistant& assistant) {
  GEM_RETURN_IF_ERROR(model::check_pairing(assistant, model_));
  auto d = std::make_unique<CudaDrafter>(*this, assistant);
  GEM_RETURN_IF_ERROR(d->init());
  return std::unique_ptr<Drafter>(std::move(d));
}

}  // namespace gem::cuda
