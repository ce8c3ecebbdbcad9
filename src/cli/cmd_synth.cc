// gem synth: writes a synthetic Gemma 4 dense GGUF (real structure, real tokenizer, seeded random
// weights) for tests, demos and benchmarks without real weights.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "cli/command.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "model/synth.h"

namespace gem::cli {
namespace {

struct SynthArgs {
  std::string profile = "tiny";
  std::string embedding;  // q8_0 | q6_k | f32 (default from the layout)
  std::string matrices;   // an assistant's matrices: q4_0 | q8_0 (default from the layout)
  std::string layout = "prod";
  std::string fill = "auto";
  uint64_t seed = 1;
  std::string vocab;
  std::string output;
  std::string name;
  std::string assistant_for;  // target GGUF: write its MTP assistant instead
  bool sparse = false;
  bool quiet = false;
};

// --vocab, then $GEM_VOCAB, then the copy shipped in the source tree's data/.
std::string vocab_path(const SynthArgs& a) {
  if (!a.vocab.empty()) return a.vocab;
  if (const char* env = std::getenv("GEM_VOCAB"); env && *env) return env;
  return std::string(GEM_DATA_DIR) + "/gemma4-vocab.gguf";
}

int run_synth(const SynthArgs& a) {
  auto geometry = model::synth_geometry(a.profile);
  if (!geometry.ok()) return fail("synth", geometry.message());
  model::SynthOptions opt;
  opt.geometry = *geometry;
  opt.seed = a.seed;
  opt.sparse = a.sparse;
  opt.name = a.name;
  opt.layout = a.layout;
  opt.matrix_type = a.layout == "f32" ? DType::kF32 : DType::kQ4_0;
  opt.embd_type = a.layout == "f32" ? DType::kF32 : DType::kQ8_0;
  if (a.embedding == "q8_0") {
    opt.embd_type = DType::kQ8_0;
  } else if (a.embedding == "q6_k") {
    opt.embd_type = DType::kQ6_K;
  } else if (a.embedding == "f32") {
    opt.embd_type = DType::kF32;
  }
  if (!a.matrices.empty()) {
    if (a.assistant_for.empty()) {
      return fail("synth", "--matrices " + a.matrices +
                               ": sets an assistant's matrix type and needs --assistant-for "
                               "(a model's matrices follow --layout: Q4_0 for prod, F32 for f32)");
    }
    if (a.layout == "f32") {
      return fail("synth", "--matrices " + a.matrices + " with --layout f32: expected one of them");
    }
    opt.matrix_type = a.matrices == "q8_0" ? DType::kQ8_0 : DType::kQ4_0;
  }
  opt.fill = a.fill == "exact" ? model::SynthFill::kExact
             : a.fill == "fast" ? model::SynthFill::kFast
                                : model::SynthFill::kAuto;

  const std::string vpath = vocab_path(a);
  auto vocab = gguf::GgufFile::open(vpath);
  if (!vocab.ok()) return fail("synth", "vocabulary: " + vocab.message());

  // One progress line, rewritten in place on a terminal, every ~2 s otherwise.
  const bool tty = isatty(STDERR_FILENO);
  const auto t0 = std::chrono::steady_clock::now();
  double last = -10.0;
  auto progress = [&](uint64_t done, uint64_t total) {
    if (a.quiet) return;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (done < total && s - last < (tty ? 0.25 : 2.0)) return;
    last = s;
    std::fprintf(stderr, "%sgem synth: %s %.2f / %.2f GB (%3.0f%%) %.0f MB/s%s", tty ? "\r" : "",
                 a.output.c_str(), done / 1e9, total / 1e9, total ? 100.0 * done / total : 100.0,
                 s > 0 ? done / 1e6 / s : 0.0, tty && done < total ? "" : "\n");
    std::fflush(stderr);
  };
  Result<model::SynthSummary> summary = Status();
  if (!a.assistant_for.empty()) {
    // The assistant takes the target's shape and copies the target's tokenizer.
    auto target = model::load_model(a.assistant_for);
    if (!target.ok()) return fail("synth", "--assistant-for: " + target.message());
    auto target_file = gguf::GgufFile::open(a.assistant_for);
    if (!target_file.ok()) return fail("synth", "--assistant-for: " + target_file.message());
    std::string stem = a.assistant_for.substr(a.assistant_for.find_last_of('/') + 1);
    if (stem.size() > 5 && stem.substr(stem.size() - 5) == ".gguf") stem.resize(stem.size() - 5);
    opt.geometry = model::geometry_of((*target)->config, stem);
    summary = model::write_synth_assistant(opt, model::assistant_geometry_for(opt.geometry), **target_file,
                                           a.output, progress);
  } else {
    summary = model::write_synth_model(opt, **vocab, a.output, progress);
  }
  if (!summary.ok()) return fail("synth", summary.message());
  // An assistant's shape is its target's, not --profile's.
  const std::string shape = a.assistant_for.empty() ? "profile " + a.profile
                                                    : "assistant of " + a.assistant_for;
  std::printf("%s: %s, layout %s, seed %llu, fill %s%s, %llu tensors, %.3f B parameters, %llu bytes, "
              "%.1f s (%.2f GB/s)\n",
              a.output.c_str(), shape.c_str(), model::layout_label(opt).c_str(),
              static_cast<unsigned long long>(a.seed),
              summary->fill.c_str(), a.sparse ? " (sparse data)" : "",
              static_cast<unsigned long long>(summary->n_tensors), summary->n_params / 1e9,
              static_cast<unsigned long long>(summary->file_bytes), summary->seconds,
              summary->seconds > 0 ? summary->file_bytes / 1e9 / summary->seconds : 0.0);
  return 0;
}

RunFn setup_synth(CLI::App& sub) {
  auto a = std::make_shared<SynthArgs>();
  sub.add_option("--profile", a->profile, "geometry: 12b, 31b, tiny, tiny6, tiny256 or demo")
      ->check(CLI::IsMember({"12b", "31b", "tiny", "tiny6", "tiny256", "demo"}));
  sub.add_option("--embedding", a->embedding, "token_embd type (default: q8_0 for prod, f32 for f32)")
      ->check(CLI::IsMember({"q8_0", "q6_k", "f32"}));
  sub.add_option("--matrices", a->matrices,
                 "with --assistant-for: the assistant's matrix type, q4_0 (default) or q8_0 (as "
                 "most public assistant files)")
      ->check(CLI::IsMember({"q4_0", "q8_0"}));
  sub.add_option("--layout", a->layout, "prod: Q4_0 matrices, Q8_0 embedding; f32: everything F32")
      ->check(CLI::IsMember({"prod", "f32"}));
  sub.add_option("--fill", a->fill, "auto (exact below 2e9 parameters), exact or fast")
      ->check(CLI::IsMember({"auto", "exact", "fast"}));
  sub.add_option("--seed", a->seed, "random seed");
  sub.add_option("--vocab", a->vocab, "vocab GGUF whose tokenizer.* keys are copied "
                                      "(default: $GEM_VOCAB, then data/gemma4-vocab.gguf)");
  sub.add_option("--name", a->name, "general.name (default gem-synth-<profile>-<layout>-s<seed>)");
  sub.add_option("--assistant-for", a->assistant_for,
                 "write the MTP assistant (gemma4-assistant) of this target GGUF instead of a model");
  sub.add_flag("--sparse", a->sparse, "leave the tensor data a hole (loader tests; not runnable)");
  sub.add_flag("-q,--quiet", a->quiet, "no progress line");
  sub.add_option("-o,--output", a->output, "output GGUF file")->required();
  return [a] { return run_synth(*a); };
}

GEM_COMMAND(synth, "Write a synthetic Gemma 4 GGUF (real structure and tokenizer, random weights)",
            setup_synth);

}  // namespace
}  // namespace gem::cli
