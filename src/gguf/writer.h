// GGUF writer: metadata and tensors streamed to disk in order, used by `gem synth`, by the tests
// that build malformed files, and by tools. Tensor data is produced by a callback in chunks so
// a multi-gigabyte file never sits in memory.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"
#include "gguf/gguf.h"

namespace gem::gguf {

class GgufWriter {
 public:
  explicit GgufWriter(uint32_t version = 3, uint64_t alignment = 32);

  void add_u8(std::string_view key, uint8_t v);
  void add_i8(std::string_view key, int8_t v);
  void add_u16(std::string_view key, uint16_t v);
  void add_i16(std::string_view key, int16_t v);
  void add_i64(std::string_view key, int64_t v);
  void add_f64(std::string_view key, double v);
  // A numeric array of any fixed-size element type: `count` packed little-endian elements.
  void add_array(std::string_view key, ValueType elem_type, const void* data, uint64_t count);
  void add_u32(std::string_view key, uint32_t v);
  void add_i32(std::string_view key, int32_t v);
  void add_u64(std::string_view key, uint64_t v);
  void add_f32(std::string_view key, float v);
  void add_bool(std::string_view key, bool v);
  void add_string(std::string_view key, std::string_view v);
  void add_i32_array(std::string_view key, std::span<const int32_t> v);
  void add_f32_array(std::string_view key, std::span<const float> v);
  void add_bool_array(std::string_view key, std::span<const bool> v);
  void add_string_array(std::string_view key, std::span<const std::string_view> v);
  // Copies an entry verbatim from another file (used to carry the tokenizer.* keys).
  void add_kv_copy(const KeyValue& kv);

  // Fills `out` (exactly the bytes requested) with the next chunk of the tensor's data.
  using Filler = std::function<void(uint64_t byte_offset, std::span<uint8_t> out)>;
  // ne in GGUF order (ne[0] innermost).
  void add_tensor(std::string_view name, DType type, std::vector<uint64_t> ne, Filler fill);
  void add_tensor_bytes(std::string_view name, DType type, std::vector<uint64_t> ne,
                        std::vector<uint8_t> bytes);

  // Writes the whole file; `progress(done_bytes, total_bytes)` is called as data is written
  // (about every 8 MiB). With `sparse_data` the tensor data is not written at all: the writer
  // seeks over it and truncates the file to its full size, so a multi-gigabyte test model
  // takes no disk blocks (its tensors read as zeros; fillers are not called).
  Status write(const std::string& path,
               const std::function<void(uint64_t, uint64_t)>& progress = {},
               bool sparse_data = false) const;
  // The whole file in memory (small files: tests).
  std::vector<uint8_t> to_bytes() const;
  // Size in bytes of the file write() produces, and where its data section starts.
  uint64_t file_size() const;
  uint64_t data_offset() const;

  static constexpr uint64_t kChunkBytes = 8ull << 20;  // filler chunk size in write()

 private:
  struct Tensor {
    std::string name;
    DType type;
    std::vector<uint64_t> ne;
    uint64_t n_bytes;
    Filler fill;
  };
  std::vector<uint8_t> header_bytes(uint64_t* data_offset) const;
  void add_key(std::string_view key, ValueType type);
  uint64_t padded(uint64_t n) const { return (n + alignment_ - 1) / alignment_ * alignment_; }

  uint32_t version_;
  uint64_t alignment_;
  uint64_t n_kv_ = 0;
  std::vector<uint8_t> kv_blob_;
  std::vector<Tensor> tensors_;
};

}  // namespace gem::gguf
