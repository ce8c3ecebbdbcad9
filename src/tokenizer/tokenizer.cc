// The Gemma 4 tokenizer (spec §5): vocabulary and merges from GGUF metadata, special-token
// partition, newline pre-split, BPE by merge rank over UTF-8 characters with byte fallback, and
// decoding (whole sequences and streaming). Behaviour follows llama.cpp's llama-vocab.cpp for
// tokenizer model "gemma4"; the data structures are our own and built for speed.
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <unordered_map>

#include "base/log.h"
#include "tokenizer/utf8.h"

namespace gem {
namespace {

constexpr char kSpaceMarker[] = "\xE2\x96\x81";  // "▁" U+2581, SentencePiece's space
constexpr uint32_t kSpaceMarkerCp = 0x2581;
constexpr uint32_t kDirectCpLimit = 0x10000;     // code points below this use a flat table

// The texts the runtime's ids must carry (spec §5.2); checked at load.
struct ExpectedToken {
  int32_t id;
  const char* text;
};
constexpr ExpectedToken kExpectedTokens[] = {
    {tok::kPad, "<pad>"},
    {tok::kEos, "<eos>"},
    {tok::kBos, "<bos>"},
    {tok::kToolDeclStart, "<|tool>"},
    {tok::kToolDeclEnd, "<tool|>"},
    {tok::kToolCallStart, "<|tool_call>"},
    {tok::kToolCallEnd, "<tool_call|>"},
    {tok::kToolRespStart, "<|tool_response>"},
    {tok::kToolRespEnd, "<tool_response|>"},
    {tok::kStrDelim, "<|\"|>"},
    {tok::kThink, "<|think|>"},
    {tok::kChannelStart, "<|channel>"},
    {tok::kChannelEnd, "<channel|>"},
    {tok::kTurnStart, "<|turn>"},
    {tok::kTurnEnd, "<turn|>"},
};

inline uint64_t mix64(uint64_t x) {
  // murmur3's finaliser: cheap and good enough for packed id pairs and string hashes.
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

uint64_t hash_bytes(std::string_view s) {
  // Eight bytes at a time; token texts are short, so this is a few multiplies per lookup.
  uint64_t h = 0x9E3779B97F4A7C15ULL ^ s.size();
  const char* p = s.data();
  size_t n = s.size();
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = mix64(h ^ w);
    p += 8;
    n -= 8;
  }
  if (n > 0) {
    uint64_t w = 0;
    std::memcpy(&w, p, n);
    h = mix64(h ^ w ^ (uint64_t(n) << 59));
  }
  return mix64(h);
}

size_t table_capacity(size_t n) {
  size_t cap = 16;
  while (cap < n * 2) cap <<= 1;
  return cap;
}

}  // namespace

struct Tokenizer::Impl {
  // Vocabulary text, owned (the GgufFile may be closed after loading): token i is
  // text_buf[text_off[i], text_off[i+1]).
  std::string text_buf;
  std::vector<uint32_t> text_off;
  std::vector<TokenType> types;
  // Decoded bytes of each token (▁ -> ' ', <0xXX> -> byte, control/user-defined -> text).
  std::string piece_buf;
  std::vector<uint32_t> piece_off;
  // Token is rendered only with render_special: control and unknown types, plus the tokens
  // llama.cpp retypes as control on load (see `control_like` in from_gguf).
  std::vector<uint8_t> control_like;

  // text -> id: open addressing; each slot keeps the upper half of the text's hash so most
  // mismatches are rejected without touching the text.
  struct TextSlot {
    uint32_t hash_hi;
    int32_t id;  // -1: empty
  };
  std::vector<TextSlot> text_slots;
  size_t text_mask = 0;

  // (left id, right id) -> (rank, merged id): open addressing keyed by left << 32 | right.
  struct MergeSlot {
    uint64_t key;
    uint32_t rank;
    int32_t result;
  };
  static constexpr uint64_t kEmptyKey = ~0ULL;
  std::vector<MergeSlot> merge_slots;
  size_t merge_mask = 0;
  int merge_shift = 0;

  // Single-character tokens by code point (the BPE's starting symbols).
  std::vector<int32_t> cp_direct;                   // [kDirectCpLimit]
  std::unordered_map<uint32_t, int32_t> cp_other;   // code points >= kDirectCpLimit
  int32_t byte_ids[256];
  std::vector<int32_t> newline_run_ids;  // [k] = id of "\n" x k, -1 when absent; [0] unused

  // Special-token partition order: longest text first (ties by lower id).
  struct Special {
    int32_t id;
    bool control_like;  // skipped when parse_special is off
  };
  std::vector<Special> specials;

