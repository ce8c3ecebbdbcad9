// Builds GGUF files field by field (so any field can lie), the defects list, and truncations of
// a valid file at every field boundary.
#include "gguf/malformed_corpus.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <optional>
#include <set>

#include "base/dtype.h"
#include "gguf/gguf.h"
#include "gguf/writer.h"

namespace gem::gguf::corpus {
namespace {

template <typename T>
void put(std::vector<uint8_t>& out, T v) {
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &v, sizeof(T));
}

// A string as GGUF stores it, with a length that may lie.
void put_str(std::vector<uint8_t>& out, std::string_view s, std::optional<uint64_t> len = {}) {
  put<uint64_t>(out, len.value_or(s.size()));
  out.insert(out.end(), s.begin(), s.end());
}

constexpr uint32_t kTU8 = 0, kTU32 = 4, kTF32 = 6, kTBool = 7, kTString = 8, kTArray = 9,
                   kTU64 = 10;

constexpr uint64_t k2p40 = 1ull << 40;
constexpr uint64_t k2p60 = 1ull << 60;

struct KvSpec {
  std::string key;
  std::optional<uint64_t> key_len;  // a lying key length
  uint32_t type;
  std::vector<uint8_t> payload;  // the encoded value after the type field
};

struct TensorSpec {
  std::string name;
  uint32_t n_dims;
  std::vector<uint64_t> ne;
  uint32_t type;
  uint64_t offset;
  std::optional<uint64_t> name_len;
};

struct FileSpec {
  uint32_t magic = kGgufMagic;
  uint32_t version = 3;
  std::optional<uint64_t> n_tensors;  // overrides of the real counts
  std::optional<uint64_t> n_kv;
  std::vector<KvSpec> kvs;
  std::vector<TensorSpec> tensors;
  uint64_t alignment = 32;              // pads the end of the infos (a key sets the reader's)
  std::optional<uint64_t> data_bytes;   // default: up to the end of the last tensor, padded
};

std::vector<uint8_t> v_u32(uint32_t v) {
  std::vector<uint8_t> p;
  put(p, v);
  return p;
}
std::vector<uint8_t> v_str(std::string_view s) {
  std::vector<uint8_t> p;
  put_str(p, s);
  return p;
}
// Array payload: element type, count, then the given element bytes.
std::vector<uint8_t> v_array(uint32_t elem, uint64_t count, const std::vector<uint8_t>& elems) {
  std::vector<uint8_t> p;
  put(p, elem);
  put(p, count);
  p.insert(p.end(), elems.begin(), elems.end());
  return p;
}

uint64_t tensor_bytes(const TensorSpec& t) {
  const auto info = dtype_info(t.type);
  if (!info) return 0;
  uint64_t n = 1;
  for (uint64_t d : t.ne) {
    if (d != 0 && n > UINT64_MAX / d) return 0;
    n *= d;
  }
  return n / info->block_elems * info->block_bytes;
}

// Serialises `spec`; `boundaries` (optional) receives the offset after every field.
std::vector<uint8_t> build(const FileSpec& spec, std::vector<size_t>* boundaries = nullptr) {
  std::vector<uint8_t> out;
  auto mark = [&] {
    if (boundaries != nullptr) boundaries->push_back(out.size());
  };
  put(out, spec.magic);
  mark();
  put(out, spec.version);
  mark();
  put<uint64_t>(out, spec.n_tensors.value_or(spec.tensors.size()));
  mark();
  put<uint64_t>(out, spec.n_kv.value_or(spec.kvs.size()));
  mark();
  for (const KvSpec& kv : spec.kvs) {
    put<uint64_t>(out, kv.key_len.value_or(kv.key.size()));
    mark();
    out.insert(out.end(), kv.key.begin(), kv.key.end());
    mark();
    put(out, kv.type);
    mark();
    out.insert(out.end(), kv.payload.begin(), kv.payload.end());
    mark();
  }
  for (const TensorSpec& t : spec.tensors) {
    put<uint64_t>(out, t.name_len.value_or(t.name.size()));
    mark();
    out.insert(out.end(), t.name.begin(), t.name.end());
    mark();
    put(out, t.n_dims);
    mark();
    for (uint64_t d : t.ne) {
      put(out, d);
      mark();
    }
    put(out, t.type);
    mark();
    put(out, t.offset);
    mark();
  }
  out.resize((out.size() + spec.alignment - 1) / spec.alignment * spec.alignment, 0);
  mark();
  uint64_t data = 0;
  if (spec.data_bytes) {
    data = *spec.data_bytes;
  } else {
    for (const TensorSpec& t : spec.tensors) {
      const uint64_t end = t.offset + tensor_bytes(t);
      data = std::max(data, (end + spec.alignment - 1) / spec.alignment * spec.alignment);
    }
  }
  const size_t data_at = out.size();
  for (uint64_t k = 0; k < data; ++k) out.push_back(static_cast<uint8_t>(k * 37 + 11));
  if (boundaries != nullptr) {
    // Inside each tensor's data, and one byte short of its end (the padding after the last
    // tensor may be cut without harm).
    for (const TensorSpec& t : spec.tensors) {
      const uint64_t end = t.offset + tensor_bytes(t);
      if (end <= data && end > 0) {
        boundaries->push_back(data_at + t.offset + tensor_bytes(t) / 2);
        boundaries->push_back(data_at + end - 1);
      }
    }
  }
  return out;
}

// The base file every defect starts from: a few KVs of different kinds and two tensors.
FileSpec base_spec() {
  FileSpec s;
  s.kvs.push_back({"general.architecture", {}, kTString, v_str("llama")});
  s.kvs.push_back({"test.count", {}, kTU32, v_u32(7)});
  std::vector<uint8_t> floats;
  put(floats, 1.5f);
  put(floats, -2.0f);
  s.kvs.push_back({"test.floats", {}, kTArray, v_array(kTF32, 2, floats)});
  std::vector<uint8_t> strs;
  put_str(strs, "a");
  put_str(strs, "bc");
  put_str(strs, "");
  s.kvs.push_back({"test.strings", {}, kTArray, v_array(kTString, 3, strs)});
  s.kvs.push_back({"test.flag", {}, kTBool, {1}});
  s.tensors.push_back({"tok.weight", 2, {8, 2}, static_cast<uint32_t>(DType::kF32), 0, {}});
  s.tensors.push_back({"blk.0.attn_q.weight", 2, {32, 2}, static_cast<uint32_t>(DType::kQ8_0), 64,
                       {}});
  return s;
}

}  // namespace

