// GGUF writer: serialises metadata into a blob as it is added, lays out tensor offsets at write
// time, then streams each tensor's data from its filler in chunks, padding to the alignment.
#include "gguf/writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstring>
#include <memory>

#include "base/check.h"

namespace gem::gguf {
namespace {

template <typename T>
void put(std::vector<uint8_t>& out, T v) {
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &v, sizeof(T));
}

void put_string(std::vector<uint8_t>& out, std::string_view s) {
  put<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

// Writes all of [p, p + n) or says why not.
Status write_all(int fd, const uint8_t* p, uint64_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, std::min<uint64_t>(n, 1ull << 30));
    if (w < 0) {
      if (errno == EINTR) continue;
      return errorf("%s: write failed: %s", path.c_str(), std::strerror(errno));
    }
    p += w;
    n -= static_cast<uint64_t>(w);
  }
  return ok_status();
}

}  // namespace

GgufWriter::GgufWriter(uint32_t version, uint64_t alignment)
    : version_(version), alignment_(alignment) {
  GEM_CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0,
            "alignment %" PRIu64 " is not a power of two", alignment);
  if (alignment != kGgufDefaultAlignment) {
    // Readers take the alignment from this key; without it they assume 32.
    add_u32("general.alignment", static_cast<uint32_t>(alignment));
  }
}

void GgufWriter::add_key(std::string_view key, ValueType type) {
  put_string(kv_blob_, key);
  put<uint32_t>(kv_blob_, static_cast<uint32_t>(type));
  ++n_kv_;
}

void GgufWriter::add_u8(std::string_view key, uint8_t v) { add_key(key, ValueType::kU8); put(kv_blob_, v); }
void GgufWriter::add_i8(std::string_view key, int8_t v) { add_key(key, ValueType::kI8); put(kv_blob_, v); }
void GgufWriter::add_u16(std::string_view key, uint16_t v) { add_key(key, ValueType::kU16); put(kv_blob_, v); }
void GgufWriter::add_i16(std::string_view key, int16_t v) { add_key(key, ValueType::kI16); put(kv_blob_, v); }
void GgufWriter::add_u32(std::string_view key, uint32_t v) { add_key(key, ValueType::kU32); put(kv_blob_, v); }
void GgufWriter::add_i32(std::string_view key, int32_t v) { add_key(key, ValueType::kI32); put(kv_blob_, v); }
void GgufWriter::add_u64(std::string_view key, uint64_t v) { add_key(key, ValueType::kU64); put(kv_blob_, v); }
void GgufWriter::add_i64(std::string_view key, int64_t v) { add_key(key, ValueType::kI64); put(kv_blob_, v); }
void GgufWriter::add_f32(std::string_view key, float v) { add_key(key, ValueType::kF32); put(kv_blob_, v); }
void GgufWriter::add_f64(std::string_view key, double v) { add_key(key, ValueType::kF64); put(kv_blob_, v); }

void GgufWriter::add_bool(std::string_view key, bool v) {
  add_key(key, ValueType::kBool);
  put<uint8_t>(kv_blob_, v ? 1 : 0);
}

void GgufWriter::add_string(std::string_view key, std::string_view v) {
  add_key(key, ValueType::kString);
  put_string(kv_blob_, v);
}

void GgufWriter::add_array(std::string_view key, ValueType elem_type, const void* data,
                           uint64_t count) {
  const uint64_t esize = value_type_size(elem_type);
  GEM_CHECK(esize > 0, "add_array: element type %s is not a fixed-size type",
            std::string(value_type_name(elem_type)).c_str());
  add_key(key, ValueType::kArray);
  put<uint32_t>(kv_blob_, static_cast<uint32_t>(elem_type));
  put<uint64_t>(kv_blob_, count);
  const auto* p = static_cast<const uint8_t*>(data);
  kv_blob_.insert(kv_blob_.end(), p, p + count * esize);
}

void GgufWriter::add_i32_array(std::string_view key, std::span<const int32_t> v) {
  add_array(key, ValueType::kI32, v.data(), v.size());
}