  int32_t bos_id = tok::kBos;
  int32_t eos_id = tok::kEos;
  bool add_bos = true;
  std::vector<int32_t> eog_ids;

  std::string_view text(int32_t id) const {
    return std::string_view(text_buf).substr(text_off[id], text_off[id + 1] - text_off[id]);
  }
  std::string_view piece(int32_t id) const {
    return std::string_view(piece_buf).substr(piece_off[id], piece_off[id + 1] - piece_off[id]);
  }

  int32_t find(std::string_view s) const { return find_hashed(s, hash_bytes(s)); }
  void prefetch_text_slot(uint64_t h) const { __builtin_prefetch(&text_slots[h & text_mask]); }
  int32_t find_hashed(std::string_view s, uint64_t h) const {
    const uint32_t hi = uint32_t(h >> 32);
    size_t i = h & text_mask;
    while (true) {
      const TextSlot& slot = text_slots[i];
      if (slot.id < 0) return -1;
      if (slot.hash_hi == hi && text(slot.id) == s) return slot.id;
      i = (i + 1) & text_mask;
    }
  }

  void build_text_index() {
    const size_t n = types.size();
    text_slots.assign(table_capacity(n), {0, -1});
    text_mask = text_slots.size() - 1;
    for (size_t id = 0; id < n; ++id) {
      const std::string_view t = text(int32_t(id));
      const uint64_t h = hash_bytes(t);
      const uint32_t hi = uint32_t(h >> 32);
      size_t i = h & text_mask;
      bool duplicate = false;  // a repeated text: the first id wins
      while (text_slots[i].id >= 0 && !duplicate) {
        duplicate = text_slots[i].hash_hi == hi && text(text_slots[i].id) == t;
        i = (i + 1) & text_mask;
      }
      if (!duplicate) text_slots[i] = {hi, int32_t(id)};
    }
  }

  size_t merge_slot(uint64_t key) const { return size_t(mix64(key)) & merge_mask; }

  // Returns the slot for (left, right), or nullptr when the pair has no merge.
  const MergeSlot* find_merge(int32_t left, int32_t right) const {
    const uint64_t key = (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
    size_t i = merge_slot(key);
    while (true) {
      const MergeSlot& s = merge_slots[i];
      if (s.key == key) return &s;
      if (s.key == kEmptyKey) return nullptr;
      i = (i + 1) & merge_mask;
    }
  }

  int32_t char_id(uint32_t cp) const {
    if (cp < kDirectCpLimit) return cp_direct[cp];
    auto it = cp_other.find(cp);
    return it == cp_other.end() ? -1 : it->second;
  }

  // Characters c for which some token contains c followed by "▁" (Gemma 4: only '>', from
  // ">▁</"). Before a space that follows any other character no symbol can ever span, so BPE
  // may run on the two sides separately (see encode_line).
  std::vector<uint32_t> glue_before_space;
  bool glues(uint32_t cp) const {
    if (cp == ' ' || cp == kSpaceMarkerCp) return true;
    return std::find(glue_before_space.begin(), glue_before_space.end(), cp) !=
           glue_before_space.end();
  }

  // Memo of chunk -> ids already written to `out` (offset, count), for long inputs.
  using ChunkCache = std::unordered_map<std::string_view, std::pair<uint32_t, uint32_t>>;

  void encode_raw(std::string_view frag, std::vector<int32_t>& out, ChunkCache* cache) const;
  void encode_line(const uint8_t* s, size_t n, std::vector<int32_t>& out, ChunkCache* cache) const;
  void bpe_word(const uint8_t* word, size_t n, std::vector<int32_t>& out) const;
};

namespace {

// One BPE symbol: a token (id >= 0) or a character outside the vocabulary (id == -1), linked to
// its live neighbours. start/len locate its bytes in the word (for byte fallback).
struct Symbol {
  int32_t id;
  int32_t prev;
  int32_t next;
  uint32_t start;
  uint32_t len;
};

// A candidate merge of symbols[left] with its right neighbour, valid while that neighbour is
// still `right` holding `right_id` (lazy invalidation; see bpe_word).
struct Candidate {
  uint32_t rank;
  int32_t left;
  int32_t right;
  int32_t right_id;
  int32_t result;
};

// Min-heap order: lowest rank first, leftmost on ties (llama.cpp's llm_bigram_bpe::comparator).
struct CandidateAfter {
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

// Scratch reused across words and calls on one thread, so encoding allocates only its output.
struct BpeScratch {
  std::vector<Symbol> symbols;
  std::vector<Candidate> heap;
};
thread_local BpeScratch t_scratch;

}  // namespace

// BPE over one pre-split word (no '\n' inside unless it is an all-newline word). Spaces enter
// as "▁"; characters outside the vocabulary and bytes of invalid UTF-8 become single symbols that
// never merge and fall back to <0xXX> tokens.
void Tokenizer::Impl::bpe_word(const uint8_t* word, size_t n, std::vector<int32_t>& out) const {
  std::vector<Symbol>& sym = t_scratch.symbols;
  std::vector<Candidate>& heap = t_scratch.heap;
  sym.clear();
  heap.clear();

  for (size_t pos = 0; pos < n;) {
    uint32_t cp = 0;
    size_t len = utf8::decode(word + pos, n - pos, &cp);
    int32_t id;
    if (len == 0) {
      len = 1;  // invalid byte: its own symbol, byte fallback below
      id = -1;
    } else {
      id = char_id(cp);  // ' ' maps to the "▁" token (cp_direct[0x20])
    }
    const int32_t index = int32_t(sym.size());
    sym.push_back({id, index - 1, index + 1, uint32_t(pos), uint32_t(len)});
    pos += len;
  }
  if (sym.empty()) return;
  sym.back().next = -1;

  auto push_candidate = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const int32_t a = sym[left].id, b = sym[right].id;
    if (a < 0 || b < 0) return;
    const MergeSlot* m = find_merge(a, b);
    if (m == nullptr) return;
    heap.push_back({m->rank, left, right, b, m->result});
    std::push_heap(heap.begin(), heap.end(), CandidateAfter());
  };

