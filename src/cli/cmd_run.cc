// gem run: one-shot generation to stdout. The prompt is one user turn in the Gemma 4 chat format
// unless --raw; text streams as it is generated; load time and throughput go to stderr.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>

#include "base/timer.h"
#include "chat/chat.h"
#include "cli/backend_flags.h"
#include "cli/mtp_flags.h"
#include "cli/command.h"
#include "model/assistant.h"
#include "runtime/engine.h"
#include "tokenizer/tokenizer.h"

namespace gem::cli {
namespace {

struct RunFlags {
  std::string model;
  std::string prompt;
  std::string prompt_file;
  int n_predict = 256;
  bool raw = false;
  bool think = false;
  bool show_special = false;
  float temp = -1.0f;
  int top_k = -1;
  float top_p = -1.0f;
  float min_p = -1.0f;
  float repeat_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int64_t seed = -1;
  MtpFlags mtp;        // --mtp, --no-mtp, --draft-max, --draft-min
  BackendFlags backend;
};

int run(const RunFlags& f) {
  const char* cmd = "run";
  std::string text = f.prompt;
  if (!f.prompt_file.empty()) {
    std::ifstream in(f.prompt_file, std::ios::binary);
    if (!in) return fail(cmd, "cannot read prompt file '" + f.prompt_file + "'");
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }

  Timer load_timer;
  auto model = model::load_model(f.model);
  if (!model.ok()) return fail(cmd, model.message());
  auto tokenizer = Tokenizer::from_gguf(*(*model)->file);
  if (!tokenizer.ok()) return fail(cmd, tokenizer.message());
  auto backend = make_backend(**model, f.backend);
  if (!backend.ok()) return fail(cmd, backend.message());
  const double load_seconds = load_timer.seconds();

  // The prompt: one user turn rendered as the official template does, or the raw text.
  std::vector<int32_t> ids;
  if (f.raw) {
    ids = (*tokenizer)->encode(text, /*add_bos=*/true, /*parse_special=*/true);
  } else {
    chat::RenderOptions ro;
    ro.enable_thinking = f.think;
    ro.emit_bos_text = false;  // the tokenizer adds exactly one <bos>
    nlohmann::json messages = nlohmann::json::array({{{"role", "user"}, {"content", text}}});
    auto rendered = chat::render_prompt(messages, nlohmann::json::array(), ro);
    if (!rendered.ok()) return fail(cmd, rendered.message());
    // The prompt's text is the user's: tokenized as text, it cannot spell control tokens.
    ids = chat::tokenize_prompt(*rendered, **tokenizer, /*add_bos=*/true).ids;
  }

  const model::Config& cfg = (*model)->config;
  runtime::GenerateRequest req;
  req.prompt = ids;
  req.max_tokens = f.n_predict;
  req.sampling.temperature = f.temp >= 0 ? f.temp : cfg.sampling_temp.value_or(1.0f);
  req.sampling.top_k = f.top_k >= 0 ? f.top_k : cfg.sampling_top_k.value_or(64);
  req.sampling.top_p = f.top_p >= 0 ? f.top_p : cfg.sampling_top_p.value_or(0.95f);
  req.sampling.min_p = f.min_p >= 0 ? f.min_p : cfg.sampling_min_p.value_or(0.0f);
  req.sampling.repeat_penalty = f.repeat_penalty;
  req.sampling.presence_penalty = f.presence_penalty;
  req.sampling.frequency_penalty = f.frequency_penalty;
  req.sampling.seed = f.seed >= 0 ? static_cast<uint64_t>(f.seed) : std::random_device{}();

  runtime::Engine engine(std::move(*model), std::move(*backend), std::move(*tokenizer));
  // Speculative decoding with the MTP assistant: greedy runs give the same tokens as without it,
  // sampled ones the same distribution (the engine's verification).
  auto drafter = make_mtp_drafter(engine.backend(), f.mtp);
  if (!drafter.ok()) return fail(cmd, drafter.message());
  if (*drafter) {
    req.drafter = drafter->get();
    req.draft_max = f.mtp.draft_max;
    req.draft_min = f.mtp.draft_min;
  }
  StreamDecoder decoder(engine.tokenizer(), f.show_special);
  Timer progress_timer;
  runtime::GenerateCallbacks cb;
  cb.on_prompt_progress = [&](int done, int all) {
    // A progress line for long prompts, at most every 2 s.
    if (all >= 1024 && (done == all || progress_timer.seconds() > 2.0)) {
      std::fprintf(stderr, "\rgem run: prompt %d / %d tokens", done, all);
      if (done == all) std::fputc('\n', stderr);
      progress_timer.reset();
    }
    return true;
  };
  cb.on_token = [&](int32_t token) {
    if (!f.show_special && engine.tokenizer().is_eog(token)) return true;
    std::string piece = decoder.push(token);
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
    return true;
  };
  auto result = engine.generate(req, cb);
  std::string rest = decoder.flush();
  std::fwrite(rest.data(), 1, rest.size(), stdout);
  std::fputc('\n', stdout);
  if (!result.ok()) return fail(cmd, result.message());
  const auto& r = *result;
  std::fprintf(stderr,
               "gem run: load %.2f s (%s backend) | prompt %d tokens in %.2f s (%.1f tok/s) | "
               "generated %d tokens in %.2f s (%.2f tok/s)\n",
               load_seconds, std::string(engine.backend().name()).c_str(), r.n_prompt,
               r.prompt_seconds, r.prompt_seconds > 0 ? r.n_prompt / r.prompt_seconds : 0.0,
               r.n_generated, r.decode_seconds,
               r.decode_seconds > 0 ? r.n_generated / r.decode_seconds : 0.0);
  if (*drafter) {
    std::fprintf(stderr, "gem run: drafted %d tokens, accepted %d (%.1f %%)\n", r.n_drafted,
                 r.n_draft_accepted, r.n_drafted > 0 ? 100.0 * r.n_draft_accepted / r.n_drafted : 0.0);
  }
  return 0;
}

RunFn setup(CLI::App& app) {
  auto f = std::make_shared<RunFlags>();
  app.add_option("-m,--model", f->model, "Gemma 4 GGUF file")->required();
  auto* p = app.add_option("-p,--prompt", f->prompt, "prompt text");
  auto* pf = app.add_option("-f,--file", f->prompt_file, "read the prompt from a file");
  p->excludes(pf);
  app.add_option("-n,--n-predict", f->n_predict, "tokens to generate (-1: until end of turn)");
  app.add_flag("--raw", f->raw, "use the prompt as is (parse control tokens), not as a chat turn");
  app.add_flag("--think", f->think, "enable thinking in the chat prompt");
  app.add_flag("--special", f->show_special, "print control tokens");
  app.add_option("--temp", f->temp, "temperature (default: the model's, else 1.0; 0 = greedy)");
  app.add_option("--top-k", f->top_k, "top-k (default: the model's, else 64; 0 = off)");
  app.add_option("--top-p", f->top_p, "top-p (default: the model's, else 0.95; 1 = off)");
  app.add_option("--min-p", f->min_p, "min-p (default 0 = off)");
  app.add_option("--repeat-penalty", f->repeat_penalty, "repeat penalty (1 = off)");
  app.add_option("--presence-penalty", f->presence_penalty, "presence penalty");
  app.add_option("--frequency-penalty", f->frequency_penalty, "frequency penalty");
  app.add_option("-s,--seed", f->seed, "random seed (default: random)");
  add_mtp_flags(app, f->mtp);
  add_backend_flags(app, f->backend);
  return [f] { return run(*f); };
}

}  // namespace

GEM_COMMAND(run, "Generate text from a prompt (one chat turn unless --raw)", setup);

}  // namespace gem::cli