void GgufWriter::add_f32_array(std::string_view key, std::span<const float> v) {
  add_array(key, ValueType::kF32, v.data(), v.size());
}

void GgufWriter::add_bool_array(std::string_view key, std::span<const bool> v) {
  std::vector<uint8_t> bytes(v.size());
  for (size_t k = 0; k < v.size(); ++k) bytes[k] = v[k] ? 1 : 0;
  add_array(key, ValueType::kBool, bytes.data(), bytes.size());
}

void GgufWriter::add_string_array(std::string_view key, std::span<const std::string_view> v) {
  add_key(key, ValueType::kArray);
  put<uint32_t>(kv_blob_, static_cast<uint32_t>(ValueType::kString));
  put<uint64_t>(kv_blob_, v.size());
  for (std::string_view s : v) put_string(kv_blob_, s);
}

void GgufWriter::add_kv_copy(const KeyValue& kv) {
  switch (kv.type) {
    case ValueType::kString:
      add_string(kv.key, kv.str);
      return;
    case ValueType::kArray:
      if (kv.array_type == ValueType::kString) {
        add_string_array(kv.key, kv.array_strings);
      } else {
        add_array(kv.key, kv.array_type, kv.array_data, kv.array_count);
      }
      return;
    case ValueType::kF32: add_f32(kv.key, static_cast<float>(kv.f64)); return;
    case ValueType::kF64: add_f64(kv.key, kv.f64); return;
    case ValueType::kBool: add_bool(kv.key, kv.b); return;
    case ValueType::kU8: add_u8(kv.key, static_cast<uint8_t>(kv.u64)); return;
    case ValueType::kI8: add_i8(kv.key, static_cast<int8_t>(kv.i64)); return;
    case ValueType::kU16: add_u16(kv.key, static_cast<uint16_t>(kv.u64)); return;
    case ValueType::kI16: add_i16(kv.key, static_cast<int16_t>(kv.i64)); return;
    case ValueType::kU32: add_u32(kv.key, static_cast<uint32_t>(kv.u64)); return;
    case ValueType::kI32: add_i32(kv.key, static_cast<int32_t>(kv.i64)); return;
    case ValueType::kU64: add_u64(kv.key, kv.u64); return;
    case ValueType::kI64: add_i64(kv.key, kv.i64); return;
  }
  GEM_CHECK(false, "add_kv_copy: unknown value type %u", static_cast<uint32_t>(kv.type));
}

void GgufWriter::add_tensor(std::string_view name, DType type, std::vector<uint64_t> ne,
                            Filler fill) {
  const auto info = dtype_info(static_cast<uint32_t>(type));
  GEM_CHECK(info.has_value(), "add_tensor %.*s: unknown type %u", static_cast<int>(name.size()),
            name.data(), static_cast<uint32_t>(type));
  GEM_CHECK(!ne.empty() && ne.size() <= kGgufMaxDims, "add_tensor %.*s: %zu dims",
            static_cast<int>(name.size()), name.data(), ne.size());
  GEM_CHECK(ne[0] % info->block_elems == 0, "add_tensor %.*s: ne[0] %" PRIu64
            " not a multiple of %u", static_cast<int>(name.size()), name.data(), ne[0],
            info->block_elems);
  uint64_t n = 1;
  for (uint64_t d : ne) n *= d;
  tensors_.push_back(
      Tensor{std::string(name), type, std::move(ne), dtype_row_bytes(*info, n), std::move(fill)});
}

void GgufWriter::add_tensor_bytes(std::string_view name, DType type, std::vector<uint64_t> ne,
                                  std::vector<uint8_t> bytes) {
  auto data = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
  add_tensor(name, type, std::move(ne), [data](uint64_t off, std::span<uint8_t> out) {
    std::memcpy(out.data(), data->data() + off, out.size());
  });
  GEM_CHECK(tensors_.back().n_bytes == data->size(),
            "add_tensor_bytes %.*s: %zu bytes given, the shape needs %" PRIu64,
            static_cast<int>(name.size()), name.data(), data->size(), tensors_.back().n_bytes);
}

