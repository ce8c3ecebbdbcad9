// Attention of the CPU fast path at real Gemma 4 shapes and depth. Decode (--rows 1, the
// default): beside the Q4_0 decode matmuls of the same layers, to show whether attention
// dominates a decode step. Prompt (--rows N > 1): a tile of N query tokens after `depth` cached
// positions (the cache in f16 or f32, the tile's own keys in f32, as forward_cpu hands them),
// per layer kind, with its GFLOP/s (2 · 2 · head_dim per visible (query head, key) pair).
// GEM_CPU_ISA=avx2|scalar picks a lower path (isa.h).
//   gem_attention_bench [--depth N] [--rows N] [--threads N] [--model 12b|31b] [--kv f32|f16]
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/isa.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/ops_fast.h"
#include "base/dtype.h"
#include "base/timer.h"
#include "model/model.h"

using namespace gem;
using namespace gem::cpu;

namespace {

struct Shape {
  int n_embd, n_ff, n_heads, kv_sliding, kv_full, n_sliding, n_full;
};

// Milliseconds per attention call of one layer: `rows` query tokens at positions depth ..
// depth + rows - 1. *flops: the call's multiply-adds × 2 over the visible (query head, key) pairs.
double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// *cpu_ms: the process's CPU milliseconds per call (all threads; on a shared host the wall
// time also counts the time the threads waited for a core).
double time_attention(int n_heads, int n_kv, int head_dim, int window, int depth, int rows,
                      bool f16, ThreadPool& pool, double* flops = nullptr, double* cpu_ms = nullptr) {
  const int slots = window > 0 ? std::min(window + model::kRingSpare, depth) : depth;
  const size_t n = static_cast<size_t>(n_kv) * slots * head_dim;
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 0.3f);
  std::vector<float> k(n), v(n);
  for (size_t i = 0; i < n; ++i) {
    k[i] = nd(rng);
    v[i] = nd(rng);
  }
  std::vector<uint16_t> k16(n), v16(n);
  for (size_t i = 0; i < n; ++i) {
    k16[i] = f32_to_fp16(k[i]);
    v16[i] = f32_to_fp16(v[i]);
  }
  std::vector<int32_t> pos(slots);
  for (int s = 0; s < slots; ++s) pos[s] = depth - slots + s;  // a full ring (slot order = age)
  KvSegment cache;
  cache.k = f16 ? static_cast<const void*>(k16.data()) : k.data();
  cache.v = f16 ? static_cast<const void*>(v16.data()) : v.data();
  cache.f16 = f16;
  cache.head_stride = static_cast<int64_t>(slots) * head_dim;
  cache.slot_stride = head_dim;
  cache.n_slots = slots;
  if (window > 0) cache.pos = pos.data();
  std::vector<float> tk(static_cast<size_t>(rows) * n_kv * head_dim), tv(tk.size());
  for (size_t i = 0; i < tk.size(); ++i) {
    tk[i] = fp16_to_f32(f32_to_fp16(nd(rng)));
    tv[i] = fp16_to_f32(f32_to_fp16(nd(rng)));
  }
  KvSegment tile;
  tile.k = tk.data();
  tile.v = tv.data();
  tile.head_stride = head_dim;
  tile.slot_stride = static_cast<int64_t>(n_kv) * head_dim;
  tile.pos_base = depth;
  tile.n_slots = rows;
  const KvSegment segs[2] = {cache, tile};
  std::vector<float> q(static_cast<size_t>(rows) * n_heads * head_dim), out(q.size());
  for (float& x : q) x = nd(rng);
  std::vector<int32_t> qp(rows);
  double pairs = 0;
  for (int t = 0; t < rows; ++t) {
    qp[t] = depth + t;
    pairs += window > 0 ? std::min(window, depth + t + 1) : depth + t + 1;
  }
  if (flops != nullptr) *flops = pairs * n_heads * head_dim * 4.0;
  AttentionScratch scratch;
  scratch.init(pool.size(), n_heads, n_kv, n_kv, head_dim, slots + rows);
  attention_fast(q.data(), qp.data(), rows, n_heads, n_kv, head_dim, window, 1.0f, segs, out.data(), pool,
                 scratch);
  const int reps = rows > 1 ? 2 : 10;
  const double cpu0 = cpu_seconds();
  Timer t;
  for (int r = 0; r < reps; ++r) {
    attention_fast(q.data(), qp.data(), rows, n_heads, n_kv, head_dim, window, 1.0f, segs, out.data(),
                   pool, scratch);
  }
  if (cpu_ms != nullptr) *cpu_ms = (cpu_seconds() - cpu0) / reps * 1e3;
  return t.seconds() / reps * 1e3;
}

