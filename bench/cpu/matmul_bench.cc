// CPU kernel benchmark: this machine's memory bandwidth (read-only sum, copy) and gem's matmul
// on 12B-shaped matrices (decode: GB/s of weights streamed; prefill: integer GOP/s), 1 and 2
// threads. Weights are random but valid; several copies are cycled so decode reads from DRAM.
// Usage: gem_cpu_matmul_bench [--threads N] [--quick] [--hot] [--only attn_k/Q4_0] [--no-bw]
//        [--reps N] (best of N prefill passes; decode is best of max(9, N)) [--file-layout]
//        [--tokens 1,8,128,512] (token counts; default 1,128,512; counts up to 16 — decode,
//        batched rows, speculative verification — read their weights from DRAM as decode does)
// Shapes the path has a packed kernel for run on the packed layout (packed.h) as the backend
// does, and also on the file's layout with --file-layout or GEM_CPU_REPACK=0. GEM_CPU_ISA=avx2
// forces that path.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/matmul.h"
#include "backend/cpu/thread_pool.h"
#include "base/dtype.h"
#include "base/timer.h"

namespace gem::cpu {
namespace {

// Every byte of buf read (an xor of 64-bit words, which the compiler vectorises to the widest
// loads -march allows: a float sum is latency-bound below this machine's bandwidth), split over
// the pool; best of `reps`.
double bench_read(ThreadPool& pool, const std::vector<float>& buf, int reps) {
  double best = 1e30;
  std::vector<uint64_t> partial(static_cast<size_t>(pool.size()));
  const auto* words = reinterpret_cast<const uint64_t*>(buf.data());
  const int64_t n_words = static_cast<int64_t>(buf.size() / 2);
  for (int r = 0; r < reps; ++r) {
    Timer t;
    pool.parallel_for(n_words, [&](int64_t b, int64_t e, int c) {
      uint64_t s = 0;
      for (int64_t i = b; i < e; ++i) s ^= words[i];
      partial[static_cast<size_t>(c)] = s;
    });
    best = std::min(best, t.seconds());
  }
  uint64_t sink = 0;
  for (uint64_t p : partial) sink ^= p;
  if (sink == 12345) std::printf(" ");
  return static_cast<double>(n_words) * 8 / best / 1e9;
}

// memcpy of buf into dst, split over the pool: GB/s counting read + write bytes.
double bench_copy(ThreadPool& pool, const std::vector<float>& src, std::vector<float>& dst, int reps) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    Timer t;
    pool.parallel_for(static_cast<int64_t>(src.size()), [&](int64_t b, int64_t e, int) {
      std::memcpy(dst.data() + b, src.data() + b, static_cast<size_t>(e - b) * 4);
    });
    best = std::min(best, t.seconds());
  }
  return 2.0 * static_cast<double>(src.size()) * 4 / best / 1e9;
}

struct Matrix {
  std::vector<uint8_t> bytes;
  model::TensorView view;
};

Matrix make_matrix(DType type, int64_t rows, int64_t cols, std::mt19937_64& rng) {
  const DTypeInfo info = *dtype_info(static_cast<uint32_t>(type));
  Matrix m;
  m.bytes.resize(rows * dtype_row_bytes(info, cols));
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : m.bytes) b = static_cast<uint8_t>(byte(rng));
  // Valid small fp16 scales (random bytes could be inf/NaN).
  const uint16_t d = f32_to_fp16(0.01f);
  const size_t bb = info.block_bytes;
  const size_t d_off = type == DType::kQ6_K ? 208 : 0;
  if (type != DType::kF32) {
    for (size_t o = 0; o < m.bytes.size(); o += bb) std::memcpy(&m.bytes[o + d_off], &d, 2);
  } else {
    std::normal_distribution<float> n(0.0f, 0.02f);
    for (size_t o = 0; o < m.bytes.size(); o += 4) {
      const float v = n(rng);
      std::memcpy(&m.bytes[o], &v, 4);
    }
  }
  m.view = model::TensorView{"bench.weight", type, m.bytes.data(), rows, cols, m.bytes.size()};
  return m;
}

struct Shape {
  const char* name;
  DType type;
  int64_t rows, cols;
};

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