std::vector<MalformedCase> malformed_cases() {
  std::vector<MalformedCase> cases;
  auto add = [&](const std::string& name, const std::function<void(FileSpec&)>& edit,
                 const std::string& expected) {
    FileSpec s = base_spec();
    edit(s);
    cases.push_back({name, build(s), expected});
  };
  auto patch_u32 = [&](const std::string& name, size_t at, uint32_t v, const std::string& expected) {
    std::vector<uint8_t> b = build(base_spec());
    std::memcpy(b.data() + at, &v, 4);
    cases.push_back({name, std::move(b), expected});
  };
  const auto q4 = static_cast<uint32_t>(DType::kQ4_0);
  const auto f32 = static_cast<uint32_t>(DType::kF32);

  // Header.
  add("bad-magic", [](FileSpec& s) { s.magic = 0x47475546; }, "bad magic at byte 0");
  add("magic-zero", [](FileSpec& s) { s.magic = 0; }, "bad magic at byte 0: expected 'GGUF'");
  add("version-0", [](FileSpec& s) { s.version = 0; }, "unsupported GGUF version 0");
  add("version-1", [](FileSpec& s) { s.version = 1; }, "unsupported GGUF version 1");
  add("version-4", [](FileSpec& s) { s.version = 4; }, "unsupported GGUF version 4");
  add("version-big-endian", [](FileSpec& s) { s.version = 0x03000000; }, "big-endian GGUF");
  add("tensor-count-2^60", [](FileSpec& s) { s.n_tensors = k2p60; },
      "tensor count 1152921504606846976 at byte 8 is impossible");
  add("tensor-count-max", [](FileSpec& s) { s.n_tensors = UINT64_MAX; }, "is impossible");
  add("tensor-count-plus-one", [](FileSpec& s) { s.n_tensors = 3; },
      "tensor #2 (info at byte 332): empty name");
  add("kv-count-2^60", [](FileSpec& s) { s.n_kv = k2p60; },
      "KV count 1152921504606846976 at byte 16 is impossible");
  add("kv-count-max", [](FileSpec& s) { s.n_kv = UINT64_MAX; }, "KV count 18446744073709551615");
  add("kv-count-plus-one", [](FileSpec& s) { s.n_kv = 6; }, "the name of tensor #0 at byte 247: length 562949953421312 exceeds");

  // Keys and values.
  add("key-length-2^40", [](FileSpec& s) { s.kvs[1].key_len = k2p40; },
      "the key of KV #1 at byte 69: length 1099511627776 exceeds the 435 bytes left in the file (size 512)");
  add("key-length-max", [](FileSpec& s) { s.kvs[0].key_len = UINT64_MAX; },
      "length 18446744073709551615 exceeds");
  add("value-string-2^40", [](FileSpec& s) { s.kvs[0].payload = v_str("llama"); 
                                             std::memcpy(s.kvs[0].payload.data(), &k2p40, 8); },
      "the value of key 'general.architecture' (at byte 24) at byte 56: length 1099511627776 exceeds");
  add("empty-key", [](FileSpec& s) { s.kvs[1].key = ""; }, "KV #1 (at byte 69): empty key");
  add("duplicate-key", [](FileSpec& s) { s.kvs[2].key = "test.count"; },
      "key 'test.count' (at byte 95): duplicate key, first at byte 69");
  add("unknown-value-type-13", [](FileSpec& s) { s.kvs[1].type = 13; },
      "key 'test.count' (at byte 69): unknown value type 13 at byte 87, expected 0..12");
  add("unknown-value-type-max", [](FileSpec& s) { s.kvs[4].type = 0xFFFFFFFF; },
      "unknown value type 4294967295");
  add("bool-value-2", [](FileSpec& s) { s.kvs[4].payload = {2}; },
      "key 'test.flag'|is 2, expected 0 or 1");
  add("array-of-unknown-type", [](FileSpec& s) { s.kvs[2].payload[0] = 13; },
      "unknown array element type 13");
  add("array-of-arrays", [&](FileSpec& s) { s.kvs[2].payload = v_array(kTArray, 1, v_array(kTU8, 1, {5})); },
      "arrays of arrays are not supported");
  add("array-count-2^60", [&](FileSpec& s) {
        std::memcpy(s.kvs[2].payload.data() + 4, &k2p60, 8); },
      "array count 1152921504606846976 at byte");
  add("array-count-max-u32", [&](FileSpec& s) {
        s.kvs[1] = {"test.u32s", {}, kTArray, v_array(kTU32, UINT64_MAX, {1, 0, 0, 0})}; },
      "array count 18446744073709551615");
  add("string-array-count-2^60", [&](FileSpec& s) {
        std::memcpy(s.kvs[3].payload.data() + 4, &k2p60, 8); },
      "array count 1152921504606846976");
  add("string-array-element-2^40", [&](FileSpec& s) {
        std::memcpy(s.kvs[3].payload.data() + 12 + 9, &k2p40, 8); },
      "string #1 of key 'test.strings'");
  add("bool-array-element-7", [&](FileSpec& s) {
        s.kvs[4] = {"test.bools", {}, kTArray, v_array(kTBool, 3, {1, 0, 7})}; },
      "bool element #2 at byte");
  add("alignment-0", [](FileSpec& s) { s.kvs.push_back({"general.alignment", {}, kTU32, v_u32(0)}); },
      "key 'general.alignment' (at byte 223): expected a non-zero power of two, found 0");
  add("alignment-3", [](FileSpec& s) { s.kvs.push_back({"general.alignment", {}, kTU32, v_u32(3)}); },
      "expected a non-zero power of two, found 3");
  add("alignment-u64", [](FileSpec& s) {
        std::vector<uint8_t> p;
        put<uint64_t>(p, 32);
        s.kvs.push_back({"general.alignment", {}, kTU64, p}); },
      "key 'general.alignment' (at byte 223): expected u32, found u64");
  add("alignment-string", [](FileSpec& s) {
        s.kvs.push_back({"general.alignment", {}, kTString, v_str("32")}); },
      "expected u32, found string");
  add("alignment-64-misaligned-offset", [](FileSpec& s) {
        s.kvs.push_back({"general.alignment", {}, kTU32, v_u32(64)});
        s.tensors[1].offset = 32;
        s.alignment = 64; },
      "data offset 32 is not a multiple of the alignment 64");

  // Tensor infos.
  add("tensor-name-2^40", [](FileSpec& s) { s.tensors[1].name_len = k2p40; },
      "the name of tensor #1 at byte");
  add("tensor-empty-name", [](FileSpec& s) { s.tensors[0].name = ""; }, "tensor #0 (info at byte");
  add("duplicate-tensor-name", [](FileSpec& s) { s.tensors[1].name = "tok.weight"; },
      "tensor 'tok.weight' (info at byte");
  add("unknown-tensor-type-5", [](FileSpec& s) { s.tensors[1].type = 5; },
      "tensor 'blk.0.attn_q.weight' (info at byte");
  add("unknown-tensor-type-1000", [](FileSpec& s) { s.tensors[0].type = 1000; },
      "unknown tensor type 1000");
  add("n-dims-0", [](FileSpec& s) { s.tensors[0].n_dims = 0; s.tensors[0].ne.clear(); },
      "tensor 'tok.weight' (info at byte 223): n_dims is 0, expected 1..4");
  add("n-dims-5", [](FileSpec& s) { s.tensors[0].n_dims = 5; s.tensors[0].ne = {8, 2, 1, 1, 1}; },
      "n_dims is 5, expected 1..4");
  add("n-dims-max", [](FileSpec& s) { s.tensors[0].n_dims = 0xFFFFFFFF; },
      "n_dims is 4294967295");
  add("zero-dim", [](FileSpec& s) { s.tensors[0].ne = {8, 0}; }, "ne[1] is 0, expected >= 1");
  add("dim-product-overflow", [](FileSpec& s) { s.tensors[0].ne = {1ull << 32, 1ull << 32}; },
      "element count overflows");
  add("dim-above-int64", [](FileSpec& s) { s.tensors[0].n_dims = 1; s.tensors[0].ne = {1ull << 63}; },
      "element count overflows");
  add("byte-size-overflow", [](FileSpec& s) { s.tensors[0].ne = {1ull << 31, 1ull << 31}; },
      "byte size overflows");
  add("ne0-not-block-multiple", [&](FileSpec& s) { s.tensors[1].type = q4; s.tensors[1].ne = {33, 2}; },
      "ne[0] = 33 is not a multiple of the Q4_0 block size 32");
  add("misaligned-offset", [](FileSpec& s) { s.tensors[1].offset = 68; },
      "data offset 68 is not a multiple of the alignment 32");
  add("extent-past-eof", [](FileSpec& s) { s.data_bytes = 100; },
      "tensor 'blk.0.attn_q.weight' (info at byte 273): data extent [416, 484) ends past the end of the file (size 452)");
  add("offset-2^63", [](FileSpec& s) { s.tensors[1].offset = 1ull << 63; s.data_bytes = 192; },
      "ends past the end of the file");
  add("offset-near-2^64", [](FileSpec& s) { s.tensors[1].offset = UINT64_MAX - 31; s.data_bytes = 192; },
      "data extent [352 + 18446744073709551584, beyond 2^64) ends past the end of the file");
  add("huge-tensor-past-eof", [&](FileSpec& s) { s.tensors[0].type = f32; s.tensors[0].ne = {1ull << 40, 4}; s.data_bytes = 192; },
      "ends past the end of the file");
  add("no-data-section", [](FileSpec& s) { s.data_bytes = 0; }, "ends past the end of the file");
  add("overlapping-tensors", [](FileSpec& s) { s.tensors[1].offset = 32; },
      "tensor 'blk.0.attn_q.weight' (info at byte 273): data extent [384, 452) overlaps tensor 'tok.weight' at [352, 416)");
  add("same-offset-tensors", [](FileSpec& s) { s.tensors[0].offset = 64; s.data_bytes = 192; },
      "overlaps tensor");

  // Single-field patches of the valid base.
  patch_u32("n-dims-patched-7", 223 + 8 + 10, 7, "tensor 'tok.weight' (info at byte 223): n_dims is 7");

  // The base file cut at every field boundary (and inside the data).
  std::vector<size_t> bounds;
  const std::vector<uint8_t> base = build(base_spec(), &bounds);
  bounds.push_back(0);
  bounds.push_back(1);
  bounds.push_back(3);
  std::set<size_t> unique(bounds.begin(), bounds.end());
  for (size_t cut : unique) {
    if (cut >= base.size()) continue;
    cases.push_back({"truncated-at-" + std::to_string(cut),
                     std::vector<uint8_t>(base.begin(), base.begin() + cut),
                     cut == 0 ? "empty file" : "truncated|is impossible|exceeds|past the end"});
  }
  return cases;
}

