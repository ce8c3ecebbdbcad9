// `gem tokenize` and `gem detokenize`: the tokenizer of any Gemma 4 GGUF (only its tokenizer.*
// keys are read; the weights are not validated), for checking ids against llama.cpp by hand.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "cli/command.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace gem::cli {
namespace {

// Opens `path` and builds its tokenizer; the GgufFile stays open for the caller's lifetime.
Result<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& path,
                                                  std::unique_ptr<gguf::GgufFile>* file) {
  GEM_ASSIGN_OR_RETURN(*file, gguf::GgufFile::open(path));
  return Tokenizer::from_gguf(**file);
}

bool read_whole_file(const std::string& path, std::string* out) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return false;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out->append(buf, n);
  const bool ok = std::ferror(f) == 0;
  std::fclose(f);
  return ok;
}

// A piece for display: control bytes escaped so one token stays on one line.
std::string printable(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof(b), "\\x%02x", c);
      out += b;
    } else {
      out += char(c);
    }
  }
  return out;
}

struct TokenizeArgs {
  std::string model;
  std::string text;
  std::string file;
  bool no_bos = false;
  bool parse_special = false;
  bool ids_only = false;
};

RunFn setup_tokenize(CLI::App& sub) {
  auto a = std::make_shared<TokenizeArgs>();
  sub.add_option("-m,--model", a->model, "Gemma 4 GGUF (only its tokenizer is read)")->required();
  sub.add_option("-f,--file", a->file, "read the text from this file");
  sub.add_option("text", a->text, "the text to tokenize");
  sub.add_flag("--no-bos", a->no_bos, "do not prepend <bos>");
  sub.add_flag("--parse-special", a->parse_special,
               "recognise control tokens written in the text (user-defined ones always are)");
  sub.add_flag("--ids", a->ids_only, "print only the ids, as a list like [2, 9259]");
  return [a]() -> int {
    std::string text = a->text;
    if (!a->file.empty()) {
      if (!a->text.empty()) return fail("tokenize", "give either TEXT or -f FILE, not both");
      text.clear();
      if (!read_whole_file(a->file, &text)) return fail("tokenize", "cannot read " + a->file);
    }
    std::unique_ptr<gguf::GgufFile> file;
    auto tok = load_tokenizer(a->model, &file);
    if (!tok.ok()) return fail("tokenize", tok.message());
    const std::vector<int32_t> ids = (*tok)->encode(text, !a->no_bos, a->parse_special);
    if (a->ids_only) {
      std::string line = "[";
      for (size_t i = 0; i < ids.size(); ++i) {
        if (i) line += ", ";
        line += std::to_string(ids[i]);
      }
      line += "]\n";
      std::fputs(line.c_str(), stdout);
    } else {
      for (int32_t id : ids) {
        std::printf("%6d -> '%s'\n", id, printable((*tok)->token_text(id)).c_str());
      }
      std::printf("%zu tokens\n", ids.size());
    }
    return 0;
  };
}

struct DetokenizeArgs {
  std::string model;
  std::vector<std::string> ids;
  bool render_special = false;
};

RunFn setup_detokenize(CLI::App& sub) {
  auto a = std::make_shared<DetokenizeArgs>();
  sub.add_option("-m,--model", a->model, "Gemma 4 GGUF (only its tokenizer is read)")->required();
  sub.add_option("ids", a->ids, "token ids, separated by commas and/or spaces")->required();
  sub.add_flag("--special", a->render_special, "render control tokens as their text");
  return [a]() -> int {
    std::vector<int32_t> ids;
    for (const std::string& arg : a->ids) {
      std::string cur;
      auto take = [&]() -> bool {
        if (cur.empty()) return true;
        char* end = nullptr;
        const long v = std::strtol(cur.c_str(), &end, 10);
        if (*end != '\0' || v < 0 || v > INT32_MAX) return false;
        ids.push_back(int32_t(v));
        cur.clear();
        return true;
      };
      for (char c : arg + ",") {
        if (c == ',' || c == ' ' || c == '[' || c == ']' || c == '\t' || c == '\n') {
          if (!take()) return fail("detokenize", "not a token id: '" + cur + "'");
        } else {
          cur += c;
        }
      }
    }
    std::unique_ptr<gguf::GgufFile> file;
    auto tok = load_tokenizer(a->model, &file);
    if (!tok.ok()) return fail("detokenize", tok.message());
    for (int32_t id : ids) {
      if (id >= (*tok)->n_vocab()) {
        return fail("detokenize", strprintf("token id %d is outside the vocabulary (0..%d)", id,
                                            (*tok)->n_vocab() - 1));
      }
    }
    const std::string text = (*tok)->decode(ids, a->render_special);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fputc('\n', stdout);
    return 0;
  };
}

}  // namespace

GEM_COMMAND(tokenize, "print the token ids of a text (Gemma 4 tokenizer)", setup_tokenize);
GEM_COMMAND(detokenize, "print the text of token ids", setup_detokenize);

}  // namespace gem::cli