// Milliseconds per Q4_0 decode matmul [rows, cols] (random blocks with small scales).
double time_matmul(int rows, int cols, ThreadPool& pool) {
  const size_t bytes = static_cast<size_t>(rows) * cols / kQK4_0 * sizeof(BlockQ4_0);
  std::vector<uint8_t> w(bytes);
  std::mt19937 rng(2);
  for (size_t i = 0; i < bytes; ++i) w[i] = static_cast<uint8_t>(rng());
  for (size_t b = 0; b < bytes / sizeof(BlockQ4_0); ++b) {
    const uint16_t d = f32_to_fp16(0.01f);
    std::memcpy(&w[b * sizeof(BlockQ4_0)], &d, 2);
  }
  model::TensorView tv;
  tv.type = DType::kQ4_0;
  tv.data = w.data();
  tv.rows = rows;
  tv.cols = cols;
  tv.n_bytes = bytes;
  std::vector<float> x(cols, 0.5f), y(rows);
  matmul(tv, x.data(), 1, y.data(), pool);
  const int reps = 5;
  Timer t;
  for (int r = 0; r < reps; ++r) matmul(tv, x.data(), 1, y.data(), pool);
  return t.seconds() / reps * 1e3;
}

}  // namespace

int main(int argc, char** argv) {
  int depth = 4096, threads = 0, rows = 1;
  std::string model = "12b", kv = "f16";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--depth")) depth = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--rows")) rows = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--model")) model = argv[i + 1];
    if (!std::strcmp(argv[i], "--kv")) kv = argv[i + 1];
  }
  const Shape s = model == "31b" ? Shape{5376, 21504, 32, 16, 4, 50, 10} : Shape{3840, 15360, 16, 8, 1, 40, 8};
  ThreadPool pool(threads);
  const bool f16 = kv == "f16";
  std::printf("path %s\n", isa_description().c_str());
  if (rows > 1) {
    double fl_s = 0, fl_f = 0, cpu_s = 0, cpu_f = 0;
    const double ms_s = time_attention(s.n_heads, s.kv_sliding, 256, 1024, depth, rows, f16, pool, &fl_s, &cpu_s);
    const double ms_f = time_attention(s.n_heads, s.kv_full, 512, 0, depth, rows, f16, pool, &fl_f, &cpu_f);
    std::printf("model %s, %d query tokens after depth %d, KV %s, %d threads\n", model.c_str(), rows,
                depth, kv.c_str(), pool.size());
    std::printf("per layer: sliding %.1f ms wall, %.1f ms CPU (%.1f GFLOP per CPU-second); "
                "full %.1f ms wall, %.1f ms CPU (%.1f GFLOP per CPU-second)\n",
                ms_s, cpu_s, fl_s / cpu_s * 1e-6, ms_f, cpu_f, fl_f / cpu_f * 1e-6);
    std::printf("per prompt tile: attention %.2f s wall, %.2f CPU-s over %d sliding + %d full layers\n",
                (s.n_sliding * ms_s + s.n_full * ms_f) * 1e-3, (s.n_sliding * cpu_s + s.n_full * cpu_f) * 1e-3,
                s.n_sliding, s.n_full);
    return 0;
  }
  double cpu_sliding = 0, cpu_full = 0;
  const double att_sliding =
      time_attention(s.n_heads, s.kv_sliding, 256, 1024, depth, 1, f16, pool, nullptr, &cpu_sliding);
  const double att_full = time_attention(s.n_heads, s.kv_full, 512, 0, depth, 1, f16, pool, nullptr, &cpu_full);
  // One layer's matmuls, approximated by the FFN matrix (3 per layer) and the attention
  // projections scaled from it by their weight counts.
  const double ffn = time_matmul(s.n_ff, s.n_embd, pool);
  const double per_weight = ffn / (static_cast<double>(s.n_ff) * s.n_embd);
  const double attn_w_sliding = (2.0 * s.n_heads * 256 + 2.0 * s.kv_sliding * 256) * s.n_embd;
  const double attn_w_full = (2.0 * s.n_heads * 512 + 1.0 * s.kv_full * 512) * s.n_embd;
  const double mm = s.n_sliding * (3 * ffn + per_weight * attn_w_sliding) +
                    s.n_full * (3 * ffn + per_weight * attn_w_full);
  const double att = s.n_sliding * att_sliding + s.n_full * att_full;
  std::printf("model %s, depth %d, KV %s, %d threads\n", model.c_str(), depth, kv.c_str(), pool.size());
  std::printf("attention per layer: sliding %.3f ms (%.3f CPU-ms), full %.3f ms (%.3f CPU-ms)\n",
              att_sliding, cpu_sliding, att_full, cpu_full);
  std::printf("per decode token: attention %.1f ms, layer matmuls (Q4_0, estimated) %.1f ms -> "
              "attention is %.1f%% of the two\n", att, mm, 100.0 * att / (att + mm));
  return 0;
}
