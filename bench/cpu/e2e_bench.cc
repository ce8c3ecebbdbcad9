// End-to-end CPU benchmark through make_cpu_backend, shaped like llama-bench: prefill tok/s
// (pp N: one eval of N tokens from an empty cache) and decode tok/s (tg N: N single-token evals
// after `depth` cached tokens), with the decode weight traffic in GB/s.
// Usage: gem_cpu_e2e_bench MODEL.gguf [-t 2] [-p 128,512] [-n 16] [-d 0,4096] [-r 2] [--kv f16]
//        gem_cpu_e2e_bench --synth-12b VOCAB.gguf OUT.gguf   (what `gem synth --profile 12b` writes,
//        for machines that have this binary but not `gem`)
#include <algorithm>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/matmul.h"
#include "base/timer.h"
#include "model/model.h"
#include "model/synth.h"

namespace {

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(std::atoi(item.c_str()));
  return out;
}

// Bytes a decode step streams: every layer matrix plus the tied head (token_embd), whole.
uint64_t decode_weight_bytes(const gem::model::Model& m) {
  uint64_t b = m.weights.token_embd.n_bytes;
  for (const auto& l : m.weights.layers) {
    for (const auto* t : {&l.attn_q, &l.attn_k, &l.attn_v, &l.attn_output, &l.ffn_gate, &l.ffn_up,
                          &l.ffn_down}) {
      if (t->present()) b += t->n_bytes;
    }
  }
  return b;
}

double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

int synth_12b(const std::string& vocab_path, const std::string& out) {
  using namespace gem;
  auto geometry = model::synth_geometry("12b");
  auto vocab = gguf::GgufFile::open(vocab_path);
  if (!geometry.ok() || !vocab.ok()) {
    std::fprintf(stderr, "synth: %s%s\n", geometry.message().c_str(), vocab.message().c_str());
    return 1;
  }
  model::SynthOptions opt;
  opt.geometry = *geometry;
  auto summary = model::write_synth_model(opt, **vocab, out);
  if (!summary.ok()) {
    std::fprintf(stderr, "synth: %s\n", summary.message().c_str());
    return 1;
  }
  std::printf("wrote %s\n", out.c_str());
  return 0;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gem;
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL.gguf [-t N] [-p 128,512] [-n 16] [-d 0,4096] [-r 2] [--kv f16|f32]\n", argv[0]);
    return 2;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // figures survive a timeout
  if (std::string(argv[1]) == "--synth-12b" && argc == 4) return synth_12b(argv[2], argv[3]);
  const std::string path = argv[1];
  int threads = 2, n_gen = 16, reps = 2;
  std::vector<int> pps = {128, 512}, depths = {0};
  std::string kv = "f16";
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "-t") threads = std::atoi(v.c_str());
    else if (a == "-p") pps = parse_list(v);
    else if (a == "-n") n_gen = std::atoi(v.c_str());
    else if (a == "-d") depths = parse_list(v);
    else if (a == "-r") reps = std::atoi(v.c_str());
    else if (a == "--kv") kv = v;
  }
  auto model = model::load_model(path);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().message().c_str());
    return 1;
  }
  const model::Model& m = **model;
  const uint64_t wbytes = decode_weight_bytes(m);
  int max_pp = 0, max_depth = 0;
  for (int p : pps) max_pp = std::max(max_pp, p);
  for (int d : depths) max_depth = std::max(max_depth, d);
  BackendOptions opt;
  opt.n_threads = threads;
  opt.n_ctx = std::max(max_pp, max_depth + n_gen + 8);
  opt.n_tile = std::max(max_pp, 1);  // one layer pass per prompt, like llama-bench's n_ubatch 512
  auto kvt = model::parse_kv_type(kv);
  if (!kvt.ok()) {
    std::fprintf(stderr, "%s\n", kvt.status().message().c_str());
    return 2;
  }
  opt.kv_type = *kvt;
  auto backend_r = cpu::make_cpu_backend(m, opt);
  if (!backend_r.ok()) {
    std::fprintf(stderr, "%s\n", backend_r.status().message().c_str());
    return 1;
  }
  Backend& be = **backend_r;
  std::printf("model %s, threads %d, kv %s, matmul ISA %s, decode weight bytes %.3f GB\n",
              path.c_str(), threads, kv.c_str(), std::string(cpu::matmul_isa()).c_str(), wbytes / 1e9);
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> tok(1000, std::min(m.config.n_vocab - 1, 200000));
  auto tokens = [&](int n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = tok(rng);
    return t;
  };
  auto check = [](const Status& s) {
    if (!s.ok()) {
      std::fprintf(stderr, "eval failed: %s\n", s.message().c_str());
      std::exit(1);
    }
  };
  // Warm-up: page the weights in, wake the pool.
  be.reset();
  check(be.eval(tokens(2), false));
  for (int pp : pps) {
    std::vector<double> rates, cpu;
    for (int r = 0; r < reps; ++r) {
      be.reset();
      const auto t = tokens(pp);
      const double c0 = cpu_seconds();
      Timer timer;
      check(be.eval(t, false));
      rates.push_back(pp / timer.seconds());
      cpu.push_back(cpu_seconds() - c0);
    }
    // CPU seconds tell how much of the wall time this process actually ran (a shared machine).
    std::printf("pp%d: %.2f tok/s (median of %d), %.1f process CPU s per run\n", pp,
                median(rates), reps, median(cpu));
    std::fflush(stdout);
  }
  for (int d : depths) {
    std::vector<double> rates, cpu;
    for (int r = 0; r < reps; ++r) {
      be.reset();
      if (d > 0) check(be.eval(tokens(d), false));
      const auto t = tokens(n_gen);
      const double c0 = cpu_seconds();
      Timer timer;
      for (int i = 0; i < n_gen; ++i) check(be.eval(std::span<const int32_t>(&t[i], 1), false));
      rates.push_back(n_gen / timer.seconds());
      cpu.push_back(cpu_seconds() - c0);
    }
    const double tps = median(rates);
    std::printf("tg%d @ d%d: %.3f tok/s, weights %.2f GB/s (median of %d), %.1f process CPU s per run\n",
                n_gen, d, tps, tps * wbytes / 1e9, reps, median(cpu));
    std::fflush(stdout);
  }
  return 0;
}