  if (sym.size() > 1) {
    for (int32_t i = 1; i < int32_t(sym.size()); ++i) push_candidate(i - 1, i);
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), CandidateAfter());
      const Candidate c = heap.back();
      heap.pop_back();
      Symbol& left = sym[c.left];
      // Stale when the left symbol died or absorbed its neighbour (next changed), or the right
      // one grew (its id changed). A symbol only ever grows by absorbing its right neighbour.
      if (left.len == 0 || left.next != c.right || sym[c.right].id != c.right_id) continue;
      Symbol& right = sym[c.right];
      left.id = c.result;
      left.len += right.len;
      right.len = 0;
      left.next = right.next;
      if (right.next >= 0) sym[right.next].prev = c.left;
      push_candidate(left.prev, c.left);
      push_candidate(c.left, left.next);
    }
  }

  for (int32_t i = 0; i >= 0; i = sym[i].next) {
    const Symbol& s = sym[i];
    if (s.id >= 0) {
      out.push_back(s.id);
    } else {
      for (uint32_t k = 0; k < s.len; ++k) out.push_back(byte_ids[word[s.start + k]]);
    }
  }
}

// A fragment without special tokens: pre-split into runs of '\n' and runs of anything else
// (llama.cpp's GEMMA4 regex "[^\n]+|[\n]+"), then BPE each run.
void Tokenizer::Impl::encode_raw(std::string_view frag, std::vector<int32_t>& out,
                                 ChunkCache* cache) const {
  const uint8_t* s = reinterpret_cast<const uint8_t*>(frag.data());
  const size_t n = frag.size();
  size_t pos = 0;
  while (pos < n) {
    size_t end = pos;
    if (s[pos] == '\n') {
      while (end < n && s[end] == '\n') ++end;
      const size_t run = end - pos;
      // All-newline words that are tokens map directly (llama.cpp PR 21343); longer runs go
      // through BPE over '\n' characters like any word.
      if (run < newline_run_ids.size() && newline_run_ids[run] >= 0) {
        out.push_back(newline_run_ids[run]);
      } else {
        bpe_word(s + pos, run, out);
      }
    } else {
      const void* nl = std::memchr(s + pos, '\n', n - pos);
      end = nl ? size_t(static_cast<const uint8_t*>(nl) - s) : n;
      encode_line(s + pos, end - pos, out, cache);
    }
    pos = end;
  }
}

