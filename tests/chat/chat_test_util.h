// What the chat tests share: the real Gemma 4 tokenizer (from the vocabulary gem ships) and the
// rendering corpus.
#pragma once

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace gem::chat::test_util {

inline std::string vocab_path() { return test::source_dir() + "/data/gemma4-vocab.gguf"; }

// Loaded once per process; nullptr when the vocabulary cannot be read.
inline const Tokenizer* tokenizer() {
  static std::unique_ptr<gguf::GgufFile> file;
  static std::unique_ptr<Tokenizer> tok;
  if (!tok) {
    auto f = gguf::GgufFile::open(vocab_path());
    if (!f.ok()) return nullptr;
    file = std::move(*f);
    auto t = Tokenizer::from_gguf(*file);
    if (!t.ok()) return nullptr;
    tok = std::move(*t);
  }
  return tok.get();
}

// tests/chat/corpus/*.json, sorted.
inline std::vector<std::string> corpus_files() {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(test::source_dir() + "/tests/chat/corpus")) {
    if (e.path().extension() == ".json") files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace gem::chat::test_util

// Binds `tk` to the tokenizer, or fails the test saying why.
#define REQUIRE_TOKENIZER()                                                          \
  GEM_REQUIRE_FIXTURE(::gem::chat::test_util::vocab_path());                        \
  ASSERT_NE(::gem::chat::test_util::tokenizer(), nullptr) << "cannot load the tokenizer"; \
  const Tokenizer& tk = *::gem::chat::test_util::tokenizer()