void bench_shape(const Shape& s, ThreadPool& pool, bool quick, bool hot, int reps, bool pack,
                 const std::vector<int>& tokens) {
  std::mt19937_64 rng(1);
  const Matrix one = make_matrix(s.type, s.rows, s.cols, rng);
  const double w_bytes = static_cast<double>(one.bytes.size());
  // Enough copies that one pass over them overflows the 32 MiB L3 several times.
  // --hot: one copy, so a matrix that fits in L3 measures the kernel rather than DRAM.
  const int n_copies = hot ? 1 : std::max(1, static_cast<int>(std::ceil(192e6 / w_bytes)));
  std::vector<Matrix> mats;
  std::vector<OwnedPacked> packs;
  mats.reserve(static_cast<size_t>(n_copies));
  for (int i = 0; i < n_copies; ++i) {
    mats.push_back(Matrix{one.bytes, {}});
    mats.back().view = one.view;
    mats.back().view.data = mats.back().bytes.data();
    // The packed layout (packed.h) in place of the file's: only the packed copies stay.
    if (pack && packable(one.view) && has_packed_kernel(active_isa(), one.view.type)) {
      packs.push_back(pack_owned(mats.back().view, pool));
      std::vector<uint8_t>().swap(mats.back().bytes);
    }
  }
  if (pack && packs.empty()) return;
  auto packed_of = [&](size_t i) { return packs.empty() ? nullptr : &packs[i].view; };
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (int n_tok : tokens) {
    if (quick && n_tok == 512) continue;
    if (n_tok > 16 && s.rows > 65536) continue;  // the head: a prompt's last token, or a few rows
    const bool short_eval = n_tok <= 16;
    std::vector<float> x(static_cast<size_t>(n_tok * s.cols));
    for (float& v : x) v = n(rng);
    std::vector<float> y(static_cast<size_t>(n_tok * s.rows));
    // Decode and other short evals: the best of 9 passes over every copy (a pass reads ≥ 192 MB
    // from DRAM), so a noisy neighbour on a shared machine shows as a slower pass rather than a
    // skewed mean.
    // --reps N: prefill passes too (best of N). The process CPU time of the best-CPU pass is
    // printed as well: with 1 thread it excludes time the OS gave other processes.
    const int calls = short_eval ? n_copies : 2;
    const int passes = short_eval ? std::max(9, reps) : reps;
    matmul(mats[0].view, x.data(), n_tok, y.data(), pool, packed_of(0));  // warm-up
    double sec = 1e30, cpu_sec = 1e30;
    for (int p = 0; p < passes; ++p) {
      Timer t;
      const double c0 = process_cpu_seconds();
      for (int c = 0; c < calls; ++c) {
        const size_t m = static_cast<size_t>(c % n_copies);
        matmul(mats[m].view, x.data(), n_tok, y.data(), pool, packed_of(m));
      }
      sec = std::min(sec, t.seconds() / calls);
      cpu_sec = std::min(cpu_sec, (process_cpu_seconds() - c0) / calls);
    }
    const double gbs = w_bytes / sec / 1e9;
    const double gops = 2.0 * s.rows * s.cols * n_tok / sec / 1e9;
    std::printf("matmul%s%s,%s,%s,%lldx%lld,threads=%d,n_tokens=%d,%.3f ms,%.2f GB/s,%.1f GOP/s,%.1f tok/s,"
                "cpu %.3f ms\n",
                hot ? "(hot)" : "", pack ? "(packed)" : "", s.name, std::string(dtype_name(s.type)).c_str(), static_cast<long long>(s.rows),
                static_cast<long long>(s.cols), pool.size(), n_tok, sec * 1e3, gbs, gops,
                n_tok / sec, cpu_sec * 1e3);
    std::fflush(stdout);
  }
}

}  // namespace
}  // namespace gem::cpu

int main(int argc, char** argv) {
  using namespace gem;
  using namespace gem::cpu;
  int max_threads = 2;
  bool quick = false, hot = false, no_bw = false, file_layout = false;
  int reps = 1;
  std::string only;
  std::vector<int> tokens = {1, 128, 512};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) max_threads = std::atoi(argv[++i]);
    if (a == "--quick") quick = true;
    if (a == "--hot") hot = true;
    if (a == "--only" && i + 1 < argc) only = argv[++i];  // a shape name
    if (a == "--no-bw") no_bw = true;
    if (a == "--file-layout") file_layout = true;  // also time the file's layout (no repack)
    if (a == "--reps" && i + 1 < argc) reps = std::max(1, std::atoi(argv[++i]));
    if (a == "--tokens" && i + 1 < argc) {
      tokens.clear();
      for (const char* p = argv[++i]; *p != '\0';) {
        char* end = nullptr;
        const long v = std::strtol(p, &end, 10);
        if (end == p || v < 1 || v > 4096) {
          std::fprintf(stderr, "--tokens: expected comma-separated counts in 1..4096, got \"%s\"\n", argv[i]);
          return 2;
        }
        tokens.push_back(static_cast<int>(v));
        p = *end == ',' ? end + 1 : end;
      }
    }
  }
  std::printf("matmul path: %s\n", isa_description().c_str());
  if (!no_bw) {
    std::vector<float> src(static_cast<size_t>(128) << 20, 1.0f), dst(src.size(), 0.0f);  // 512 MiB
    for (int th = 1; th <= max_threads; ++th) {
      ThreadPool pool(th);
      std::printf("bandwidth,threads=%d,read %.2f GB/s,copy %.2f GB/s (read+write)\n", th,
                  bench_read(pool, src, 5), bench_copy(pool, src, dst, 5));
      std::fflush(stdout);
    }
  }
  // Gemma 4 12B: n_embd 3840, 16 heads × 256 (q 4096), 8 KV heads × 256 (k/v 2048), FFN 15360,
  // head = token_embd [262144, 3840] (Q6_K in the QAT files).
  const Shape shapes[] = {
      {"ffn_gate/up", DType::kQ4_0, 15360, 3840}, {"ffn_down", DType::kQ4_0, 3840, 15360},
      {"attn_q", DType::kQ4_0, 4096, 3840},       {"attn_output", DType::kQ4_0, 3840, 4096},
      {"attn_k", DType::kQ4_0, 2048, 3840},       {"ffn_gate/up", DType::kQ8_0, 15360, 3840},
      {"head", DType::kQ6_K, 262144, 3840},       {"ffn_gate/up", DType::kQ6_K, 15360, 3840},
      {"ffn_gate/up", DType::kF32, 15360, 3840},
  };
  for (int th = 1; th <= max_threads; ++th) {
    ThreadPool pool(th);
    for (const Shape& s : shapes) {
      if (quick && th == 1 && s.type != DType::kQ4_0) continue;
      if (!only.empty() && only != s.name + std::string("/") + std::string(dtype_name(s.type))) continue;
      if (file_layout || !has_packed_kernel(active_isa(), s.type)) {
        bench_shape(s, pool, quick, hot, reps, /*pack=*/false, tokens);
      }
      if (repack_enabled()) bench_shape(s, pool, quick, hot, reps, /*pack=*/true, tokens);
    }
  }
  return 0;
}
