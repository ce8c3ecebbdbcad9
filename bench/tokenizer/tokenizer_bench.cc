// Tokenizer throughput: encode MB/s and tokens/s, decode MB/s, on a deterministic mixed text
// (mixed_text.h). Optionally writes the text and the ids, to compare with llama.cpp's
// llama-tokenize or tools/h3-style timing programs on the same bytes.
//
//   tokenizer_bench [-m VOCAB.gguf] [--bytes N] [--reps R] [--write-text F] [--write-ids F]
//                   [--text F] [--parse-special]
//                   [--compare IDS]   (IDS: llama-tokenize --ids output, "[2, 9259, ...]")
// --text tokenizes a file instead of the generated text (<bos> is added either way).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "base/timer.h"
#include "gguf/gguf.h"
#include "mixed_text.h"
#include "tokenizer/tokenizer.h"

int main(int argc, char** argv) {
  std::string model = GEM_DEFAULT_VOCAB;
  size_t n_bytes = 1u << 20;
  int reps = 5;
  std::string write_text, write_ids, compare, text_file;
  bool parse_special = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "-m") {
      model = next();
    } else if (a == "--bytes") {
      n_bytes = std::strtoull(next().c_str(), nullptr, 10);
    } else if (a == "--reps") {
      reps = std::max(1, std::atoi(next().c_str()));
    } else if (a == "--write-text") {
      write_text = next();
    } else if (a == "--write-ids") {
      write_ids = next();
    } else if (a == "--text") {
      text_file = next();
    } else if (a == "--parse-special") {
      parse_special = true;
    } else if (a == "--compare") {
      compare = next();
    } else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }

  gem::Timer load_timer;
  auto file = gem::gguf::GgufFile::open(model);
  if (!file.ok()) {
    std::fprintf(stderr, "%s\n", file.message().c_str());
    return 1;
  }
  auto tok = gem::Tokenizer::from_gguf(**file);
  if (!tok.ok()) {
    std::fprintf(stderr, "%s\n", tok.message().c_str());
    return 1;
  }
  const double load_s = load_timer.seconds();

  std::string text;
  if (text_file.empty()) {
    text = gem::bench::mixed_text(n_bytes);
  } else {
    std::ifstream in(text_file, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  if (!write_text.empty()) std::ofstream(write_text, std::ios::binary) << text;

  // Encode: best of `reps` (the machine is shared; the best run is the least disturbed).
  std::vector<int32_t> ids;
  double best_enc = 1e30;
  for (int r = 0; r < reps; ++r) {
    gem::Timer t;
    ids = (*tok)->encode(text, /*add_bos=*/true, parse_special);
    best_enc = std::min(best_enc, t.seconds());
  }
  std::string decoded;
  double best_dec = 1e30;
  for (int r = 0; r < reps; ++r) {
    gem::Timer t;
    decoded = (*tok)->decode(ids, false);
    best_dec = std::min(best_dec, t.seconds());
  }
  double best_stream = 1e30;
  std::string streamed;
  for (int r = 0; r < reps; ++r) {
    gem::Timer t;
    gem::StreamDecoder sd(**tok, false);
    streamed.clear();
    for (int32_t id : ids) streamed += sd.push(id);
    streamed += sd.flush();
    best_stream = std::min(best_stream, t.seconds());
  }

  const double mb = double(text.size()) / 1e6;
  std::printf("vocab load: %.3f s (%s)\n", load_s, model.c_str());
  std::printf("text: %zu bytes, %zu tokens (with <bos>), %.2f bytes/token\n", text.size(),
              ids.size(), double(text.size()) / double(ids.size()));
  std::printf("encode:        %8.2f MB/s  %10.0f tokens/s  (best of %d: %.4f s)\n", mb / best_enc,
              double(ids.size()) / best_enc, reps, best_enc);
  std::printf("decode:        %8.2f MB/s  %10.0f tokens/s  (best of %d: %.4f s)\n", mb / best_dec,
              double(ids.size()) / best_dec, reps, best_dec);
  std::printf("stream decode: %8.2f MB/s  %10.0f tokens/s  (best of %d: %.4f s)\n",
              mb / best_stream, double(ids.size()) / best_stream, reps, best_stream);
  const bool round_trip = decoded == text && streamed == text;
  std::printf("round trip: %s\n", round_trip ? "exact" : "differs (expected with --parse-special or invalid UTF-8)");

  if (!write_ids.empty()) {
    std::ofstream out(write_ids);
    for (size_t i = 0; i < ids.size(); ++i) out << (i ? " " : "") << ids[i];
    out << "\n";
  }
  if (!compare.empty()) {
    std::ifstream in(compare);
    std::stringstream ss;
    ss << in.rdbuf();
    std::string s = ss.str();
    for (char& c : s) {
      if (c == '[' || c == ']' || c == ',') c = ' ';
    }
    std::istringstream is(s);
    std::vector<int32_t> ref;
    for (long v; is >> v;) ref.push_back(int32_t(v));
    size_t first_diff = 0;
    while (first_diff < ids.size() && first_diff < ref.size() && ids[first_diff] == ref[first_diff]) {
      ++first_diff;
    }
    if (ref == ids) {
      std::printf("compare: identical to %s (%zu ids)\n", compare.c_str(), ref.size());
    } else {
      std::printf("compare: DIFFERENT from %s: %zu vs %zu ids, first difference at %zu\n",
                  compare.c_str(), ids.size(), ref.size(), first_diff);
      return 1;
    }
  }
  return round_trip || parse_special || !text_file.empty() ? 0 : 1;
}
