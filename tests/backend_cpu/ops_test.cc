// The reference ops against hand-computed values and the spec's worked numbers; the fast ops,
// on every path this CPU runs (isa.h: scalar, AVX2, AVX-512), against the reference on seeded
// random inputs (awkward sizes, f16 storage, rings, GQA, and the 12B/31B layer shapes) with
// tolerances derived from float rounding; the KV cache's ring, positions and journal.
// GEM_TEST_SEED=N draws other inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "backend/cpu/kv_cache.h"
#include "backend/cpu/ops_fast.h"
#include "backend/cpu/ops_ref.h"
#include "backend/cpu/thread_pool.h"
#include "base/dtype.h"

namespace gem::cpu {
namespace {

uint32_t base_seed() {
  const char* s = std::getenv("GEM_TEST_SEED");
  return s != nullptr ? static_cast<uint32_t>(std::strtoul(s, nullptr, 10)) : 20261202u;
}

// The paths this CPU runs.
std::vector<Isa> paths() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::kScalar, Isa::kNeon, Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512}) {
    if (isa_supported(isa)) out.push_back(isa);
  }
  return out;
}

std::string path_name(Isa isa) { return std::string(isa_name(isa)); }

constexpr double kU = 0x1p-24;  // unit roundoff of float

std::vector<float> random_vec(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

TEST(OpsRef, RmsNorm) {
  const float x[] = {3.0f, 4.0f, 0.0f, -2.0f};
  const float w[] = {1.0f, 2.0f};
  float y[4];
  rms_norm(x, w, 2, 2, 0.0f, y);
  const float r0 = std::sqrt(12.5f), r1 = std::sqrt(2.0f);
  EXPECT_NEAR(y[0], 3.0f / r0, 1e-6);
  EXPECT_NEAR(y[1], 2.0f * 4.0f / r0, 1e-6);
  EXPECT_NEAR(y[2], 0.0f, 1e-6);
  EXPECT_NEAR(y[3], 2.0f * -2.0f / r1, 1e-6);
  rms_norm(x, nullptr, 1, 4, 1e-6f, y);  // RMS₀: unit mean square
  double ms = 0;
  for (int i = 0; i < 4; ++i) ms += y[i] * y[i];
  EXPECT_NEAR(ms / 4, 1.0, 1e-5);
}

TEST(OpsRef, RopeInvFreqProportional) {
  // spec §4.4: full layers, head 512, θ 1e6, rope_freqs 1.0 × 64 then 1e30.
  std::vector<float> ff(256, 1e30f);
  for (int i = 0; i < 64; ++i) ff[i] = 1.0f;
  std::vector<double> inv(256);
  rope_inv_freq(512, 1e6f, ff.data(), inv.data());
  EXPECT_NEAR(inv[0], 1.0, 1e-12);
  EXPECT_NEAR(inv[1], 0.947464, 1e-6);
  EXPECT_NEAR(inv[32], 0.177828, 1e-6);
  EXPECT_NEAR(inv[63], 0.0333762, 1e-7);
  EXPECT_LT(inv[64], 1e-29);
  // Sliding: head 256, θ 1e4, no factors.
  rope_inv_freq(256, 1e4f, nullptr, inv.data());
  EXPECT_NEAR(inv[1], 0.930572, 1e-6);
  EXPECT_NEAR(inv[64], 0.01, 1e-9);
  EXPECT_NEAR(inv[127], 1.0746e-4, 1e-8);
}

TEST(OpsRef, RopeNeoxPairsHalves) {
  // head_dim 4: pairs (0, 2) and (1, 3); θ 100 → inv_freq {1, 0.1}.
  double inv[2];
  rope_inv_freq(4, 100.0f, nullptr, inv);
  EXPECT_NEAR(inv[1], 0.1, 1e-12);
  float x[8] = {1, 0, 0, 0, 0, 1, 0, 0};  // 2 heads
  const int32_t pos[] = {3};
  rope_neox(x, 1, 2, 4, pos, inv);
  EXPECT_NEAR(x[0], std::cos(3.0), 1e-6);
  EXPECT_NEAR(x[2], std::sin(3.0), 1e-6);
  EXPECT_NEAR(x[1], 0.0, 1e-7);
  EXPECT_NEAR(x[3], 0.0, 1e-7);
  EXPECT_NEAR(x[5], std::cos(0.3), 1e-6);
  EXPECT_NEAR(x[7], std::sin(0.3), 1e-6);
  // Position 0 and a 1e30 factor are the identity.
  float y[4] = {0.5f, -1.5f, 2.0f, 3.0f};
  const float ff[2] = {1e30f, 1e30f};
  rope_inv_freq(4, 100.0f, ff, inv);
  const int32_t far[] = {100000};
  rope_neox(y, 1, 1, 4, far, inv);
  EXPECT_FLOAT_EQ(y[0], 0.5f);
  EXPECT_FLOAT_EQ(y[1], -1.5f);
  EXPECT_FLOAT_EQ(y[2], 2.0f);
  EXPECT_FLOAT_EQ(y[3], 3.0f);
}

TEST(OpsRef, GeluAndSoftcap) {
  EXPECT_NEAR(gelu_tanh(1.0f), 0.841192, 1e-6);
  EXPECT_NEAR(gelu_tanh(-1.0f), -0.158808, 1e-6);
  EXPECT_EQ(gelu_tanh(0.0f), 0.0f);
  float g[2] = {1.0f, 2.0f};
  const float u[2] = {2.0f, -1.0f};
  gelu_tanh_mul(g, u, 2);
  EXPECT_NEAR(g[0], 2 * 0.841192, 2e-6);
  EXPECT_NEAR(g[1], -1.954598, 2e-6);
  float z[3] = {45.0f, 10.0f, -10.0f};  // spec §4.6
  softcap(z, 3, 30.0f);
  EXPECT_NEAR(z[0], 27.154, 1e-3);
  EXPECT_NEAR(z[1], 9.645, 1e-3);
  EXPECT_NEAR(z[2], -9.645, 1e-3);
}

TEST(OpsRef, AttentionHandComputed) {
  // One query, head_dim 2, keys at positions 0, 1, 2 (one segment); scale 1.
  const float q[] = {1.0f, 2.0f};
  const float k[] = {1.0f, 0.0f, 0.0f, 1.0f, 1.0f, 1.0f};
  const float v[] = {1.0f, 0.0f, 0.0f, 1.0f, 2.0f, 2.0f};
  KvSegment seg;
  seg.k = k;
  seg.v = v;
  seg.head_stride = 6;
  seg.slot_stride = 2;
  seg.n_slots = 3;
  float out[2];
  const int32_t qpos[] = {2};
  attention(q, qpos, 1, 1, 1, 2, 0, 1.0f, {&seg, 1}, out);
  const double e0 = std::exp(1.0), e1 = std::exp(2.0), e2 = std::exp(3.0), s = e0 + e1 + e2;
  EXPECT_NEAR(out[0], (e0 * 1 + e2 * 2) / s, 1e-6);
  EXPECT_NEAR(out[1], (e1 * 1 + e2 * 2) / s, 1e-6);
  // Window 2: keys 1, 2 only.
  attention(q, qpos, 1, 1, 1, 2, 2, 1.0f, {&seg, 1}, out);
  EXPECT_NEAR(out[0], (e2 * 2) / (e1 + e2), 1e-6);
  EXPECT_NEAR(out[1], (e1 + e2 * 2) / (e1 + e2), 1e-6);
  // Causal: a query at position 0 sees key 0 only.
  const int32_t qpos0[] = {0};
  attention(q, qpos0, 1, 1, 1, 2, 0, 1.0f, {&seg, 1}, out);
  EXPECT_NEAR(out[0], 1.0, 1e-6);
  EXPECT_NEAR(out[1], 0.0, 1e-6);
}

TEST(OpsRef, AttentionGqaMapping) {
  // 4 query heads, 2 KV heads: heads 0,1 read KV head 0, heads 2,3 KV head 1. One key per head,
  // V constant per KV head, so the output is that constant.
  const int hd = 4;
  std::vector<float> q = random_vec(4 * hd, 1);
  std::vector<float> k = random_vec(2 * hd, 2);
  std::vector<float> v(2 * hd);
  for (int d = 0; d < hd; ++d) {
    v[d] = 10.0f;
    v[hd + d] = -3.0f;
  }
  KvSegment seg;
  seg.k = k.data();
  seg.v = v.data();
  seg.head_stride = hd;  // [1 slot][2 heads][hd] as a tile stores it
  seg.slot_stride = 2 * hd;
  seg.n_slots = 1;
  std::vector<float> out(4 * hd);
  const int32_t qpos[] = {0};
  attention(q.data(), qpos, 1, 4, 2, hd, 0, 1.0f, {&seg, 1}, out.data());
  for (int j = 0; j < 4; ++j) {
    for (int d = 0; d < hd; ++d) EXPECT_NEAR(out[j * hd + d], j < 2 ? 10.0f : -3.0f, 1e-5) << j;
  }
}

// Random attention problem: a ring segment (some empty slots, rotated start) plus a tile.
struct AttnCase {
  int n_tokens, n_heads, n_kv_heads, head_dim, window, ring_slots, pos0;
  bool f16;
};

std::string describe(const AttnCase& c, uint32_t seed) {
  return "tokens " + std::to_string(c.n_tokens) + " heads " + std::to_string(c.n_heads) + "/" +
         std::to_string(c.n_kv_heads) + " hd " + std::to_string(c.head_dim) + " window " +
         std::to_string(c.window) + " ring " + std::to_string(c.ring_slots) + " pos0 " +
         std::to_string(c.pos0) + " f16 " + std::to_string(c.f16) + " seed " + std::to_string(seed);
}

// Error bound of the float attention against the double reference, per output element, from
// float rounding (u = 2^-24) and the vector e^x (relative error < 2e-7):
//   a score q·k over head_dim products is off by at most (head_dim + 5)·u·Σ|q_i·k_i| (the +5:
//   the scale, and x - m as e^x's argument); a score error Δ moves every softmax weight by a
//   relative 2Δ at most; Σ e and Σ e·v over n keys in float add (n + 2)·u each, relative to
//   their absolute sums; each of the ≤ n/256 + 2 chunk merges and the division a few u more.
// So |out - ref| ≤ (2·Δmax + 4·2e-7 + (2n + 3·(n/256 + 2) + 8)·u) · Σ p|v|, where Σ p|v| is the
// reference attention of |V| and Δmax is the largest score bound over the keys a row sees.
std::vector<double> attention_bound(const AttnCase& c, const std::vector<float>& q,
                                    const KvSegment (&segs)[2], const int32_t* qpos,
                                    const std::vector<float>& abs_ref) {
  const int group = c.n_heads / c.n_kv_heads;
  std::vector<double> bound(abs_ref.size());
  for (int t = 0; t < c.n_tokens; ++t) {
    for (int h = 0; h < c.n_heads; ++h) {
      const float* qr = q.data() + (static_cast<size_t>(t) * c.n_heads + h) * c.head_dim;
      const int g = h / group;
      double worst = 0.0;
      int n = 0;
      for (const KvSegment& seg : segs) {
        for (int s = 0; s < seg.n_slots; ++s) {
          if (!attention_visible(qpos[t], seg.slot_pos(s), c.window)) continue;
          ++n;
          const int64_t base = g * seg.head_stride + s * seg.slot_stride;
          double sum = 0.0;
          for (int i = 0; i < c.head_dim; ++i) {
            const double k = seg.f16 ? fp16_to_f32(static_cast<const uint16_t*>(seg.k)[base + i])
                                     : static_cast<const float*>(seg.k)[base + i];
            sum += std::fabs(qr[i] * k);
          }
          worst = std::max(worst, sum);
        }
      }
      const double delta = (c.head_dim + 5) * kU * worst;
      const double rel = 2 * delta + 8e-7 + (2.0 * n + 3.0 * (n / 256 + 2) + 8) * kU;
      for (int d = 0; d < c.head_dim; ++d) {
        const size_t i = (static_cast<size_t>(t) * c.n_heads + h) * c.head_dim + d;
        bound[i] = rel * abs_ref[i] + 1e-30;
      }
    }
  }
  return bound;
}

// Returns, per path of paths(), the largest |error| / bound.
std::vector<double> run_attention_case(const AttnCase& c, uint32_t seed, ThreadPool& pool) {
  const std::string what = describe(c, seed);
  SCOPED_TRACE(what);
  const int kv_width = c.n_kv_heads * c.head_dim;
  std::vector<float> q = random_vec(static_cast<size_t>(c.n_tokens) * c.n_heads * c.head_dim, seed, 0.5f);
  std::vector<float> ring_k = random_vec(static_cast<size_t>(c.ring_slots) * kv_width, seed + 1, 0.5f);
  std::vector<float> ring_v = random_vec(ring_k.size(), seed + 2);
  std::vector<float> tile_k = random_vec(static_cast<size_t>(c.n_tokens) * kv_width, seed + 3, 0.5f);
  std::vector<float> tile_v = random_vec(tile_k.size(), seed + 4);
  std::vector<uint16_t> ring_k16(ring_k.size()), ring_v16(ring_v.size());
  for (size_t i = 0; i < ring_k.size(); ++i) {
    ring_k16[i] = f32_to_fp16(ring_k[i]);
    ring_v16[i] = f32_to_fp16(ring_v[i]);
  }
  // Ring slot s holds the latest position < pos0 with p % slots == s (empty when none).
  std::vector<int32_t> ring_pos(c.ring_slots, -1);
  for (int p = std::max(0, c.pos0 - c.ring_slots); p < c.pos0; ++p) ring_pos[p % c.ring_slots] = p;
  KvSegment ring;
  ring.k = c.f16 ? static_cast<const void*>(ring_k16.data()) : ring_k.data();
  ring.v = c.f16 ? static_cast<const void*>(ring_v16.data()) : ring_v.data();
  ring.f16 = c.f16;
  ring.head_stride = static_cast<int64_t>(c.ring_slots) * c.head_dim;
  ring.slot_stride = c.head_dim;
  ring.pos = ring_pos.data();
  ring.n_slots = c.ring_slots;
  ring.first_slot = c.pos0 % c.ring_slots;
  KvSegment tile;
  tile.k = tile_k.data();
  tile.v = tile_v.data();
  tile.head_stride = c.head_dim;
  tile.slot_stride = kv_width;
  tile.pos_base = c.pos0;
  tile.n_slots = c.n_tokens;
  const KvSegment segs[2] = {ring, tile};
  std::vector<int32_t> qpos(c.n_tokens);
  for (int t = 0; t < c.n_tokens; ++t) qpos[t] = c.pos0 + t;
  std::vector<float> want(q.size());
  attention(q.data(), qpos.data(), c.n_tokens, c.n_heads, c.n_kv_heads, c.head_dim, c.window, 1.0f,
            segs, want.data());
  // Σ p|v|: the reference with |V| (f16 magnitudes stay exact in f16).
  std::vector<float> ring_va(ring_v.size()), tile_va(tile_v.size());
  std::vector<uint16_t> ring_va16(ring_v.size());
  for (size_t i = 0; i < ring_v.size(); ++i) {
    ring_va[i] = std::fabs(ring_v[i]);
    ring_va16[i] = ring_v16[i] & 0x7FFF;
  }
  for (size_t i = 0; i < tile_v.size(); ++i) tile_va[i] = std::fabs(tile_v[i]);
  KvSegment ring_abs = ring, tile_abs = tile;
  ring_abs.v = c.f16 ? static_cast<const void*>(ring_va16.data()) : ring_va.data();
  tile_abs.v = tile_va.data();
  const KvSegment segs_abs[2] = {ring_abs, tile_abs};
  std::vector<float> abs_ref(q.size());
  attention(q.data(), qpos.data(), c.n_tokens, c.n_heads, c.n_kv_heads, c.head_dim, c.window, 1.0f,
            segs_abs, abs_ref.data());
  const std::vector<double> bound = attention_bound(c, q, segs, qpos.data(), abs_ref);

  AttentionScratch scratch;
  scratch.init(pool.size(), c.n_heads, c.n_kv_heads, c.n_kv_heads, c.head_dim,
               c.ring_slots + c.n_tokens);
  std::vector<double> worst_of_path;
  for (Isa isa : paths()) {
    SCOPED_TRACE("path " + path_name(isa));
    std::vector<float> got(q.size(), std::nanf(""));
    attention_fast(q.data(), qpos.data(), c.n_tokens, c.n_heads, c.n_kv_heads, c.head_dim, c.window,
                   1.0f, segs, got.data(), pool, scratch, isa);
    // Token by token (the decode split over chunks) gives the same bits as the tile.
    for (int t = 0; t < c.n_tokens; ++t) {
      KvSegment one = tile;
      one.n_slots = t + 1;
      const KvSegment segs1[2] = {ring, one};
      std::vector<float> row(static_cast<size_t>(c.n_heads) * c.head_dim);
      attention_fast(q.data() + t * row.size(), &qpos[t], 1, c.n_heads, c.n_kv_heads, c.head_dim,
                     c.window, 1.0f, segs1, row.data(), pool, scratch, isa);
      for (size_t i = 0; i < row.size(); ++i) {
        EXPECT_EQ(row[i], got[t * row.size() + i]) << "token " << t << " index " << i;
        if (row[i] != got[t * row.size() + i]) return {};
      }
    }
    int bad = 0;
    double worst = 0.0;
    for (size_t i = 0; i < want.size(); ++i) {
      const double e = std::fabs(double(want[i]) - got[i]);
      worst = std::max(worst, e / bound[i]);
      if (!(e <= bound[i]) && bad++ < 3) {
        ADD_FAILURE() << "index " << i << ": got " << got[i] << " want " << want[i] << " bound "
                      << bound[i];
      }
    }
    EXPECT_EQ(bad, 0);
    worst_of_path.push_back(worst);
  }
  return worst_of_path;
}

void run_attention_cases(std::span<const AttnCase> cases, uint32_t seed, ThreadPool& pool) {
  const std::vector<Isa> p = paths();
  std::vector<double> worst(p.size(), 0.0);
  for (const AttnCase& c : cases) {
    const std::vector<double> w = run_attention_case(c, seed += 10, pool);
    for (size_t i = 0; i < w.size(); ++i) worst[i] = std::max(worst[i], w[i]);
  }
  for (size_t i = 0; i < p.size(); ++i) {
    std::printf("attention, path %s: largest error %.3g of its bound\n", path_name(p[i]).c_str(), worst[i]);
  }
}

TEST(OpsFast, AttentionMatchesReference) {
  ThreadPool pool(3);
  const AttnCase cases[] = {
      {1, 4, 2, 32, 16, 16, 0, false},   {1, 4, 2, 32, 16, 16, 37, false},
      {5, 4, 2, 32, 16, 16, 37, true},   {17, 8, 4, 32, 8, 8, 3, false},
      {3, 16, 1, 512, 0, 40, 40, true},  {7, 2, 2, 127, 5, 5, 11, false},
      {1, 32, 4, 256, 0, 300, 300, false}, {33, 4, 1, 64, 16, 16, 100, true},
      {2, 16, 1, 512, 0, 1000, 1000, true},  {300, 4, 2, 32, 0, 600, 600, false},
      {1, 16, 8, 256, 1024, 1024, 5000, false},
      // Prompt blocks (register tiles need head_dim % 16 == 0): a chunk that holds cached f16
      // keys and the tile's f32 ones (pos0 = 250), a window shorter than a block's span (rows
      // that see no key of a chunk the block visits), block and tile remainders, one KV head
      // of 512, a head_dim of 16 · odd (the AVX-512 V tile's 16-wide tail), and head_dims the
      // tiles do not take (the plain path).
      {40, 16, 8, 256, 24, 300, 250, true},  {70, 16, 1, 512, 0, 200, 230, true},
      {37, 6, 2, 48, 0, 10, 5, false},       {9, 4, 2, 40, 0, 8, 8, true},
      {64, 8, 4, 16, 7, 7, 260, true},
  };
  run_attention_cases(cases, base_seed(), pool);
}

// The real layer shapes (model.cc's profiles) at depth: 12B sliding (16 query heads over 8 KV
// heads of 256, window 1024, a full ring of window + kRingSpare slots) and full (16 over 1 of
// 512), 31B full (32 over 4 of 512); prompt tiles that cross a chunk boundary, f16 caches.
TEST(OpsFast, AttentionAtModelShapes) {
  ThreadPool pool(2);
  const int ring = model::kv_ring_slots(1024);
  const AttnCase cases[] = {
      {12, 16, 8, 256, 1024, ring, 4090, true},  // 12B sliding, past four windows
      {1, 16, 8, 256, 1024, ring, 4100, true},   // 12B sliding decode
      {8, 16, 1, 512, 0, 1500, 1500, true},      // 12B full
      {5, 32, 4, 512, 0, 600, 600, true},        // 31B full
  };
  run_attention_cases(cases, base_seed() + 1000, pool);
}

// rms_norm: the mean square is a float dot product of n_cols terms (≤ (n_cols + 3)·u relative,
// halved by the square root), then the square root, division and two products: ≤ ((n_cols + 3)/2
// + 6)·u relative per output. dot: (n + 3)·u·Σ|a·b|. GELU: the fast path's float e^x (see
// GeluOverItsWholeRange), 1e-5 relative here on moderate inputs. The 12B widths: n_embd 3840, and
// head rows of 256 and 512 (the Q/K/V norms).
TEST(OpsFast, NormGeluDotMatchReference) {
  ThreadPool pool(2);
  uint32_t seed = base_seed() + 2000;
  for (int cols : {1, 3, 32, 127, 256, 512, 3840}) {
    const int rows = cols >= 256 ? 48 : 5;
    SCOPED_TRACE("cols " + std::to_string(cols) + " seed " + std::to_string(seed + 1));
    std::vector<float> x = random_vec(static_cast<size_t>(rows) * cols, ++seed, 3.0f);
    std::vector<float> w = random_vec(cols, ++seed);
    std::vector<float> want(x.size()), want_nw(x.size());
    rms_norm(x.data(), w.data(), rows, cols, 1e-6f, want.data());
    rms_norm(x.data(), nullptr, rows, cols, 1e-6f, want_nw.data());
    std::vector<float> g1 = x;
    gelu_tanh_mul(g1.data(), want.data(), static_cast<int64_t>(x.size()));
    std::vector<uint16_t> w16(cols);
    double d32 = 0, d16 = 0, a32 = 0, a16 = 0;
    for (int i = 0; i < cols; ++i) {
      w16[i] = f32_to_fp16(w[i]);
      d32 += double(x[i]) * w[i];
      d16 += double(x[i]) * fp16_to_f32(w16[i]);
      a32 += std::fabs(double(x[i]) * w[i]);
      a16 += std::fabs(double(x[i]) * fp16_to_f32(w16[i]));
    }
    const double norm_rel = ((cols + 3) / 2.0 + 6) * kU;
    for (Isa isa : paths()) {
      SCOPED_TRACE("path " + path_name(isa));
      std::vector<float> got(x.size()), got_nw(x.size());
      rms_norm_fast(x.data(), w.data(), rows, cols, 1e-6f, got.data(), pool, isa);
      rms_norm_fast(x.data(), nullptr, rows, cols, 1e-6f, got_nw.data(), pool, isa);
      for (size_t i = 0; i < x.size(); ++i) {
        ASSERT_NEAR(got[i], want[i], norm_rel * std::fabs(want[i]) + 1e-30) << i;
        ASSERT_NEAR(got_nw[i], want_nw[i], norm_rel * std::fabs(want_nw[i]) + 1e-30) << i;
      }
      std::vector<float> g2 = x;
      gelu_tanh_mul_fast(g2.data(), want.data(), static_cast<int64_t>(x.size()), pool, isa);
      for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(g2[i], g1[i], 1e-5 * (1 + std::fabs(g1[i])));
      EXPECT_NEAR(dot_f32(x.data(), w.data(), cols, isa), d32, (cols + 3) * kU * a32 + 1e-30);
      EXPECT_NEAR(dot_f16(x.data(), w16.data(), cols, isa), d16, (cols + 3) * kU * a16 + 1e-30);
      // axpy: y + s·x with one rounding (FMA) or two (a product, then the sum: plain C++ on a
      // target without FMA).
      std::vector<float> y32(x.begin(), x.begin() + cols), y16 = y32;
      axpy_f32(0.75f, w.data(), y32.data(), cols, isa);
      axpy_f16(-1.25f, w16.data(), y16.data(), cols, isa);
      for (int i = 0; i < cols; ++i) {
        const double p32 = 0.75 * w[i], p16 = -1.25 * fp16_to_f32(w16[i]);
        const double e32 = double(x[i]) + p32, e16 = double(x[i]) + p16;
        ASSERT_NEAR(y32[i], e32, kU * (std::fabs(e32) + std::fabs(p32)) + 1e-38) << i;
        ASSERT_NEAR(y16[i], e16, kU * (std::fabs(e16) + std::fabs(p16)) + 1e-38) << i;
      }
    }
  }
}

// round_to_f16 (vectorised) against the scalar definition f16 -> f32 of f32_to_fp16, bit for bit:
// random bit patterns (every exponent: f16 normals, subnormals, underflow to 0, overflow to inf)
// plus the rounding ties and boundaries; NaN must stay NaN. Odd length: the scalar tail too.
TEST(OpsFast, RoundToF16MatchesScalar) {
  std::mt19937 rng(31);
  std::vector<uint32_t> bits(100003);
  for (auto& b : bits) b = static_cast<uint32_t>(rng());
  const uint32_t edges[] = {0x00000000u, 0x80000000u, 0x33000000u, 0x33000001u, 0x337FFFFFu,
                            0x38800000u, 0x387FFFFFu, 0x3F801000u, 0x3F803000u, 0x3F801001u,
                            0x477FEFFFu, 0x477FF000u, 0x7F800000u, 0xFF800000u, 0x7FC00000u,
                            0x7F800001u, 0x33800000u, 0x33C00000u, 0x34200000u, 0xB3C00000u};
  for (size_t i = 0; i < std::size(edges); ++i) bits[i * 7] = edges[i];
  std::vector<float> x(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) std::memcpy(&x[i], &bits[i], 4);
  for (Isa isa : paths()) {
    SCOPED_TRACE("path " + path_name(isa));
    std::vector<float> got = x;
    round_to_f16(got.data(), static_cast<int64_t>(got.size()), isa);
    int bad = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const float want = fp16_to_f32(f32_to_fp16(x[i]));
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got[i])) << i;
        continue;
      }
      uint32_t gw, ww;
      std::memcpy(&gw, &got[i], 4);
      std::memcpy(&ww, &want, 4);
      if (gw != ww && bad++ < 5) {
        ADD_FAILURE() << "input 0x" << std::hex << bits[i] << ": got 0x" << gw << " want 0x" << ww;
      }
    }
    EXPECT_EQ(bad, 0);
  }
}