// One BPE word of llama.cpp (a whole line: spaces do not split words). Speed-up with the same
// result: cut it before each space whose preceding character never precedes "▁" inside a token
// (glue_before_space). No merge result can span such a cut, so merges on either side never
// interact and BPE on the pieces equals BPE on the line; pieces then repeat ("▁the") and are
// memoised per call.
void Tokenizer::Impl::encode_line(const uint8_t* s, size_t n, std::vector<int32_t>& out,
                                  ChunkCache* cache) const {
  auto emit = [&](size_t b, size_t e) {
    if (cache == nullptr) {
      bpe_word(s + b, e - b, out);
      return;
    }
    const std::string_view key(reinterpret_cast<const char*>(s + b), e - b);
    auto it = cache->find(key);
    if (it != cache->end()) {
      const size_t at = it->second.first, count = it->second.second;
      for (size_t k = 0; k < count; ++k) out.push_back(out[at + k]);  // out may reallocate
      return;
    }
    const size_t at = out.size();
    bpe_word(s + b, e - b, out);
    cache->emplace(key, std::make_pair(uint32_t(at), uint32_t(out.size() - at)));
  };

  size_t start = 0;
  for (size_t pos = 1; pos < n; ++pos) {
    const void* sp = std::memchr(s + pos, ' ', n - pos);
    if (sp == nullptr) break;
    pos = size_t(static_cast<const uint8_t*>(sp) - s);
    if (pos == start) continue;
    // The character that ends at pos: ASCII, or a valid multi-byte sequence found by backing
    // up over continuation bytes (a valid lead byte cannot sit inside another sequence, so the
    // forward split in bpe_word sees the same character). Anything else: no cut.
    uint32_t cp = 0;
    bool known = false;
    if (s[pos - 1] < 0x80) {
      cp = s[pos - 1];
      known = true;
    } else {
      size_t b = pos - 1;
      while (b > start && pos - b < 4 && (s[b] & 0xC0) == 0x80) --b;
      known = utf8::decode(s + b, pos - b, &cp) == pos - b;
    }
    if (known && !glues(cp)) {
      emit(start, pos);
      start = pos;
    }
  }
  emit(start, n);
}