std::vector<ValidCase> valid_cases() {
  std::vector<ValidCase> out;
  out.push_back({"base", build(base_spec())});
  {
    GgufWriter w(2);
    w.add_u8("u8", 1);
    w.add_i8("i8", -1);
    w.add_u16("u16", 2);
    w.add_i16("i16", -2);
    w.add_u32("u32", 3);
    w.add_i32("i32", -3);
    w.add_f32("f32", 0.5f);
    w.add_bool("bool", true);
    w.add_string("str", "text");
    w.add_u64("u64", 4);
    w.add_i64("i64", -4);
    w.add_f64("f64", 0.25);
    const int32_t ints[] = {1, -2, 3};
    w.add_i32_array("ints", ints);
    const std::string_view strs[] = {"x", "", "yz"};
    w.add_string_array("strs", strs);
    const bool bools[] = {true, false};
    w.add_bool_array("bools", bools);
    out.push_back({"all-types-v2", w.to_bytes()});
  }
  {
    GgufWriter w(3, 1);
    w.add_string("general.architecture", "test");
    w.add_tensor_bytes("a", DType::kI8, {3}, {1, 2, 3});
    w.add_tensor_bytes("b", DType::kF16, {2}, {0, 60, 0, 188});
    out.push_back({"alignment-1", w.to_bytes()});
  }
  {
    GgufWriter w(3, 64);
    std::vector<uint8_t> q6(210, 0x5A);
    w.add_tensor_bytes("q6", DType::kQ6_K, {256}, q6);
    std::vector<uint8_t> q4(18 * 2, 0x33);
    w.add_tensor_bytes("q4", DType::kQ4_0, {32, 2}, q4);
    out.push_back({"quant-alignment-64", w.to_bytes()});
  }
  {
    GgufWriter w;
    out.push_back({"empty", w.to_bytes()});
  }
  return out;
}

}  // namespace gem::gguf::corpus
