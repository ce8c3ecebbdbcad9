// The Gemma 4 tokenizer (spec §5): BPE over UTF-8 characters with SentencePiece-style "▁"
// spaces, newline runs, byte fallback and special tokens, loaded from a GGUF's tokenizer.* keys.
// Reproduces llama.cpp's ids exactly. Decoding is streaming-safe: never emits part of a UTF-8
// code point.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "gguf/gguf.h"

namespace gem {

// GGUF token types.
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// Ids the runtime keys on (spec §5.2); the loader checks them against the vocabulary.
namespace tok {
constexpr int32_t kPad = 0;
constexpr int32_t kEos = 1;
constexpr int32_t kBos = 2;
constexpr int32_t kToolDeclStart = 46;   // <|tool>
constexpr int32_t kToolDeclEnd = 47;     // <tool|>
constexpr int32_t kToolCallStart = 48;   // <|tool_call>
constexpr int32_t kToolCallEnd = 49;     // <tool_call|>
constexpr int32_t kToolRespStart = 50;   // <|tool_response>  (end of generation)
constexpr int32_t kToolRespEnd = 51;     // <tool_response|>
constexpr int32_t kStrDelim = 52;        // <|"|>
constexpr int32_t kThink = 98;           // <|think|>
constexpr int32_t kChannelStart = 100;   // <|channel>
constexpr int32_t kChannelEnd = 101;     // <channel|>
constexpr int32_t kTurnStart = 105;      // <|turn>
constexpr int32_t kTurnEnd = 106;        // <turn|>  (end of generation)
}  // namespace tok

class Tokenizer {
 public:
  static Result<std::unique_ptr<Tokenizer>> from_gguf(const gguf::GgufFile& file);
  ~Tokenizer();

  // add_bos: prepend exactly one <bos> (text starting with "<bos>" parsed as the token does not
  // get a second one). parse_special: recognise control tokens written in the text (user-defined
  // tokens are always recognised, as in llama.cpp; see is_control for the exception).
  // Invalid UTF-8 never fails: each byte that does not belong to a valid sequence becomes its
  // <0xXX> byte token, so decode(encode(x)) == x for any bytes x without "▁" (U+2581, which
  // encodes like a space). llama.cpp instead replaces such bytes with U+FFFD.
  std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special) const;
  // Memoised chunks shared by a run of encode_text() calls that append to one vector: a speed-up
  // only (a long conversation repeats its words across many short texts). The texts must
  // outlive the memo; used with another vector, it starts over.
  class TextMemo {
   public:
    TextMemo();
    ~TextMemo();
    struct Impl;

   private:
    friend class Tokenizer;
    std::unique_ptr<Impl> impl_;
  };

  // Appends the ids of `text` read as plain text: no control or user-defined token is
  // recognised, so "<|turn>" becomes the ids of its characters (no BPE merge yields a special
  // token). For text a prompt quotes, such as chat message content: it cannot open or close
  // turns. Equal to encode(text, false, true) for text that spells no special token.
  void encode_text(std::string_view text, std::vector<int32_t>& out,
                   TextMemo* memo = nullptr) const;

  // The bytes a token stands for ("▁" -> " ", <0xXX> -> one byte). Control tokens give their
  // text only when render_special.
  std::string token_to_piece(int32_t id, bool render_special) const;
  // The same bytes without a copy; valid while the Tokenizer lives. Empty for ids out of range.
  std::string_view piece_view(int32_t id, bool render_special) const;
  // Whole-sequence decode (no clean-up passes); invalid UTF-8 from byte tokens is kept as bytes.
  std::string decode(std::span<const int32_t> ids, bool render_special) const;

  int n_vocab() const;
  std::string_view token_text(int32_t id) const;  // vocabulary string, "▁" kept
  TokenType token_type(int32_t id) const;
  int32_t find_token(std::string_view text) const;  // -1 when absent
  bool is_eog(int32_t id) const;                    // <eos>, <turn|>, <|tool_response>, eos_token_id
  // Rendered only with render_special: control/unknown tokens, plus <eos>, <turn|> and
  // <|tool_response>, which llama.cpp retypes as control on load (so with parse_special off the
  // text "<|tool_response>" is NOT matched, although the file types it user-defined).
  bool is_control(int32_t id) const;
  bool add_bos() const;     // always true for Gemma 4 (llama.cpp forces it)
  int32_t bos_id() const;   // tok::kBos
  int32_t eos_id() const;   // tokenizer.ggml.eos_token_id (default tok::kEos)

  struct Impl;

 private:
  Tokenizer() = default;
  std::unique_ptr<Impl> impl_;
};

// Streaming detokenizer: feed ids one by one, get the text that is complete so far. Bytes of an
// unfinished UTF-8 sequence are held until the sequence completes (or is proven invalid, in
// which case they are emitted as U+FFFD, one per maximal invalid subpart as Unicode §3.9
// recommends). Everything returned is valid UTF-8; flush() turns a sequence left unfinished at
// the end into one U+FFFD.
class StreamDecoder {
 public:
  StreamDecoder(const Tokenizer& tokenizer, bool render_special)
      : tokenizer_(&tokenizer), render_special_(render_special) {}
  std::string push(int32_t id);
  std::string flush();  // whatever is held, at the end of a stream

 private:
  const Tokenizer* tokenizer_;
  bool render_special_;
  std::string pending_;
};

}  // namespace gem