Tokenizer::~Tokenizer() = default;

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf(const gguf::GgufFile& file) {
  const std::string where = "tokenizer in " + file.path() + ": ";
  auto fail = [&](const std::string& msg) { return Status::error(where + msg); };

  if (const gguf::KeyValue* kv = file.find_kv("tokenizer.ggml.model")) {
    if (kv->type != gguf::ValueType::kString || kv->str != "gemma4") {
      return fail("tokenizer.ggml.model is '" + std::string(kv->str) +
                  "', expected 'gemma4' (this build implements only the Gemma 4 tokenizer)");
    }
  } else {
    return fail("key tokenizer.ggml.model is missing (expected 'gemma4')");
  }

  auto tokens_r = file.get_string_array("tokenizer.ggml.tokens");
  if (!tokens_r.ok()) return tokens_r.status().with_context(where);
  const std::vector<std::string_view>& tokens = **tokens_r;
  const size_t n_vocab = tokens.size();
  if (n_vocab == 0 || n_vocab > (1u << 30)) {
    return fail(strprintf("tokenizer.ggml.tokens has %zu entries, expected 1..2^30", n_vocab));
  }
  auto types_r = file.get_int_array("tokenizer.ggml.token_type");
  if (!types_r.ok()) return types_r.status().with_context(where);
  const std::vector<int64_t>& type_values = *types_r;
  if (type_values.size() != n_vocab) {
    return fail(strprintf("tokenizer.ggml.token_type has %zu entries, expected %zu (one per token)",
                          type_values.size(), n_vocab));
  }
  auto merges_r = file.get_string_array("tokenizer.ggml.merges");
  if (!merges_r.ok()) return merges_r.status().with_context(where);
  const std::vector<std::string_view>& merges = **merges_r;

  auto tk = std::unique_ptr<Tokenizer>(new Tokenizer());
  tk->impl_ = std::make_unique<Impl>();
  Impl& im = *tk->impl_;

  // Vocabulary text and types.
  size_t total = 0;
  for (std::string_view t : tokens) total += t.size();
  if (total >= (1ull << 32)) return fail("token texts exceed 4 GiB");
  im.text_buf.reserve(total);
  im.text_off.reserve(n_vocab + 1);
  im.types.resize(n_vocab);
  for (size_t i = 0; i < n_vocab; ++i) {
    im.text_off.push_back(uint32_t(im.text_buf.size()));
    im.text_buf.append(tokens[i]);
    const int64_t t = type_values[i];
    if (t < 0 || t > 6) {
      return fail(strprintf("token %zu ('%.*s') has type %lld, expected 0..6", i,
                            int(tokens[i].size()), tokens[i].data(), static_cast<long long>(t)));
    }
    im.types[i] = TokenType(t);
  }
  im.text_off.push_back(uint32_t(im.text_buf.size()));
  im.build_text_index();

  // The ids the runtime keys on must carry the expected texts.
  for (const ExpectedToken& e : kExpectedTokens) {
    if (size_t(e.id) >= n_vocab) {
      return fail(strprintf("vocabulary has %zu tokens, too few to hold id %d ('%s'): not a "
                            "Gemma 4 vocabulary",
                            n_vocab, e.id, e.text));
    }
    if (im.text(e.id) != e.text) {
      const std::string_view got = im.text(e.id);
      return fail(strprintf("token %d is '%.*s', expected '%s': this vocabulary differs from "
                            "Gemma 4's and the runtime's token ids would be wrong",
                            e.id, int(got.size()), got.data(), e.text));
    }
  }
  if (file.find_kv("tokenizer.ggml.bos_token_id") != nullptr) {
    auto v = file.get_i64("tokenizer.ggml.bos_token_id");
    if (!v.ok()) return v.status().with_context(where);
    if (*v != tok::kBos) {
      return fail(strprintf("tokenizer.ggml.bos_token_id is %lld, expected %d",
                            static_cast<long long>(*v), tok::kBos));
    }
  }
  if (file.find_kv("tokenizer.ggml.eos_token_id") != nullptr) {
    auto v = file.get_i64("tokenizer.ggml.eos_token_id");
    if (!v.ok()) return v.status().with_context(where);
    if (*v < 0 || size_t(*v) >= n_vocab) {
      return fail(strprintf("tokenizer.ggml.eos_token_id is %lld, outside the vocabulary (0..%zu)",
                            static_cast<long long>(*v), n_vocab - 1));
    }
    im.eos_id = int32_t(*v);
  }
  if (file.find_kv("tokenizer.ggml.add_bos_token") != nullptr) {
    auto v = file.get_bool("tokenizer.ggml.add_bos_token");
    if (!v.ok()) return v.status().with_context(where);
    // llama.cpp forces add_bos on for Gemma 4 (PR 21500): without <bos> the models degrade.
    if (!*v) GEM_LOG_WARN("%sadd_bos_token is false; Gemma 4 needs <bos>, using true", where.c_str());
  }
  im.add_bos = true;

  // End of generation: <eos>, <turn|>, <|tool_response>, and eos_token_id (llama-vocab.cpp).
  im.eog_ids = {tok::kEos, tok::kTurnEnd, tok::kToolRespStart};
  if (std::find(im.eog_ids.begin(), im.eog_ids.end(), im.eos_id) == im.eog_ids.end()) {
    im.eog_ids.push_back(im.eos_id);
  }

  // llama.cpp adds the CONTROL attribute to end-of-generation tokens found by text (<eos>,
  // <turn|>, <|tool_response>) on load. For <|tool_response>, typed USER_DEFINED in the file,
  // that means: not matched in text when parse_special is off, and not rendered unless
  // render_special. We match that so our ids equal llama.cpp's.
  im.control_like.assign(n_vocab, 0);
  for (size_t i = 0; i < n_vocab; ++i) {
    const TokenType t = im.types[i];
    im.control_like[i] = t == TokenType::kControl || t == TokenType::kUnknown;
  }
  for (int32_t id : {tok::kEos, tok::kTurnEnd, tok::kToolRespStart}) im.control_like[id] = 1;

  // Byte fallback tokens <0x00>..<0xFF>.
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    im.byte_ids[b] = im.find(name);
    if (im.byte_ids[b] < 0) return fail(strprintf("byte token %s is missing", name));
  }

  // Decoded pieces.
  im.piece_buf.reserve(total);
  im.piece_off.reserve(n_vocab + 1);
  for (size_t i = 0; i < n_vocab; ++i) {
    im.piece_off.push_back(uint32_t(im.piece_buf.size()));
    const std::string_view t = im.text(int32_t(i));
    switch (im.types[i]) {
      case TokenType::kNormal:
        for (size_t k = 0; k < t.size();) {
          if (t.compare(k, 3, kSpaceMarker) == 0) {
            im.piece_buf.push_back(' ');
            k += 3;
          } else {
            im.piece_buf.push_back(t[k++]);
          }
        }
        break;
      case TokenType::kByte: {
        unsigned v = 0;
        if (t.size() != 6 || std::sscanf(std::string(t).c_str(), "<0x%02X>", &v) != 1) {
          return fail(strprintf("byte token %zu is '%.*s', expected <0xXX>", i, int(t.size()),
                                t.data()));
        }
        im.piece_buf.push_back(char(v));
        break;
      }
      case TokenType::kControl:
      case TokenType::kUnknown:
      case TokenType::kUserDefined:
        im.piece_buf.append(t);
        break;
      case TokenType::kUndefined:
      case TokenType::kUnused:
        break;  // llama.cpp renders these as nothing
    }
  }
  im.piece_off.push_back(uint32_t(im.piece_buf.size()));

  // Single-character tokens: the BPE's starting symbols.
  im.cp_direct.assign(kDirectCpLimit, -1);
  for (size_t i = 0; i < n_vocab; ++i) {
    const std::string_view t = im.text(int32_t(i));
    if (t.empty() || t.size() > 4) continue;
    uint32_t cp = 0;
    const size_t len = utf8::decode(reinterpret_cast<const uint8_t*>(t.data()), t.size(), &cp);
    if (len != t.size()) continue;
    if (im.find(t) != int32_t(i)) continue;  // a duplicate text: the first id is the token
    if (cp < kDirectCpLimit) {
      im.cp_direct[cp] = int32_t(i);
    } else {
      im.cp_other.emplace(cp, int32_t(i));
    }
  }
  if (im.cp_direct[kSpaceMarkerCp] < 0) return fail("the space token '▁' is missing");
  // Spaces are written as "▁" before BPE (escape_whitespaces); doing it per character here
  // saves rewriting the text.
  im.cp_direct[' '] = im.cp_direct[kSpaceMarkerCp];

  // Characters that precede "▁" inside some token.
  for (size_t i = 0; i < n_vocab; ++i) {
    const std::string_view t = im.text(int32_t(i));
    const uint8_t* p = reinterpret_cast<const uint8_t*>(t.data());
    uint32_t prev = kSpaceMarkerCp;
    bool prev_valid = false;
    for (size_t k = 0; k < t.size();) {
      uint32_t cp = 0;
      size_t len = utf8::decode(p + k, t.size() - k, &cp);
      if (len == 0) {
        prev_valid = false;
        k += 1;
        continue;
      }
      if (cp == kSpaceMarkerCp && prev_valid && prev != kSpaceMarkerCp &&
          std::find(im.glue_before_space.begin(), im.glue_before_space.end(), prev) ==
              im.glue_before_space.end()) {
        im.glue_before_space.push_back(prev);
      }
      prev = cp;
      prev_valid = true;
      k += len;
    }
  }

  // Newline runs that are tokens.
  for (size_t k = 1;; ++k) {
    const int32_t id = im.find(std::string(k, '\n'));
    if (id < 0) break;
    im.newline_run_ids.resize(k + 1, -1);
    im.newline_run_ids[k] = id;
  }

  // Merges: "left right", rank = index. A merge whose parts or result are not tokens could never
  // fire on token symbols here (our symbols are always tokens), so it is dropped.
  if (merges.size() >= (1ull << 31)) return fail("too many merges");
  im.merge_slots.assign(table_capacity(merges.size()), {Impl::kEmptyKey, 0, 0});
  im.merge_mask = im.merge_slots.size() - 1;
  size_t n_dropped = 0;
  // Loading is dominated by cache misses (three text lookups and one insert per merge, all at
  // random places), so the loop is software-pipelined: merge r + kAhead is split and hashed
  // and its text slots prefetched; merge r + kAhead / 2 has its ids resolved and its merge slot
  // prefetched; merge r is inserted.
  constexpr size_t kAhead = 16;
  struct Pending {
    std::string_view a, b;
    std::string joined;
    uint64_t ha = 0, hb = 0, hr = 0;
    uint64_t key = 0;
    int32_t result = -1;  // -1: dropped
  };
  Pending ring[kAhead];
  const size_t n_merges = merges.size();
  auto stage_hash = [&](size_t r) -> Status {
    Pending& p = ring[r % kAhead];
    const std::string_view m = merges[r];
    const size_t sp = m.find(' ', 1);  // a part never starts with ' ' (no token holds one)
    if (sp == std::string_view::npos) {
      return fail(strprintf("merge %zu ('%.*s') has no space separating its two parts", r,
                            int(m.size()), m.data()));
    }
    p.a = m.substr(0, sp);
    p.b = m.substr(sp + 1);
    p.joined.assign(p.a);
    p.joined.append(p.b);
    p.ha = hash_bytes(p.a);
    p.hb = hash_bytes(p.b);
    p.hr = hash_bytes(p.joined);
    im.prefetch_text_slot(p.ha);
    im.prefetch_text_slot(p.hb);
    im.prefetch_text_slot(p.hr);
    return ok_status();
  };
  auto stage_resolve = [&](size_t r) {
    Pending& p = ring[r % kAhead];
    const int32_t ia = im.find_hashed(p.a, p.ha), ib = im.find_hashed(p.b, p.hb);
    const int32_t ir = im.find_hashed(p.joined, p.hr);
    p.result = (ia < 0 || ib < 0 || ir < 0) ? -1 : ir;
    p.key = (uint64_t(uint32_t(ia)) << 32) | uint32_t(ib);
    if (p.result >= 0) __builtin_prefetch(&im.merge_slots[im.merge_slot(p.key)]);
  };
  for (size_t r = 0; r < n_merges + kAhead; ++r) {
    // In this order: the insert reads ring slot r % kAhead before stage_hash(r) reuses it.
    if (r >= kAhead) {
      const size_t rank = r - kAhead;
      const Pending& p = ring[rank % kAhead];
      if (p.result < 0) {
        ++n_dropped;
      } else {
        size_t i = im.merge_slot(p.key);
        while (im.merge_slots[i].key != Impl::kEmptyKey && im.merge_slots[i].key != p.key) {
          i = (i + 1) & im.merge_mask;
        }
        // A repeated pair keeps its first (lowest) rank.
        if (im.merge_slots[i].key != p.key) im.merge_slots[i] = {p.key, uint32_t(rank), p.result};
      }
    }
    if (r >= kAhead / 2 && r - kAhead / 2 < n_merges) stage_resolve(r - kAhead / 2);
    if (r < n_merges) GEM_RETURN_IF_ERROR(stage_hash(r));
  }
  if (n_dropped > 0) {
    GEM_LOG_WARN("%s%zu of %zu merges name strings that are not tokens; ignored", where.c_str(),
                 n_dropped, merges.size());
  }

  // Special tokens for the partition: control, user-defined and unknown (and the control-like
  // EOG tokens), longest text first. Ties cannot overlap in Gemma 4's vocabulary; lower id first.
  for (size_t i = 0; i < n_vocab; ++i) {
    const TokenType t = im.types[i];
    if (im.text(int32_t(i)).empty()) continue;
    if (t == TokenType::kControl || t == TokenType::kUserDefined || t == TokenType::kUnknown ||
        im.control_like[i]) {
      im.specials.push_back({int32_t(i), im.control_like[i] != 0});
    }
  }
  std::stable_sort(im.specials.begin(), im.specials.end(),
                   [&](const Impl::Special& x, const Impl::Special& y) {
                     return im.text(x.id).size() > im.text(y.id).size();
                   });
  return tk;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos,
                                       bool parse_special) const {
  const Impl& im = *impl_;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_bos) out.push_back(im.bos_id);

  // Special-token partition (llama.cpp tokenizer_st_partition): for each special token, longest
  // first, cut every occurrence out of the raw fragments that remain.
  struct Fragment {
    size_t offset;
    size_t length;
    int32_t id;  // -1: raw text
  };
  std::vector<Fragment> frags;
  if (!text.empty()) frags.push_back({0, text.size(), -1});
  std::vector<Fragment> next;
  for (const Impl::Special& sp : im.specials) {
    if (sp.control_like && !parse_special) continue;
    const std::string_view st = im.text(sp.id);
    if (text.find(st) == std::string_view::npos) continue;  // common case: nothing to cut
    next.clear();
    for (const Fragment& f : frags) {
      if (f.id >= 0) {
        next.push_back(f);
        continue;
      }
      size_t start = f.offset;
      const size_t end = f.offset + f.length;
      while (start < end) {
        const size_t at = text.substr(0, end).find(st, start);
        if (at == std::string_view::npos) break;
        if (at > start) next.push_back({start, at - start, -1});
        next.push_back({at, st.size(), sp.id});
        start = at + st.size();
      }
      if (start < end) next.push_back({start, end - start, -1});
    }
    frags.swap(next);
  }

  // Memoising pieces pays off only on longer inputs.
  Tokenizer::Impl::ChunkCache cache;
  Impl::ChunkCache* cache_ptr = nullptr;
  if (text.size() >= 2048) {
    cache.reserve(text.size() / 32);
    cache_ptr = &cache;
  }
  for (const Fragment& f : frags) {
    if (f.id >= 0) {
      out.push_back(f.id);
    } else {
      im.encode_raw(text.substr(f.offset, f.length), out, cache_ptr);
    }
  }
  // Exactly one <bos>: text that starts with "<bos>" (parsed as the token) does not get a second
  // one. (llama.cpp would emit two and warn.)
  if (add_bos && out.size() >= 2 && out[1] == im.bos_id) out.erase(out.begin() + 1);
  return out;
}