TEST(OpsFast, GeluOverItsWholeRange) {
  // Dense grid through the curved part, the saturated tails and extremes (the vector path's
  // clamped exponential), with odd lengths so the scalar tail runs too. The fast path computes
  // u / (1 + e^(-2z)) with a float exponential (relative error < 2e-7), the reference
  // 0.5·u·(1 + tanh z) in double: a few float roundings apart. In the negative tail the
  // reference's 1 + tanh z cancels in double (absolute error ~2^-53·|u·up|, exactly 0 once
  // tanh rounds to -1), hence the absolute term.
  ThreadPool pool(2);
  std::vector<float> g;
  for (int i = -4000; i <= 4000; ++i) g.push_back(static_cast<float>(i) * 0.005f);
  for (float v : {-1e4f, -300.0f, -88.0f, -45.0f, -9.5f, 9.5f, 45.0f, 88.0f, 300.0f, 1e4f}) g.push_back(v);
  std::vector<float> up = random_vec(g.size(), 23, 2.0f);
  std::vector<float> want = g;
  gelu_tanh_mul(want.data(), up.data(), static_cast<int64_t>(g.size()));
  for (Isa isa : paths()) {
    SCOPED_TRACE("path " + path_name(isa));
    std::vector<float> got = g;
    gelu_tanh_mul_fast(got.data(), up.data(), static_cast<int64_t>(g.size()), pool, isa);
    for (size_t i = 0; i < g.size(); ++i) {
      // z rounded to float moves e^(-2z) by a relative |2z|·2^-23 or so (a few roundings).
      const double u = g[i];
      const double z2 = 2 * 0.7978845608 * std::fabs(u + 0.044715 * u * u * u);
      const double rel = 1e-6 + 4 * z2 * 0x1p-24;
      const double tail = 0x1p-52 * std::fabs(u * up[i]);
      ASSERT_NEAR(got[i], want[i], rel * std::fabs(want[i]) + tail) << "u=" << g[i];
    }
  }
}

