// Tokenizer tests: golden ids from llama.cpp (golden.json, llama.cpp's own gemma-4 vectors, the
// spec's templated prompts), an independent naive BPE (spec §5.3 written the slow, obvious way)
// on hand-picked and random strings, decode round trips, streaming UTF-8 and the loader's checks.
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <unordered_map>

#include "common/test_util.h"
#include "gguf/writer.h"
#include "mixed_text.h"

namespace gem {
namespace {

using Ids = std::vector<int32_t>;

std::string vocab_path() {
  const std::string own = test::source_dir() + "/data/gemma4-vocab.gguf";
  if (test::file_exists(own)) return own;
  return test::fixture("tiny-q4_0.gguf");
}

// One tokenizer (and its GGUF) for the whole binary: loading 515k merges takes a moment.
struct Shared {
  std::unique_ptr<gguf::GgufFile> file;
  std::unique_ptr<Tokenizer> tok;
};
Shared& shared() {
  static Shared s = [] {
    Shared r;
    auto f = gguf::GgufFile::open(vocab_path());
    if (!f.ok()) {
      ADD_FAILURE() << f.message();
      return r;
    }
    r.file = std::move(f).value();
    auto t = Tokenizer::from_gguf(*r.file);
    if (!t.ok()) {
      ADD_FAILURE() << t.message();
      return r;
    }
    r.tok = std::move(t).value();
    return r;
  }();
  return s;
}

class TokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GEM_REQUIRE_FIXTURE(vocab_path());
    ASSERT_NE(shared().tok, nullptr);
    tok_ = shared().tok.get();
  }
  int32_t id(std::string_view text) const {
    const int32_t i = tok_->find_token(text);
    EXPECT_GE(i, 0) << "token not in vocabulary: " << text;
    return i;
  }
  std::vector<std::string> pieces(const Ids& ids) const {
    std::vector<std::string> out;
    for (int32_t i : ids) out.emplace_back(tok_->token_text(i));
    return out;
  }
  const Tokenizer* tok_ = nullptr;
};

std::string show(const Ids& ids) {
  std::ostringstream os;
  for (size_t i = 0; i < ids.size(); ++i) os << (i ? " " : "") << ids[i];
  return os.str();
}

std::string escaped(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += char(c);
    }
  }
  return out;
}

// ------------------------------------------------------------------ a naive reference (§5.3)

// Spec §5.3 steps 2–6 written the obvious way for raw text without special tokens: strings,
// a rescan for the lowest-rank pair each round, merges looked up by their "a b" string.
class NaiveBpe {
 public:
  NaiveBpe(const gguf::GgufFile& file, const Tokenizer& tok) : tok_(tok) {
    auto merges = file.get_string_array("tokenizer.ggml.merges");
    EXPECT_TRUE(merges.ok());
    if (!merges.ok()) return;
    int rank = 0;
    for (std::string_view m : **merges) rank_.emplace(std::string(m), rank++);
  }

  Ids encode(const std::string& text) const {
    std::string s;  // step 2: ' ' -> ▁
    for (char c : text) {
      if (c == ' ') {
        s += "\xE2\x96\x81";
      } else {
        s += c;
      }
    }
    Ids out;
    size_t pos = 0;
    while (pos < s.size()) {  // step 3: runs of '\n' and of anything else
      const bool nl = s[pos] == '\n';
      size_t end = pos;
      while (end < s.size() && (s[end] == '\n') == nl) ++end;
      const std::string word = s.substr(pos, end - pos);
      pos = end;
      if (nl && tok_.find_token(word) >= 0) {  // step 4
        out.push_back(tok_.find_token(word));
        continue;
      }
      // step 5: one symbol per UTF-8 character (by lead byte; inputs here are valid UTF-8).
      std::vector<std::string> sym;
      for (size_t i = 0; i < word.size();) {
        const unsigned char c = word[i];
        const size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
        sym.push_back(word.substr(i, len));
        i += len;
      }
      while (sym.size() > 1) {
        int best = -1;
        size_t best_i = 0;
        for (size_t i = 0; i + 1 < sym.size(); ++i) {
          auto it = rank_.find(sym[i] + " " + sym[i + 1]);
          if (it != rank_.end() && (best < 0 || it->second < best)) {
            best = it->second;
            best_i = i;
          }
        }
        if (best < 0) break;
        sym[best_i] += sym[best_i + 1];
        sym.erase(sym.begin() + best_i + 1);
      }
      for (const std::string& x : sym) {  // step 6
        const int32_t t = tok_.find_token(x);
        if (t >= 0) {
          out.push_back(t);
        } else {
          for (unsigned char b : x) {
            char name[8];
            std::snprintf(name, sizeof(name), "<0x%02X>", b);
            out.push_back(tok_.find_token(name));
          }
        }
      }
    }
    return out;
  }