struct Tokenizer::TextMemo::Impl {
  const std::vector<int32_t>* out = nullptr;  // the vector the cached offsets point into
  Tokenizer::Impl::ChunkCache cache;
};
Tokenizer::TextMemo::TextMemo() : impl_(std::make_unique<Impl>()) {}
Tokenizer::TextMemo::~TextMemo() = default;

void Tokenizer::encode_text(std::string_view text, std::vector<int32_t>& out,
                            TextMemo* memo) const {
  const Impl& im = *impl_;
  if (memo != nullptr) {
    TextMemo::Impl& m = *memo->impl_;
    if (m.out != &out) {
      m.cache.clear();
      m.out = &out;
    }
    im.encode_raw(text, out, &m.cache);
    return;
  }
  // Memoising pieces pays off only on longer inputs.
  Tokenizer::Impl::ChunkCache cache;
  Impl::ChunkCache* cache_ptr = nullptr;
  if (text.size() >= 2048) {
    cache.reserve(text.size() / 32);
    cache_ptr = &cache;
  }
  im.encode_raw(text, out, cache_ptr);
}

std::string Tokenizer::token_to_piece(int32_t id, bool render_special) const {
  return std::string(piece_view(id, render_special));
}

std::string_view Tokenizer::piece_view(int32_t id, bool render_special) const {
  const Impl& im = *impl_;
  if (id < 0 || size_t(id) >= im.types.size()) return std::string_view();
  if (im.control_like[id] && !render_special) return std::string_view();
  return im.piece(id);
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool render_special) const {
  const Impl& im = *impl_;
  std::string out;
  for (int32_t id : ids) {
    if (id < 0 || size_t(id) >= im.types.size()) continue;
    if (im.control_like[id] && !render_special) continue;
    out.append(im.piece(id));
  }
  return out;
}

