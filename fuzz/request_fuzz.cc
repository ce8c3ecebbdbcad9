// libFuzzer target for the server's request path: body bytes -> nesting bound -> JSON parse ->
// parse_chat_request (validation) -> chat::render -> tokenize, exactly as a chat request takes it
// (server/prepare.h). Any input must give tokens or a 4xx ApiError with a message, never a crash,
// a hang or a sanitizer report. The tokenizer comes from a GGUF with Gemma 4's vocabulary named by
// $GEM_FUZZ_VOCAB (fuzz/run_request.sh passes the vocabulary gem ships, data/gemma4-vocab.gguf).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "gguf/gguf.h"
#include "server/json_limits.h"
#include "server/prepare.h"
#include "tokenizer/tokenizer.h"

namespace {

volatile uint64_t g_sink = 0;

const gem::Tokenizer& tokenizer() {
  static std::unique_ptr<gem::gguf::GgufFile> file;
  static std::unique_ptr<gem::Tokenizer> tok = [] {
    const char* env = std::getenv("GEM_FUZZ_VOCAB");
    if (env == nullptr || *env == '\0') {
      std::fprintf(stderr, "request_fuzz: set GEM_FUZZ_VOCAB to a Gemma 4 GGUF (e.g. "
                           "data/gemma4-vocab.gguf, the vocabulary gem ships)\n");
      std::abort();
    }
    const std::string path = env;
    auto f = gem::gguf::GgufFile::open(path);
    if (!f.ok()) {
      std::fprintf(stderr, "request_fuzz: cannot open %s: %s\n", path.c_str(), f.message().c_str());
      std::abort();
    }
    file = std::move(f).value();
    auto t = gem::Tokenizer::from_gguf(*file);
    if (!t.ok()) {
      std::fprintf(stderr, "request_fuzz: tokenizer: %s\n", t.message().c_str());
      std::abort();
    }
    return std::move(t).value();
  }();
  return *tok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const gem::Tokenizer& tok = tokenizer();
  const std::string body(reinterpret_cast<const char*>(data), size);
  gem::SamplingParams defaults;
  gem::server::PreparedChat out;
  gem::server::ApiError err;
  if (!gem::server::prepare_chat(body, gem::server::kDefaultMaxJsonDepth, defaults, tok, &out,
                                 &err)) {
    // Refusals are client errors with a message.
    if (err.status < 400 || err.status >= 500 || err.message.empty()) __builtin_trap();
    g_sink = g_sink + err.message.size();
    return 0;
  }
  if (out.prompt.empty() || out.n_history < 0 ||
      out.n_history > static_cast<int>(out.prompt.size())) {
    __builtin_trap();
  }
  for (int32_t t : out.prompt) {
    if (t < 0 || t >= tok.n_vocab()) __builtin_trap();
  }
  g_sink = g_sink + out.prompt.size();
  return 0;
}