 private:
  const Tokenizer& tok_;
  std::unordered_map<std::string, int> rank_;
};

const NaiveBpe& naive() {
  static NaiveBpe n(*shared().file, *shared().tok);
  return n;
}

// ------------------------------------------------------------------ golden data from llama.cpp

TEST_F(TokenizerTest, GoldenJson) {
  const std::string path = test::fixture("tokenizer/golden.json");
  GEM_REQUIRE_FIXTURE(path);
  const auto golden = nlohmann::json::parse(test::read_text(path));
  const auto& cases = golden.at("cases");
  ASSERT_GE(cases.size(), 40u);
  for (const auto& c : cases) {
    const std::string text = c.at("text");
    const Ids want = c.at("ids").get<Ids>();
    const Ids want_plain = c.at("ids_no_special").get<Ids>();
    const std::vector<std::string> want_pieces = c.at("pieces");
    const Ids got = tok_->encode(text, /*add_bos=*/false, /*parse_special=*/true);
    const Ids got_plain = tok_->encode(text, false, false);
    EXPECT_EQ(show(got), show(want)) << "parse_special on: \"" << escaped(text) << "\"";
    EXPECT_EQ(show(got_plain), show(want_plain)) << "parse_special off: \"" << escaped(text) << "\"";
    EXPECT_EQ(pieces(got), want_pieces) << "\"" << escaped(text) << "\"";
  }
}

