// Host sampler benchmark, on a 262,144-entry row of random logits, with and without a repeat
// penalty over a 64-token window: a greedy draw (sample_token at temperature 0: the arg-max of the
// penalised row) against building the sampling distribution of the same row (the path greedy
// draws took before); then a sampled distribution (temperature 1, top-k 64, top-p 0.95: Gemma 4's
// recommended sampling; what a sampled draw and a speculative verification row build) by its
// one-pass top-k against the plain reference (the penalised copy of the whole row).
// Usage: gem_sampler_bench [--reps N]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "base/timer.h"
#include "sampler/sampler.h"

int main(int argc, char** argv) {
  int reps = 200;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: gem_sampler_bench [--reps N]\n");
      return 2;
    }
  }
  if (reps < 1) {
    std::fprintf(stderr, "gem_sampler_bench: --reps %d, expected at least 1\n", reps);
    return 2;
  }
  constexpr int kVocab = 262144;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  std::vector<float> logits(kVocab);
  for (float& x : logits) x = normal(rng);
  std::vector<int32_t> history(64);
  for (int32_t& t : history) t = static_cast<int32_t>(rng() % kVocab);
  gem::SamplingParams p;
  p.temperature = 0.0f;
  std::printf("| repeat penalty | greedy draw (ms) | distribution (ms) |\n| ---: | ---: | ---: |\n");
  for (float penalty : {1.0f, 1.1f}) {
    p.repeat_penalty = penalty;
    int64_t check = 0;  // keeps the calls
    gem::Timer t_draw;
    for (int i = 0; i < reps; ++i) check += gem::sample_token(logits, p, history, 0.5);
    const double draw_ms = t_draw.seconds() * 1e3 / reps;
    gem::Timer t_dist;
    for (int i = 0; i < reps; ++i) check -= gem::sampling_distribution(logits, p, history)[0].first;
    const double dist_ms = t_dist.seconds() * 1e3 / reps;
    if (check != 0) {
      std::fprintf(stderr, "gem_sampler_bench: the greedy draw and the distribution disagree\n");
      return 1;
    }
    std::printf("| %.1f | %.3f | %.3f |\n", penalty, draw_ms, dist_ms);
  }
  gem::SamplingParams s;
  s.temperature = 1.0f;
  s.top_k = 64;
  s.top_p = 0.95f;
  std::printf("\n| repeat penalty | sampled distribution, top-k pass (ms) | reference (ms) |\n"
              "| ---: | ---: | ---: |\n");
  for (float penalty : {1.0f, 1.1f}) {
    s.repeat_penalty = penalty;
    size_t check = 0;
    gem::Timer t_fast;
    for (int i = 0; i < reps; ++i) check += gem::sampling_distribution(logits, s, history).size();
    const double fast_ms = t_fast.seconds() * 1e3 / reps;
    gem::Timer t_ref;
    for (int i = 0; i < reps; ++i) {
      check -= gem::sampling_distribution_reference(logits, s, history).size();
    }
    const double ref_ms = t_ref.seconds() * 1e3 / reps;
    if (check != 0) {
      std::fprintf(stderr, "gem_sampler_bench: the top-k pass and the reference disagree\n");
      return 1;
    }
    std::printf("| %.1f | %.3f | %.3f |\n", penalty, fast_ms, ref_ms);
  }
  return 0;
}