std::vector<uint8_t> GgufWriter::header_bytes(uint64_t* data_offset) const {
  std::vector<uint8_t> out;
  put<uint32_t>(out, kGgufMagic);
  put<uint32_t>(out, version_);
  put<uint64_t>(out, tensors_.size());
  put<uint64_t>(out, n_kv_);
  out.insert(out.end(), kv_blob_.begin(), kv_blob_.end());
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    put_string(out, t.name);
    put<uint32_t>(out, static_cast<uint32_t>(t.ne.size()));
    for (uint64_t d : t.ne) put<uint64_t>(out, d);
    put<uint32_t>(out, static_cast<uint32_t>(t.type));
    put<uint64_t>(out, offset);
    offset += padded(t.n_bytes);
  }
  out.resize(padded(out.size()), 0);
  *data_offset = out.size();
  return out;
}

uint64_t GgufWriter::data_offset() const {
  uint64_t off = 0;
  header_bytes(&off);
  return off;
}

uint64_t GgufWriter::file_size() const {
  uint64_t total = data_offset();
  for (const Tensor& t : tensors_) total += padded(t.n_bytes);
  return total;
}

Status GgufWriter::write(const std::string& path,
                         const std::function<void(uint64_t, uint64_t)>& progress,
                         bool sparse_data) const {
  uint64_t data_offset = 0;
  const std::vector<uint8_t> header = header_bytes(&data_offset);
  uint64_t total = data_offset;
  for (const Tensor& t : tensors_) total += padded(t.n_bytes);

  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errorf("%s: cannot create: %s", path.c_str(), std::strerror(errno));
  auto fail = [&](Status s) {
    ::close(fd);
    return s;
  };
  Status s = write_all(fd, header.data(), header.size(), path);
  if (!s.ok()) return fail(s);
  uint64_t done = data_offset;
  if (progress) progress(done, total);

  if (sparse_data) {
    // Holes read back as zeros; ftruncate sets the size without allocating blocks.
    if (ftruncate(fd, static_cast<off_t>(total)) != 0) {
      return fail(errorf("%s: cannot extend to %" PRIu64 " bytes: %s", path.c_str(), total,
                         std::strerror(errno)));
    }
    if (progress) progress(total, total);
  } else {
    std::vector<uint8_t> buf(std::min<uint64_t>(kChunkBytes, std::max<uint64_t>(total, 1)));
    for (const Tensor& t : tensors_) {
      for (uint64_t off = 0; off < t.n_bytes;) {
        const uint64_t n = std::min<uint64_t>(buf.size(), t.n_bytes - off);
        t.fill(off, std::span<uint8_t>(buf.data(), n));
        s = write_all(fd, buf.data(), n, path);
        if (!s.ok()) return fail(s);
        off += n;
        done += n;
        if (progress) progress(done, total);
      }
      for (uint64_t pad = padded(t.n_bytes) - t.n_bytes; pad > 0;) {
        const uint64_t n = std::min<uint64_t>(buf.size(), pad);
        std::memset(buf.data(), 0, n);
        s = write_all(fd, buf.data(), n, path);
        if (!s.ok()) return fail(s);
        pad -= n;
        done += n;
      }
    }
  }
  if (::close(fd) != 0) {
    return errorf("%s: close failed: %s", path.c_str(), std::strerror(errno));
  }
  return ok_status();
}

std::vector<uint8_t> GgufWriter::to_bytes() const {
  uint64_t data_offset = 0;
  std::vector<uint8_t> out = header_bytes(&data_offset);
  for (const Tensor& t : tensors_) {
    const size_t at = out.size();
    out.resize(at + padded(t.n_bytes), 0);
    if (t.n_bytes > 0) t.fill(0, std::span<uint8_t>(out.data() + at, t.n_bytes));
  }
  return out;
}

}  // namespace gem::gguf