TEST_F(TokenizerTest, LlamaCppGemma4Vectors) {
  const std::string inp = test::fixture("tokenizer/llama-vocab-gemma-4.inp");
  const std::string outp = test::fixture("tokenizer/llama-vocab-gemma-4.out");
  GEM_REQUIRE_FIXTURE(inp);
  GEM_REQUIRE_FIXTURE(outp);
  std::string raw = test::read_text(inp);
  if (!raw.empty() && raw.back() == '\n') raw.pop_back();  // the final newline is not a case's
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (size_t pos = 0;;) {
    const size_t next = raw.find(sep, pos);
    if (next == std::string::npos) {
      texts.push_back(raw.substr(pos));
      break;
    }
    texts.push_back(raw.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::vector<Ids> wants;
  std::istringstream lines(test::read_text(outp));
  for (std::string line; std::getline(lines, line);) {
    Ids ids;
    std::istringstream ls(line);
    for (int32_t v; ls >> v;) ids.push_back(v);
    wants.push_back(ids);
  }
  ASSERT_EQ(texts.size(), 46u);
  ASSERT_EQ(texts.size(), wants.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    EXPECT_EQ(show(tok_->encode(texts[i], false, false)), show(wants[i]))
        << "case " << i << ": \"" << escaped(texts[i]) << "\"";
  }
}

// Spec §6.4: templated prompts, tokenized with parse_special on and a <bos> added.
TEST_F(TokenizerTest, TemplatedPrompts) {
  const std::string p1 =
      "<|turn>user\nHello!<turn|>\n<|turn>model\n<|channel>thought\n<channel|>";
  const Ids w1 = {2, 105, 2364, 107, 9259, 236888, 106, 107, 105, 4368, 107, 100, 45518, 107, 101};
  EXPECT_EQ(show(tok_->encode(p1, true, true)), show(w1));
  // The template writes "<bos>" as text: still exactly one <bos>.
  EXPECT_EQ(show(tok_->encode("<bos>" + p1, true, true)), show(w1));

  const std::string p2 =
      "<|turn>system\n<|think|>\nYou are terse.<turn|>\n<|turn>user\nWhat is 2+2?<turn|>\n"
      "<|turn>model\n";
  const Ids w2 = {2,   105,    9731, 107,    98,     107,    3048,   659, 17514, 236761,
                  106, 107,    105,  2364,   107,    3689,   563,    236743, 236778, 236862,
                  236778, 236881, 106, 107,  105,    4368,   107};
  EXPECT_EQ(show(tok_->encode(p2, true, true)), show(w2));
  EXPECT_EQ(show(tok_->encode("<bos>" + p2, true, true)), show(w2));

  const std::string tail =
      "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|><|tool_response>";
  const Ids wt = {48, 6639, 236787, 828, 236779, 19323, 236782, 13319, 236787, 52, 50429, 52,
                  236783, 49, 50};
  EXPECT_EQ(show(tok_->encode(tail, false, true)), show(wt));
}

// ------------------------------------------------------------------ our own cases

TEST_F(TokenizerTest, NewlineRuns) {
  // 1..31 newlines are tokens 107..137, emitted directly.
  for (int k = 1; k <= 31; ++k) {
    EXPECT_EQ(show(tok_->encode(std::string(k, '\n'), false, false)), show({106 + k})) << k;
  }
  // Longer runs go through BPE over '\n' characters (spec §5.6): 40 = 31 + 9.
  EXPECT_EQ(show(tok_->encode(std::string(40, '\n'), false, false)), show({137, 115}));
  EXPECT_EQ(show(tok_->encode("a\n\n\nb", false, false)), show({id("a"), 109, id("b")}));
}

TEST_F(TokenizerTest, WhitespaceAndTabs) {
  EXPECT_EQ(pieces(tok_->encode("x = 1;\r\n", false, false)),
            (std::vector<std::string>{"x", "▁=", "▁", "1", ";", "<0x0D>", "\n"}));
  // Tab runs are tokens 255968.. (one tab) upward; runs of spaces are tokens 138.. (2 spaces).
  EXPECT_EQ(show(tok_->encode("\t", false, false)), show({255968}));
  EXPECT_EQ(show(tok_->encode("  ", false, false)), show({138}));
  for (const std::string& s : std::vector<std::string>{std::string(5, '\t'), std::string(31, '\t'), std::string(31, ' '),
                              std::string(45, ' '), std::string("\t \t  \t   x"),
                              std::string("  indented\n\tcode\n\n    more  \t")}) {
    const Ids got = tok_->encode(s, false, false);
    EXPECT_EQ(show(got), show(naive().encode(s))) << "\"" << escaped(s) << "\"";
    EXPECT_EQ(tok_->decode(got, false), s);
  }
}

TEST_F(TokenizerTest, HtmlTagsArePlainText) {
  // <table> is a normal token (168) that BPE never produces from text (spec §5.6).
  EXPECT_EQ(pieces(tok_->encode("<table>", false, false)),
            (std::vector<std::string>{"<", "table", ">"}));
  EXPECT_EQ(pieces(tok_->encode("<table>", false, true)),
            (std::vector<std::string>{"<", "table", ">"}));
  for (const std::string& s : std::vector<std::string>{"<div class=\"a\"><tr><td>1</td></tr></div>", "x<table>y",
                              "</s> <unused0> <start_of_turn>"}) {
    EXPECT_EQ(show(tok_->encode(s, false, true)), show(naive().encode(s))) << s;
  }
}

TEST_F(TokenizerTest, ScriptsAndEmoji) {
  for (const std::string& s : std::vector<std::string>
       {"🦙", "👍🏽 👨‍👩‍👧‍👦 🇫🇷", "日本語のテキスト 中文 한국어", "Привет, мир", "مرحبا بالعالم",
        "שלום", "नमस्ते दुनिया", "e\u0301te\u0301 n\u0303 Z\u0351\u0352\u0353",
        "ﬁﬂ ½ ™ © \u00a0nbsp\u200bzwsp", "x\u2028y"}) {
    const Ids got = tok_->encode(s, false, false);
    EXPECT_EQ(show(got), show(naive().encode(s))) << s;
    EXPECT_EQ(tok_->decode(got, false), s);
  }
  // 🦙 is not in the vocabulary: its four bytes as <0xXX> tokens (id 238 + byte).
  EXPECT_EQ(show(tok_->encode("🦙", false, false)), show({238 + 0xF0, 238 + 0x9F, 238 + 0xA6, 238 + 0x99}));
}

TEST_F(TokenizerTest, VeryLongWordIsNotQuadratic) {
  const std::string word(100 * 1024, 'a');
  const auto t0 = std::chrono::steady_clock::now();
  const Ids got = tok_->encode(word, false, false);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 2.0) << "100 KB word took " << s << " s";
  EXPECT_EQ(tok_->decode(got, false), word);
  EXPECT_LT(got.size(), word.size() / 4);  // merges did build long runs of 'a'
  // The same algorithm on a size the naive reference can afford.
  const std::string small(1500, 'a');
  EXPECT_EQ(show(tok_->encode(small, false, false)), show(naive().encode(small)));
  const std::string mixed = std::string(700, 'a') + " " + std::string(500, 'b') + std::string(300, ' ');
  EXPECT_EQ(show(tok_->encode(mixed, false, false)), show(naive().encode(mixed)));
}

TEST_F(TokenizerTest, InvalidUtf8FallsBackToBytes) {
  const std::vector<std::string> cases = {
      "\xFF",           "\x80\x80",          "a\xC3",           "\xE2\x96",        // truncated
      "\xC0\xAF",       "\xED\xA0\x80",      "\xF4\x90\x80\x80", "\xF8\x88\x80\x80\x80",  // overlong, surrogate, > U+10FFFF
      "ok \xE2\x28\xA1 ok", "caf\xE9 au lait", std::string("nul\0byte", 8)};
  for (const std::string& s : cases) {
    const Ids got = tok_->encode(s, false, false);
    EXPECT_EQ(tok_->decode(got, false), s) << escaped(s);
    for (int32_t i : got) EXPECT_TRUE(i >= 0 && i < tok_->n_vocab());
  }
  // Each invalid byte is its own byte token.
  EXPECT_EQ(show(tok_->encode("\xFF", false, false)), show({238 + 0xFF}));
  EXPECT_EQ(show(tok_->encode("a\xC3", false, false)), show({id("a"), 238 + 0xC3}));
  EXPECT_EQ(show(tok_->encode("\xE2\x96", false, false)), show({238 + 0xE2, 238 + 0x96}));
}

TEST_F(TokenizerTest, SpecialTokensWithParseSpecialOnAndOff) {
  int n_control = 0, n_user = 0;
  for (int32_t i = 0; i < tok_->n_vocab(); ++i) {
    const TokenType type = tok_->token_type(i);
    if (type != TokenType::kControl && type != TokenType::kUserDefined) continue;
    const std::string text(tok_->token_text(i));
    (type == TokenType::kControl ? n_control : n_user)++;
    // Parsed: the token itself, also between words.
    EXPECT_EQ(show(tok_->encode(text, false, true)), show({i})) << text;
    const Ids mid = tok_->encode("a" + text + "b", false, true);
    EXPECT_EQ(show(mid), show({id("a"), i, id("b")})) << text;
    // Not parsed: control tokens (and <|tool_response>, which llama.cpp retypes as control)
    // are plain text; user-defined tokens are still recognised.
    const Ids plain = tok_->encode(text, false, false);
    if (tok_->is_control(i)) {
      EXPECT_EQ(show(plain), show(naive().encode(text))) << text;
      EXPECT_GT(plain.size(), 1u) << text;
      EXPECT_EQ(tok_->decode(plain, false), text);
    } else {
      EXPECT_EQ(show(plain), show({i})) << text;
    }
  }
  EXPECT_EQ(n_control, 17);
  EXPECT_EQ(n_user, 7);
  EXPECT_TRUE(tok_->is_control(tok::kToolRespStart));
  EXPECT_FALSE(tok_->is_control(tok::kToolCallStart));
  EXPECT_FALSE(tok_->is_control(tok::kChannelStart));
  // Adjacent specials, longest first.
  EXPECT_EQ(show(tok_->encode("<|turn><turn|><|\"|><|\"|>", false, true)), show({105, 106, 52, 52}));
}

// encode_text: no special token of either type is recognised (the naive BPE's ids, which know
// no specials), even between words; for text that spells none it equals encode(x, false, true).
TEST_F(TokenizerTest, EncodeTextRecognisesNoSpecialToken) {
  int n_special = 0;
  for (int32_t i = 0; i < tok_->n_vocab(); ++i) {
    const TokenType type = tok_->token_type(i);
    if (type != TokenType::kControl && type != TokenType::kUserDefined) continue;
    ++n_special;
    const std::string text(tok_->token_text(i));
    for (const std::string& s : {text, "a" + text + "b", text + text}) {
      Ids ids = {7};  // appends
      tok_->encode_text(s, ids);
      ASSERT_GE(ids.size(), 2u) << s;
      EXPECT_EQ(ids[0], 7);
      const Ids got(ids.begin() + 1, ids.end());
      EXPECT_EQ(show(got), show(naive().encode(s))) << s;
      for (int32_t g : got) {
        const TokenType t = tok_->token_type(g);
        EXPECT_TRUE(t != TokenType::kControl && t != TokenType::kUserDefined) << s << ": " << g;
      }
      EXPECT_EQ(tok_->decode(got, false), s);
    }
  }
  EXPECT_EQ(n_special, 24);
  // A memo shared by many calls on one vector changes nothing but the speed; handed another
  // vector, it starts over rather than copying ids from the wrong one.
  const std::string text = bench::mixed_text(20000);
  Ids plain, memoised, other;
  Tokenizer::TextMemo memo;
  for (size_t off = 0; off < text.size(); off += 700) {
    const std::string_view piece = std::string_view(text).substr(off, 700);
    tok_->encode_text(piece, plain);
    tok_->encode_text(piece, memoised, &memo);
    plain.push_back(106);
    memoised.push_back(106);
  }
  EXPECT_EQ(memoised, plain);
  tok_->encode_text(std::string_view(text).substr(0, 700), other, &memo);
  Ids fresh;
  tok_->encode_text(std::string_view(text).substr(0, 700), fresh);
  EXPECT_EQ(other, fresh);
  for (const std::string& s : std::vector<std::string>{"Hello world", "line one\n\n  indented\ttab", "naïve ünïcödé 日本語 🙂",
                              std::string(3000, 'x') + " the the the"}) {
    Ids ids;
    tok_->encode_text(s, ids);
    EXPECT_EQ(show(ids), show(tok_->encode(s, false, true))) << s;
  }
}

TEST_F(TokenizerTest, BosHandling) {
  EXPECT_EQ(show(tok_->encode("", true, true)), show({2}));
  EXPECT_EQ(show(tok_->encode("", false, true)), show({}));
  EXPECT_EQ(show(tok_->encode("Hello", true, false)), show({2, 9259}));
  EXPECT_EQ(show(tok_->encode("<bos>Hello", true, true)), show({2, 9259}));
  EXPECT_EQ(show(tok_->encode("<bos>Hello", false, true)), show({2, 9259}));
  // Not parsed: "<bos>" is text, and the one <bos> is the added one.
  EXPECT_EQ(show(tok_->encode("<bos>Hello", true, false)), show({2, 236820, 46757, 236813, 9259}));
  EXPECT_TRUE(tok_->add_bos());
  EXPECT_EQ(tok_->bos_id(), tok::kBos);
}

TEST_F(TokenizerTest, EndOfGeneration) {
  EXPECT_TRUE(tok_->is_eog(tok::kEos));
  EXPECT_TRUE(tok_->is_eog(tok::kTurnEnd));
  EXPECT_TRUE(tok_->is_eog(tok::kToolRespStart));
  EXPECT_TRUE(tok_->is_eog(tok_->eos_id()));
  for (int32_t i : {0, 2, 3, 48, 49, 51, 52, 100, 101, 105, 212, 9259}) EXPECT_FALSE(tok_->is_eog(i)) << i;
}

TEST_F(TokenizerTest, Pieces) {
  EXPECT_EQ(tok_->token_to_piece(1902, false), " world");
  EXPECT_EQ(tok_->token_to_piece(140, false), "    ");
  EXPECT_EQ(tok_->token_to_piece(238 + 0x41, false), "A");
  EXPECT_EQ(tok_->token_to_piece(238 + 0xF0, false), "\xF0");
  EXPECT_EQ(tok_->token_to_piece(tok::kTurnStart, false), "");
  EXPECT_EQ(tok_->token_to_piece(tok::kTurnStart, true), "<|turn>");
  EXPECT_EQ(tok_->token_to_piece(tok::kBos, false), "");
  EXPECT_EQ(tok_->token_to_piece(tok::kChannelStart, false), "<|channel>");  // user-defined
  EXPECT_EQ(tok_->token_to_piece(tok::kStrDelim, false), "<|\"|>");
  EXPECT_EQ(tok_->token_to_piece(tok::kToolRespStart, false), "");  // control-like, see header
  EXPECT_EQ(tok_->token_to_piece(tok::kToolRespStart, true), "<|tool_response>");
  EXPECT_EQ(tok_->token_to_piece(-1, true), "");
  EXPECT_EQ(tok_->token_to_piece(tok_->n_vocab(), true), "");
  const Ids ids = tok_->encode("<|turn>user\nHi there<turn|>", true, true);
  EXPECT_EQ(tok_->decode(ids, false), "user\nHi there");
  EXPECT_EQ(tok_->decode(ids, true), "<bos><|turn>user\nHi there<turn|>");
}

TEST_F(TokenizerTest, StreamDecoderHoldsPartialCodePoints) {
  const std::string text = " this is 🦙.cpp";
  const Ids ids = tok_->encode(text, false, false);
  ASSERT_EQ(show(ids), show({672, 563, 236743, 478, 397, 404, 391, 236761, 12362}));
  StreamDecoder sd(*tok_, false);
  std::vector<std::string> outs;
  for (int32_t i : ids) outs.push_back(sd.push(i));
  EXPECT_EQ(outs, (std::vector<std::string>{" this", " is", " ", "", "", "", "🦙", ".", "cpp"}));
  EXPECT_EQ(sd.flush(), "");

  // Every emitted chunk is valid UTF-8 and the whole equals decode() for valid text.
  const std::string s2 = "👍🏽 日本 \xF0\x9F\xA6\x99\xF0\x9F\xA6\x99 e\u0301";
  StreamDecoder sd2(*tok_, false);
  std::string all;
  for (int32_t i : tok_->encode(s2, false, false)) all += sd2.push(i);
  all += sd2.flush();
  EXPECT_EQ(all, s2);
}

TEST_F(TokenizerTest, StreamDecoderReplacesInvalidBytes) {
  auto stream = [&](const std::string& s) {
    StreamDecoder sd(*tok_, false);
    std::string out;
    for (int32_t i : tok_->encode(s, false, false)) out += sd.push(i);
    return out + sd.flush();
  };
  const std::string rep = "\xEF\xBF\xBD";
  EXPECT_EQ(stream("\xFF" "a"), rep + "a");
  EXPECT_EQ(stream("\xE2\x96" "a"), rep + "a");          // one U+FFFD per maximal subpart
  EXPECT_EQ(stream("a\xF0\x9F\xA6"), "a" + rep);          // cut short at the end: flush
  EXPECT_EQ(stream("\xC0\xAF"), rep + rep);               // overlong: two invalid bytes
  EXPECT_EQ(stream("\xED\xA0\x80"), rep + rep + rep);     // surrogate
  // Held bytes are released as soon as the sequence is proven invalid, not only at flush.
  StreamDecoder sd(*tok_, false);
  EXPECT_EQ(sd.push(238 + 0xE2), "");
  EXPECT_EQ(sd.push(238 + 0x96), "");
  EXPECT_EQ(sd.push(id("a")), rep + "a");
  EXPECT_EQ(sd.flush(), "");
  // Specials follow render_special.
  StreamDecoder sp(*tok_, true);
  EXPECT_EQ(sp.push(tok::kTurnStart), "<|turn>");
  StreamDecoder sq(*tok_, false);
  EXPECT_EQ(sq.push(tok::kTurnStart), "");
}

// Random strings over awkward pieces: our ids equal the naive reference's, and decode gives the
// text back (byte fallback keeps even invalid UTF-8).
TEST_F(TokenizerTest, RandomStringsMatchReferenceAndRoundTrip) {
  const std::vector<std::string> atoms = {
      "a", "e", "the", " ", "  ", "\n", "\n\n", "\t", "\r", "0", "7", ".", ",", "!", "?", "'",
      "\"", "<", ">", "/", "{", "}", "(", ")", "=", "_", "-", "é", "Ä", "ß", "ñ", "日", "本",
      "語", "の", "中", "한", "Ж", "ж", "م", "ש", "न", "\u0301", "\u200b", "\u00a0", "½", "€",
      "🦙", "😁", "👍", "\U0001F3FD", "\u200d", "ﬁ", "Hello", " world", "ing", "tion", "http://",
      "<table>", "<unused3>", "</s>", "<eos>x", "<|turn", "turn|>", "> </", ">", "é "};
  const std::vector<std::string> invalid = {"\xFF", "\x80", "\xE2\x96", "\xC3", "\xF0\x9F"};
  std::mt19937 rng(1234);
  for (int iter = 0; iter < 300; ++iter) {
    std::string s;
    const int n = int(rng() % 40);
    bool valid = true;
    for (int k = 0; k < n; ++k) {
      if (rng() % 25 == 0) {
        s += invalid[rng() % invalid.size()];
        valid = false;
      } else {
        s += atoms[rng() % atoms.size()];
      }
    }
    const Ids got = tok_->encode(s, false, false);
    EXPECT_EQ(tok_->decode(got, false), s) << "\"" << escaped(s) << "\"";
    if (valid) {
      EXPECT_EQ(show(got), show(naive().encode(s))) << "\"" << escaped(s) << "\"";
      StreamDecoder sd(*tok_, false);
      std::string streamed;
      for (int32_t i : got) streamed += sd.push(i);
      streamed += sd.flush();
      EXPECT_EQ(streamed, s);
    }
  }
  // Random code points (all planes, no surrogates, no U+2581 which encodes like a space).
  for (int iter = 0; iter < 200; ++iter) {
    std::string s;
    const int n = int(rng() % 30);
    for (int k = 0; k < n; ++k) {
      uint32_t cp;
      do {
        const uint32_t r = rng();
        cp = (r & 3) == 0 ? (r >> 8) % 0x80 : (r & 3) == 1 ? (r >> 8) % 0x800 : (r >> 8) % 0x110000;
      } while ((cp >= 0xD800 && cp <= 0xDFFF) || cp == 0x2581);
      if (cp < 0x80) {
        s += char(cp);
      } else if (cp < 0x800) {
        s += char(0xC0 | (cp >> 6));
        s += char(0x80 | (cp & 0x3F));
      } else if (cp < 0x10000) {
        s += char(0xE0 | (cp >> 12));
        s += char(0x80 | ((cp >> 6) & 0x3F));
        s += char(0x80 | (cp & 0x3F));
      } else {
        s += char(0xF0 | (cp >> 18));
        s += char(0x80 | ((cp >> 12) & 0x3F));
        s += char(0x80 | ((cp >> 6) & 0x3F));
        s += char(0x80 | (cp & 0x3F));
      }
    }
    const Ids got = tok_->encode(s, false, false);
    EXPECT_EQ(tok_->decode(got, false), s);
    EXPECT_EQ(show(got), show(naive().encode(s))) << "\"" << escaped(s) << "\"";
  }
}

// Long inputs take the memoised path (pieces cut before spaces, cached per call): the same ids
// as encoding each line on its own, and as the naive reference on long random texts.
TEST_F(TokenizerTest, LongInputsMatchShortOnes) {
  const std::string text = bench::mixed_text(64 * 1024);
  Ids by_piece;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = pos;
    const bool nl = text[pos] == '\n';
    while (end < text.size() && (text[end] == '\n') == nl) ++end;
    const std::string piece = text.substr(pos, end - pos);
    ASSERT_LT(piece.size(), 2048u);  // short: encoded without the memo
    const Ids ids = tok_->encode(piece, false, false);
    by_piece.insert(by_piece.end(), ids.begin(), ids.end());
    pos = end;
  }
  const Ids whole = tok_->encode(text, false, false);
  EXPECT_EQ(whole, by_piece);
  EXPECT_EQ(tok_->decode(whole, false), text);

  std::mt19937 rng(99);
  const std::vector<std::string> atoms = {"the", " ", " ", "  ", "a", "é", "日本", "> </", ">",
                                          " >", "!", "\n", "🦙", "\t", "x", "ing", "<b>"};
  for (int iter = 0; iter < 4; ++iter) {
    std::string s;
    while (s.size() < 3000) s += atoms[rng() % atoms.size()];
    EXPECT_EQ(show(tok_->encode(s, false, false)), show(naive().encode(s)));
  }
  // The one token with a character before "▁" (">▁</"): no cut may separate it.
  EXPECT_EQ(pieces(tok_->encode("<b> </b>", false, false)), pieces(naive().encode("<b> </b>")));
  std::string many;
  while (many.size() < 4000) many += "<b> </b> x";
  EXPECT_EQ(show(tok_->encode(many, false, false)), show(naive().encode(many)));
}