int Tokenizer::n_vocab() const { return int(impl_->types.size()); }

std::string_view Tokenizer::token_text(int32_t id) const {
  if (id < 0 || size_t(id) >= impl_->types.size()) return std::string_view();
  return impl_->text(id);
}

TokenType Tokenizer::token_type(int32_t id) const {
  if (id < 0 || size_t(id) >= impl_->types.size()) return TokenType::kUndefined;
  return impl_->types[id];
}

int32_t Tokenizer::find_token(std::string_view text) const { return impl_->find(text); }

bool Tokenizer::is_eog(int32_t id) const {
  const std::vector<int32_t>& e = impl_->eog_ids;
  return std::find(e.begin(), e.end(), id) != e.end();
}

bool Tokenizer::add_bos() const { return impl_->add_bos; }
int32_t Tokenizer::bos_id() const { return impl_->bos_id; }
int32_t Tokenizer::eos_id() const { return impl_->eos_id; }
bool Tokenizer::is_control(int32_t id) const {
  return id >= 0 && size_t(id) < impl_->types.size() && impl_->control_like[id] != 0;
}

// ---------------------------------------------------------------------------- StreamDecoder

namespace {
constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD

// Length of the maximal subpart of an invalid sequence at s (Unicode §3.9 "U+FFFD substitution
// of maximal subparts"): the lead byte plus the continuation bytes that were still acceptable.
size_t invalid_subpart(const uint8_t* s, size_t n) {
  size_t k = 1;
  while (k < n && k < 4 && utf8::is_incomplete_prefix(s, k + 1)) ++k;
  return k;
}
}  // namespace

std::string StreamDecoder::push(int32_t id) {
  const std::string_view piece = tokenizer_->piece_view(id, render_special_);
  // Common case: nothing held and the piece is plain ASCII.
  if (pending_.empty()) {
    bool ascii = true;
    for (char c : piece) ascii &= static_cast<unsigned char>(c) < 0x80;
    if (ascii) return std::string(piece);
  }
  pending_.append(piece);
  std::string out;
  const uint8_t* s = reinterpret_cast<const uint8_t*>(pending_.data());
  const size_t n = pending_.size();
  size_t pos = 0;
  while (pos < n) {
    uint32_t cp = 0;
    const size_t len = utf8::decode(s + pos, n - pos, &cp);
    if (len > 0) {
      out.append(pending_, pos, len);
      pos += len;
    } else if (utf8::is_incomplete_prefix(s + pos, n - pos)) {
      break;  // hold: the next token may complete it
    } else {
      out.append(kReplacement);
      pos += invalid_subpart(s + pos, n - pos);
    }
  }
  pending_.erase(0, pos);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out;
  if (!pending_.empty()) out = kReplacement;  // only an unfinished sequence can be held
  pending_.clear();
  return out;
}

}  // namespace gem