// The run-time dispatch: calls without a path run active_isa()'s kernels (GEM_CPU_ISA=avx2 makes
// that the AVX2 path on an AVX-512 host: the backend_cpu_ops_test_avx2 entry), bit for bit.
TEST(OpsFast, DefaultPathIsTheActiveOne) {
  if (const char* forced = std::getenv("GEM_CPU_ISA"); forced != nullptr && forced[0] != '\0') {
    for (Isa isa : paths()) {
      if (isa_name(isa) == forced) {
        EXPECT_EQ(active_isa(), isa);
      }
    }
  }
  ThreadPool pool(2);
  const int heads = 16, kv = 1, hd = 512, n = 300;
  std::vector<float> q = random_vec(static_cast<size_t>(4) * heads * hd, base_seed() + 3000, 0.5f);
  std::vector<float> k = random_vec(static_cast<size_t>(n) * hd, base_seed() + 3001, 0.5f);
  std::vector<float> v = random_vec(k.size(), base_seed() + 3002);
  KvSegment seg;
  seg.k = k.data();
  seg.v = v.data();
  seg.head_stride = hd;
  seg.slot_stride = hd;
  seg.n_slots = n;
  const int32_t qpos[4] = {n - 4, n - 3, n - 2, n - 1};
  AttentionScratch scratch;
  scratch.init(pool.size(), heads, kv, kv, hd, n);
  std::vector<float> a(q.size()), b(q.size());
  attention_fast(q.data(), qpos, 4, heads, kv, hd, 0, 1.0f, {&seg, 1}, a.data(), pool, scratch);
  attention_fast(q.data(), qpos, 4, heads, kv, hd, 0, 1.0f, {&seg, 1}, b.data(), pool, scratch,
                 active_isa());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  std::printf("ops path: %s\n", isa_description().c_str());
}