// ------------------------------------------------------------------ the loader's checks

// The vocabulary's tokenizer.* keys, with `edit` applied to the token list, as an in-memory GGUF.
std::vector<uint8_t> edited_vocab(const std::function<void(std::vector<std::string>&)>& edit,
                                  const std::string& model = "gemma4") {
  const gguf::GgufFile& f = *shared().file;
  gguf::GgufWriter w;
  std::vector<std::string> tokens;
  for (const gguf::KeyValue& kv : f.kvs()) {
    if (kv.key == "tokenizer.ggml.tokens") {
      for (std::string_view t : kv.array_strings) tokens.emplace_back(t);
    } else if (kv.key == "tokenizer.ggml.model") {
      w.add_string(kv.key, model);
    } else if (kv.key.starts_with("tokenizer.ggml.")) {
      w.add_kv_copy(kv);
    }
  }
  edit(tokens);
  std::vector<std::string_view> views(tokens.begin(), tokens.end());
  w.add_string_array("tokenizer.ggml.tokens", views);
  return w.to_bytes();
}

TEST_F(TokenizerTest, LoaderRejectsADifferentVocabulary) {
  {  // Unchanged: loads, and encodes like the original.
    const std::vector<uint8_t> bytes = edited_vocab([](std::vector<std::string>&) {});
    auto f = gguf::GgufFile::parse(bytes.data(), bytes.size(), "same.gguf");
    ASSERT_TRUE(f.ok()) << f.message();
    auto t = Tokenizer::from_gguf(**f);
    ASSERT_TRUE(t.ok()) << t.message();
    EXPECT_EQ(show((*t)->encode("Hello world<turn|>", true, true)), show({2, 9259, 1902, 106}));
  }
  {  // <|turn> and <turn|> swapped.
    const std::vector<uint8_t> bytes =
        edited_vocab([](std::vector<std::string>& t) { std::swap(t[105], t[106]); });
    auto f = gguf::GgufFile::parse(bytes.data(), bytes.size(), "swapped.gguf");
    ASSERT_TRUE(f.ok()) << f.message();
    auto t = Tokenizer::from_gguf(**f);
    ASSERT_FALSE(t.ok());
    EXPECT_NE(t.message().find("token 105"), std::string::npos) << t.message();
    EXPECT_NE(t.message().find("<|turn>"), std::string::npos) << t.message();
  }
  {  // Too small to hold the ids.
    const std::vector<uint8_t> bytes = edited_vocab([](std::vector<std::string>& t) { t.resize(50); });
    auto f = gguf::GgufFile::parse(bytes.data(), bytes.size(), "small.gguf");
    ASSERT_TRUE(f.ok()) << f.message();
    auto t = Tokenizer::from_gguf(**f);
    ASSERT_FALSE(t.ok());
    EXPECT_NE(t.message().find("expected"), std::string::npos) << t.message();
  }
  {  // Another tokenizer model.
    const std::vector<uint8_t> bytes = edited_vocab([](std::vector<std::string>&) {}, "llama");
    auto f = gguf::GgufFile::parse(bytes.data(), bytes.size(), "llama.gguf");
    ASSERT_TRUE(f.ok()) << f.message();
    auto t = Tokenizer::from_gguf(**f);
    ASSERT_FALSE(t.ok());
    EXPECT_NE(t.message().find("gemma4"), std::string::npos) << t.message();
  }
}

}  // namespace
}  // namespace gem
