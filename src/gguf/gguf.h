// GGUF reader: a bounded little-endian parser over a read-only memory mapping.
// Every count, length, offset and extent is checked against the real file size before use, so
// a malformed file is an error message (what, where, expected, actual), never a crash or a hang.
// Tensors are views into the mapping, never copies. Knows nothing about Gemma.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"

namespace gem::gguf {

// GGUF metadata value types (on-disk numbering).
enum class ValueType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};
std::string_view value_type_name(ValueType t);  // "u32", "array", ...; "?" when unknown
// Bytes of one element of a fixed-size type (0 for string, array and unknown types).
uint64_t value_type_size(ValueType t);

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint64_t kGgufDefaultAlignment = 32;
constexpr uint32_t kGgufMaxDims = 4;

// One metadata entry. Reader policy (stricter than the GGUF text, never stricter than what
// llama.cpp writes): arrays of arrays are rejected; a bool byte must be 0 or 1; strings are not
// checked for UTF-8 (vocabularies hold raw bytes); keys must be non-empty and unique.
// Scalars are decoded; strings are views into the mapping; arrays keep a
// view of their raw element bytes (numeric) or a vector of views (strings).
struct KeyValue {
  std::string_view key;
  ValueType type = ValueType::kU8;
  uint64_t file_offset = 0;  // byte offset of the key's length prefix

  // Scalars (the field matching `type`; integers are also widened into u64/i64).
  uint64_t u64 = 0;
  int64_t i64 = 0;
  double f64 = 0.0;
  bool b = false;
  std::string_view str;

  // Arrays.
  ValueType array_type = ValueType::kU8;
  uint64_t array_count = 0;
  const uint8_t* array_data = nullptr;  // numeric elements, little-endian, packed
  std::vector<std::string_view> array_strings;  // when array_type == kString
};

// Tensor policy: n_dims 1..4, every dimension >= 1, element count below 2^63, ne[0] a multiple
// of the type's block size, offset a multiple of the alignment, extent inside the file, no two
// extents overlapping, names non-empty and unique.
struct TensorInfo {
  std::string_view name;
  uint32_t n_dims = 0;
  uint64_t ne[4] = {1, 1, 1, 1};  // GGUF order: ne[0] is the contiguous (innermost) dimension
  DType type = DType::kF32;
  uint64_t offset = 0;        // relative to the data section, as stored
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;
  uint64_t info_offset = 0;   // byte offset of this tensor's info record in the file
  const uint8_t* data = nullptr;  // view into the mapping
};

class Cursor;  // gguf.cc: the bounded reader

class GgufFile {
 public:
  // Maps `path` read-only and parses it.
  static Result<std::unique_ptr<GgufFile>> open(const std::string& path);
  // Parses a caller-owned buffer (tests, the fuzzer); the buffer must outlive the GgufFile.
  static Result<std::unique_ptr<GgufFile>> parse(const uint8_t* data, size_t size,
                                                 std::string name = "<memory>");
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t file_size() const { return size_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  const uint8_t* base() const { return base_; }

  const std::vector<KeyValue>& kvs() const { return kvs_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }

  // find_* returns nullptr when absent; get_* insists and says what was expected and found.
  const KeyValue* find_kv(std::string_view key) const;
  const TensorInfo* find_tensor(std::string_view name) const;
  Result<const TensorInfo*> get_tensor(std::string_view name) const;

  // Typed scalar access. Integer getters accept any integer type whose value fits the target.
  Result<uint32_t> get_u32(std::string_view key) const;
  Result<int64_t> get_i64(std::string_view key) const;
  Result<uint64_t> get_u64(std::string_view key) const;
  Result<float> get_f32(std::string_view key) const;  // f32 or f64
  Result<bool> get_bool(std::string_view key) const;
  Result<std::string_view> get_string(std::string_view key) const;
  // Arrays: element type checked; integer arrays of any integer type widen into int64_t.
  Result<std::vector<int64_t>> get_int_array(std::string_view key) const;
  Result<std::vector<float>> get_f32_array(std::string_view key) const;
  Result<std::vector<bool>> get_bool_array(std::string_view key) const;
  Result<const std::vector<std::string_view>*> get_string_array(std::string_view key) const;

 private:
  GgufFile() = default;
  Status parse_all();
  Status parse_kvs(Cursor& cur, uint64_t n_kv);
  Status parse_tensor_infos(Cursor& cur, uint64_t n_tensors);
  Status check_tensor_extents();

  std::string path_;
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  void* mapping_ = nullptr;  // munmap on destruction when non-null
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<KeyValue> kvs_;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string_view, size_t> kv_index_;      // key -> index in kvs_
  std::unordered_map<std::string_view, size_t> tensor_index_;  // name -> index in tensors_
};

}  // namespace gem::gguf