TEST(KvCache, RingPositionsAndJournal) {
  // Two layers: a sliding one (window 4, 2 KV heads × 8, a ring of R = 4 + kRingSpare slots) and
  // a full one (1 × 16), n_ctx 96.
  std::vector<model::LayerPlan> plan(2);
  plan[0] = {0, model::AttnKind::kSliding, 4, 2, 8, 4, 1e4f, 8, 4, false, 0};
  plan[1] = {1, model::AttnKind::kFull, 4, 1, 16, 0, 1e6f, 16, 2, true, 0};
  const int R = model::kv_ring_slots(4);
  for (model::KvType type : {model::KvType::kF32, model::KvType::kF16, model::KvType::kF16Full}) {
    KvCache kv(plan, 96, type);
    EXPECT_EQ(kv.bytes(), model::kv_cache_bytes(plan, 96, type));
    EXPECT_EQ(kv.layer(0).n_slots, R);
    EXPECT_EQ(kv.layer(1).n_slots, 96);
    // Value of (position, head, dim) encodes all three, exactly representable in f16
    // (integers below 2048).
    auto fill = [](int pos0, int n, int width) {
      std::vector<float> v(static_cast<size_t>(n) * width);
      for (int t = 0; t < n; ++t) {
        for (int i = 0; i < width; ++i) v[t * width + i] = static_cast<float>((pos0 + t) * 16 + i);
      }
      return v;
    };
    auto ring_value = [&](const KvCache& c, int slot, int head, int d) {
      const KvCache::Layer& l = c.layer(0);
      const uint64_t idx = (static_cast<uint64_t>(head) * l.n_slots + slot) * l.head_dim + d;
      return l.f16 ? fp16_to_f32(reinterpret_cast<const uint16_t*>(l.k.get())[idx])
                   : reinterpret_cast<const float*>(l.k.get())[idx];
    };
    const int n0 = R + 2;  // positions 0..R+1: only 2..R+1 land
    std::vector<float> a = fill(0, n0, 16);
    kv.write(0, 0, n0, a.data(), a.data());
    KvSegment seg = kv.segment(0, n0);
    EXPECT_EQ(seg.first_slot, 2);
    for (int i = 0; i < R; ++i) EXPECT_EQ(seg.slot_pos(seg.slot_at(i)), 2 + i);  // ascending
    EXPECT_EQ(ring_value(kv, 1, 1, 3), (R + 1) * 16 + 8 + 3);  // position R+1 in slot 1, head 1
    kv.checkpoint();
    std::vector<float> b = fill(n0, 3, 16);
    kv.write(0, n0, 3, b.data(), b.data());  // overwrites slots 2, 3, 4
    EXPECT_EQ(kv.layer(0).pos[2], n0);
    EXPECT_EQ(kv.layer(0).pos[4], n0 + 2);
    EXPECT_EQ(ring_value(kv, 4, 0, 0), (n0 + 2) * 16);
    kv.restore();
    EXPECT_EQ(kv.layer(0).pos[4], 4);
    EXPECT_EQ(kv.layer(0).pos[2], 2);
    EXPECT_EQ(ring_value(kv, 4, 0, 0), 4 * 16);
    EXPECT_EQ(ring_value(kv, 2, 1, 7), 2 * 16 + 15);
    // The journal stays open: write again, restore again.
    kv.write(0, n0, 3, b.data(), b.data());
    kv.restore();
    EXPECT_EQ(ring_value(kv, 3, 0, 1), 3 * 16 + 1);

    // Truncation empties the slots of the forgotten positions (journaled: restore undoes it) and
    // keeps every other.
    kv.write(0, n0, 3, b.data(), b.data());
    kv.truncate(n0 + 1);
    EXPECT_EQ(kv.layer(0).pos[2], n0);
    EXPECT_EQ(kv.layer(0).pos[3], -1);
    EXPECT_EQ(kv.layer(0).pos[4], -1);
    EXPECT_EQ(kv.layer(0).pos[5], 5);
    kv.truncate(n0 - 1);  // before the checkpoint: position R+1 (slot 1) goes too
    EXPECT_EQ(kv.layer(0).pos[1], -1);
    EXPECT_EQ(kv.layer(0).pos[0], R);
    kv.restore();
    EXPECT_EQ(kv.layer(0).pos[1], R + 1);
    EXPECT_EQ(kv.layer(0).pos[3], 3);
    EXPECT_EQ(ring_value(kv, 1, 1, 3), (R + 1) * 16 + 8 + 3);

    // A copy holds the source's positions below its n_past, values and all.
    std::vector<float> c = fill(0, 10, 16);
    kv.write(1, 0, 10, c.data(), c.data());
    KvCache other(plan, 96, type);
    other.copy_from(kv, n0 - 1);
    for (int s = 0; s < R; ++s) {
      const int p = kv.layer(0).pos[s];
      EXPECT_EQ(other.layer(0).pos[s], p < n0 - 1 ? p : -1) << s;
      if (p >= 0 && p < n0 - 1) {
        EXPECT_EQ(ring_value(other, s, 1, 2), ring_value(kv, s, 1, 2));
      }
    }
    const KvCache::Layer& f = other.layer(1);
    const float v9 = f.f16 ? fp16_to_f32(reinterpret_cast<const uint16_t*>(f.v.get())[9 * 16 + 5])
                           : reinterpret_cast<const float*>(f.v.get())[9 * 16 + 5];
    EXPECT_EQ(v9, 9 * 16 + 5);

    kv.reset();
    for (int s = 0; s < R; ++s) EXPECT_EQ(kv.layer(0).pos[s], -1);
    // Full layer: position p in slot p; the segment covers 0..n_past-1.
    seg = kv.segment(1, 3);
    EXPECT_EQ(seg.n_slots, 3);
    EXPECT_EQ(seg.slot_pos(2), 2);
  }
}

}  // namespace
}  // namespace gem::cpu
