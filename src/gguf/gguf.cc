// GGUF reader: a cursor that never reads past the end, the header/KV/tensor-info parser, the
// extent checks, the memory mapping, and the typed getters.
#include "gguf/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstring>
#include <limits>
#include <type_traits>

namespace gem::gguf {

std::string_view value_type_name(ValueType t) {
  switch (t) {
    case ValueType::kU8: return "u8";
    case ValueType::kI8: return "i8";
    case ValueType::kU16: return "u16";
    case ValueType::kI16: return "i16";
    case ValueType::kU32: return "u32";
    case ValueType::kI32: return "i32";
    case ValueType::kF32: return "f32";
    case ValueType::kBool: return "bool";
    case ValueType::kString: return "string";
    case ValueType::kArray: return "array";
    case ValueType::kU64: return "u64";
    case ValueType::kI64: return "i64";
    case ValueType::kF64: return "f64";
  }
  return "?";
}

uint64_t value_type_size(ValueType t) {
  switch (t) {
    case ValueType::kU8:
    case ValueType::kI8:
    case ValueType::kBool: return 1;
    case ValueType::kU16:
    case ValueType::kI16: return 2;
    case ValueType::kU32:
    case ValueType::kI32:
    case ValueType::kF32: return 4;
    case ValueType::kU64:
    case ValueType::kI64:
    case ValueType::kF64: return 8;
    case ValueType::kString:
    case ValueType::kArray: return 0;
  }
  return 0;
}

namespace {

bool is_known_value_type(uint32_t raw) { return raw <= static_cast<uint32_t>(ValueType::kF64); }

bool is_integer_type(ValueType t) {
  switch (t) {
    case ValueType::kU8:
    case ValueType::kI8:
    case ValueType::kU16:
    case ValueType::kI16:
    case ValueType::kU32:
    case ValueType::kI32:
    case ValueType::kU64:
    case ValueType::kI64: return true;
    default: return false;
  }
}

bool is_signed_type(ValueType t) {
  return t == ValueType::kI8 || t == ValueType::kI16 || t == ValueType::kI32 ||
         t == ValueType::kI64;
}

// Little-endian loads from unaligned bytes (the host is little-endian: x86-64 and aarch64).
template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// One integer element of a numeric array (or scalar) as a signed 128-bit-free pair: the value
// widened to int64 when signed, to uint64 when unsigned.
void load_integer(ValueType t, const uint8_t* p, uint64_t* u, int64_t* i) {
  switch (t) {
    case ValueType::kU8: *u = load<uint8_t>(p); *i = static_cast<int64_t>(*u); return;
    case ValueType::kU16: *u = load<uint16_t>(p); *i = static_cast<int64_t>(*u); return;
    case ValueType::kU32: *u = load<uint32_t>(p); *i = static_cast<int64_t>(*u); return;
    case ValueType::kU64: *u = load<uint64_t>(p); *i = static_cast<int64_t>(*u); return;
    case ValueType::kI8: *i = load<int8_t>(p); *u = static_cast<uint64_t>(*i); return;
    case ValueType::kI16: *i = load<int16_t>(p); *u = static_cast<uint64_t>(*i); return;
    case ValueType::kI32: *i = load<int32_t>(p); *u = static_cast<uint64_t>(*i); return;
    case ValueType::kI64: *i = load<int64_t>(p); *u = static_cast<uint64_t>(*i); return;
    default: *u = 0; *i = 0; return;
  }
}

std::string printable(std::string_view s) {
  // Names in messages: cut long ones and escape control bytes so a hostile file cannot flood
  // or garble the terminal.
  std::string out;
  const size_t n = std::min<size_t>(s.size(), 80);
  for (size_t k = 0; k < n; ++k) {
    const auto c = static_cast<unsigned char>(s[k]);
    if (c < 0x20 || c == 0x7F) {
      out += strprintf("\\x%02x", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > n) out += strprintf("...(%zu bytes)", s.size());
  return out;
}

}  // namespace

// Bounded little-endian reader over [data, data + size). Every read checks the remaining bytes
// first; errors say what was being read, at which byte, and how much was left.
class Cursor {
 public:
  Cursor(const uint8_t* data, uint64_t size, const std::string& name)
      : data_(data), size_(size), name_(name) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }
  const uint8_t* here() const { return data_ + pos_; }

  // `what` names the field for messages: a string, or a callable returning one, so the hot
  // loops (a 262144-entry vocabulary) build no message unless something is wrong.
  template <typename What>
  static std::string describe(const What& what) {
    if constexpr (std::is_invocable_v<const What&>) {
      return what();
    } else {
      return std::string(what);
    }
  }

  template <typename What>
  Status truncated(const What& what, uint64_t need) const {
    return errorf("%s: truncated: reading %s at byte %" PRIu64 " needs %" PRIu64
                  " bytes, only %" PRIu64 " left (file size %" PRIu64 ")",
                  name_.c_str(), describe(what).c_str(), pos_, need, remaining(), size_);
  }

  template <typename What>
  Status skip(uint64_t n, const What& what) {
    if (n > remaining()) return truncated(what, n);
    pos_ += n;
    return ok_status();
  }

  template <typename T, typename What>
  Status read(T* v, const What& what) {
    if (sizeof(T) > remaining()) return truncated([&] { return describe(what); }, sizeof(T));
    std::memcpy(v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return ok_status();
  }

  // A GGUF string: u64 length, then that many bytes (no terminator).
  template <typename What>
  Status read_string(std::string_view* s, const What& what) {
    const uint64_t at = pos_;
    uint64_t len = 0;
    GEM_RETURN_IF_ERROR(read(&len, [&] { return "the length of " + describe(what); }));
    if (len > remaining()) {
      return errorf("%s: %s at byte %" PRIu64 ": length %" PRIu64 " exceeds the %" PRIu64
                    " bytes left in the file (size %" PRIu64 ")",
                    name_.c_str(), describe(what).c_str(), at, len, remaining(), size_);
    }
    *s = std::string_view(reinterpret_cast<const char*>(data_ + pos_), len);
    pos_ += len;
    return ok_status();
  }

 private:
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
  const std::string& name_;
};

GgufFile::~GgufFile() {
  if (mapping_ != nullptr) munmap(mapping_, size_);
}

Result<std::unique_ptr<GgufFile>> GgufFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errorf("%s: cannot open: %s", path.c_str(), std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return errorf("%s: cannot stat: %s", path.c_str(), std::strerror(err));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    return errorf("%s: is a directory, expected a GGUF file", path.c_str());
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return errorf("%s: not a regular file, expected a GGUF file", path.c_str());
  }
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = path;
  f->size_ = static_cast<uint64_t>(st.st_size);
  if (f->size_ > 0) {
    void* p = mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return errorf("%s: cannot map %" PRIu64 " bytes: %s", path.c_str(), f->size_,
                    std::strerror(err));
    }
    f->mapping_ = p;
    f->base_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);  // the mapping keeps the file alive
  GEM_RETURN_IF_ERROR(f->parse_all());
  return f;
}

Result<std::unique_ptr<GgufFile>> GgufFile::parse(const uint8_t* data, size_t size,
                                                  std::string name) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = std::move(name);
  f->base_ = data;
  f->size_ = data == nullptr ? 0 : size;
  GEM_RETURN_IF_ERROR(f->parse_all());
  return f;
}

Status GgufFile::parse_all() {
  const char* name = path_.c_str();
  if (size_ == 0) {
    return errorf("%s: empty file (0 bytes), expected a GGUF header (magic 'GGUF')", name);
  }
  Cursor cur(base_, size_, path_);
  uint32_t magic = 0;
  GEM_RETURN_IF_ERROR(cur.read(&magic, "the magic"));
  if (magic != kGgufMagic) {
    return errorf("%s: bad magic at byte 0: expected 'GGUF' (47 47 55 46), found %02x %02x %02x %02x",
                  name, base_[0], base_[1], base_[2], base_[3]);
  }
  GEM_RETURN_IF_ERROR(cur.read(&version_, "the version"));
  if (version_ != 2 && version_ != 3) {
    if (__builtin_bswap32(version_) == 2 || __builtin_bswap32(version_) == 3) {
      return errorf("%s: version at byte 4 reads %u little-endian: a big-endian GGUF, which gem "
                    "does not read (expected a little-endian version 2 or 3)",
                    name, version_);
    }
    return errorf("%s: unsupported GGUF version %u at byte 4, expected 2 or 3", name, version_);
  }
  uint64_t n_tensors = 0;
  uint64_t n_kv = 0;
  GEM_RETURN_IF_ERROR(cur.read(&n_tensors, "the tensor count"));
  GEM_RETURN_IF_ERROR(cur.read(&n_kv, "the KV count"));
  // Smallest possible records: a KV is an 8-byte key length, a 4-byte type and a 1-byte value
  // (13 bytes); a tensor info is an 8-byte name length, n_dims, one dim, type and offset (32).
  constexpr uint64_t kMinKvBytes = 13;
  constexpr uint64_t kMinTensorInfoBytes = 32;
  if (n_kv > cur.remaining() / kMinKvBytes) {
    return errorf("%s: KV count %" PRIu64 " at byte 16 is impossible: each entry needs at least %"
                  PRIu64 " bytes and only %" PRIu64 " bytes follow the header",
                  name, n_kv, kMinKvBytes, cur.remaining());
  }
  if (n_tensors > cur.remaining() / kMinTensorInfoBytes) {
    return errorf("%s: tensor count %" PRIu64 " at byte 8 is impossible: each tensor info needs "
                  "at least %" PRIu64 " bytes and only %" PRIu64 " bytes follow the header",
                  name, n_tensors, kMinTensorInfoBytes, cur.remaining());
  }
  GEM_RETURN_IF_ERROR(parse_kvs(cur, n_kv));

  if (const KeyValue* kv = find_kv("general.alignment")) {
    if (kv->type != ValueType::kU32) {
      return errorf("%s: key 'general.alignment' (at byte %" PRIu64 "): expected u32, found %s",
                    name, kv->file_offset, std::string(value_type_name(kv->type)).c_str());
    }
    if (kv->u64 == 0 || (kv->u64 & (kv->u64 - 1)) != 0) {
      return errorf("%s: key 'general.alignment' (at byte %" PRIu64 "): expected a non-zero power "
                    "of two, found %" PRIu64,
                    name, kv->file_offset, kv->u64);
    }
    alignment_ = kv->u64;
  }

  if (n_tensors > cur.remaining() / kMinTensorInfoBytes) {
    return errorf("%s: tensor count %" PRIu64 " at byte 8 is impossible: each tensor info needs "
                  "at least %" PRIu64 " bytes and only %" PRIu64 " bytes follow the metadata",
                  name, n_tensors, kMinTensorInfoBytes, cur.remaining());
  }
  GEM_RETURN_IF_ERROR(parse_tensor_infos(cur, n_tensors));
  // The data section starts at the next multiple of the alignment (the padding may be missing
  // in a file without tensors).
  data_offset_ = (cur.pos() + alignment_ - 1) / alignment_ * alignment_;
  return check_tensor_extents();
}

Status GgufFile::parse_kvs(Cursor& cur, uint64_t n_kv) {
  const char* name = path_.c_str();
  kvs_.reserve(std::min<uint64_t>(n_kv, 4096));
  for (uint64_t i = 0; i < n_kv; ++i) {
    KeyValue kv;
    kv.file_offset = cur.pos();
    const std::string what = strprintf("the key of KV #%" PRIu64, i);
    GEM_RETURN_IF_ERROR(cur.read_string(&kv.key, what));
    if (kv.key.empty()) {
      return errorf("%s: KV #%" PRIu64 " (at byte %" PRIu64 "): empty key", name, i,
                    kv.file_offset);
    }
    const std::string key = printable(kv.key);
    const std::string where =
        strprintf("key '%s' (at byte %" PRIu64 ")", key.c_str(), kv.file_offset);
    if (kv_index_.count(kv.key) != 0) {
      return errorf("%s: %s: duplicate key, first at byte %" PRIu64, name, where.c_str(),
                    kvs_[kv_index_[kv.key]].file_offset);
    }
    uint32_t raw_type = 0;
    const uint64_t type_at = cur.pos();
    GEM_RETURN_IF_ERROR(cur.read(&raw_type, "the value type of " + where));
    if (!is_known_value_type(raw_type)) {
      return errorf("%s: %s: unknown value type %u at byte %" PRIu64 ", expected 0..12", name,
                    where.c_str(), raw_type, type_at);
    }
    kv.type = static_cast<ValueType>(raw_type);
    const std::string value_what = "the value of " + where;
    switch (kv.type) {
      case ValueType::kString:
        GEM_RETURN_IF_ERROR(cur.read_string(&kv.str, value_what));
        break;
      case ValueType::kArray: {
        uint32_t raw_elem = 0;
        const uint64_t elem_at = cur.pos();
        GEM_RETURN_IF_ERROR(cur.read(&raw_elem, "the array element type of " + where));
        if (!is_known_value_type(raw_elem)) {
          return errorf("%s: %s: unknown array element type %u at byte %" PRIu64
                        ", expected 0..12",
                        name, where.c_str(), raw_elem, elem_at);
        }
        kv.array_type = static_cast<ValueType>(raw_elem);
        if (kv.array_type == ValueType::kArray) {
          // GGUF's text allows it; no writer we know emits it and nothing in gem reads it.
          return errorf("%s: %s: arrays of arrays are not supported (element type at byte %"
                        PRIu64 ")",
                        name, where.c_str(), elem_at);
        }
        const uint64_t count_at = cur.pos();
        GEM_RETURN_IF_ERROR(cur.read(&kv.array_count, "the array count of " + where));
        if (kv.array_type == ValueType::kString) {
          if (kv.array_count > cur.remaining() / 8) {
            return errorf("%s: %s: array count %" PRIu64 " at byte %" PRIu64
                          " is impossible: %" PRIu64 " strings need at least %s bytes, only %"
                          PRIu64 " left",
                          name, where.c_str(), kv.array_count, count_at, kv.array_count,
                          kv.array_count > UINT64_MAX / 8
                              ? "2^64"
                              : std::to_string(kv.array_count * 8).c_str(),
                          cur.remaining());
          }
          kv.array_strings.reserve(kv.array_count);
          for (uint64_t k = 0; k < kv.array_count; ++k) {
            std::string_view s;
            GEM_RETURN_IF_ERROR(cur.read_string(
                &s, [&] { return strprintf("string #%" PRIu64 " of ", k) + where; }));
            kv.array_strings.push_back(s);
          }
        } else {
          const uint64_t esize = value_type_size(kv.array_type);
          if (kv.array_count > cur.remaining() / esize) {
            return errorf("%s: %s: array count %" PRIu64 " at byte %" PRIu64
                          " of %s elements (%" PRIu64 " bytes each) exceeds the %" PRIu64
                          " bytes left in the file",
                          name, where.c_str(), kv.array_count, count_at,
                          std::string(value_type_name(kv.array_type)).c_str(), esize,
                          cur.remaining());
          }
          kv.array_data = cur.here();
          if (kv.array_type == ValueType::kBool) {
            for (uint64_t k = 0; k < kv.array_count; ++k) {
              if (kv.array_data[k] > 1) {
                return errorf("%s: %s: bool element #%" PRIu64 " at byte %" PRIu64
                              " is %u, expected 0 or 1",
                              name, where.c_str(), k, cur.pos() + k, kv.array_data[k]);
              }
            }
          }
          GEM_RETURN_IF_ERROR(cur.skip(kv.array_count * esize, value_what));
        }
        break;
      }
      default: {
        const uint64_t esize = value_type_size(kv.type);
        const uint64_t value_at = cur.pos();
        if (esize > cur.remaining()) return cur.truncated(value_what, esize);
        const uint8_t* p = cur.here();
        GEM_RETURN_IF_ERROR(cur.skip(esize, value_what));
        if (is_integer_type(kv.type)) {
          load_integer(kv.type, p, &kv.u64, &kv.i64);
        } else if (kv.type == ValueType::kF32) {
          kv.f64 = load<float>(p);
        } else if (kv.type == ValueType::kF64) {
          kv.f64 = load<double>(p);
        } else if (kv.type == ValueType::kBool) {
          if (p[0] > 1) {
            return errorf("%s: %s: bool value at byte %" PRIu64 " is %u, expected 0 or 1", name,
                          where.c_str(), value_at, p[0]);
          }
          kv.b = p[0] != 0;
          kv.u64 = p[0];
          kv.i64 = p[0];
        }
        break;
      }
    }
    kv_index_.emplace(kv.key, kvs_.size());
    kvs_.push_back(std::move(kv));
  }
  return ok_status();
}

Status GgufFile::parse_tensor_infos(Cursor& cur, uint64_t n_tensors) {
  const char* name = path_.c_str();
  tensors_.reserve(std::min<uint64_t>(n_tensors, 4096));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    TensorInfo t;
    t.info_offset = cur.pos();
    GEM_RETURN_IF_ERROR(cur.read_string(&t.name, strprintf("the name of tensor #%" PRIu64, i)));
    if (t.name.empty()) {
      return errorf("%s: tensor #%" PRIu64 " (info at byte %" PRIu64 "): empty name", name, i,
                    t.info_offset);
    }
    const std::string tname = printable(t.name);
    const std::string where =
        strprintf("tensor '%s' (info at byte %" PRIu64 ")", tname.c_str(), t.info_offset);
    if (tensor_index_.count(t.name) != 0) {
      return errorf("%s: %s: duplicate tensor name, first at byte %" PRIu64, name, where.c_str(),
                    tensors_[tensor_index_[t.name]].info_offset);
    }
    GEM_RETURN_IF_ERROR(cur.read(&t.n_dims, "n_dims of " + where));
    if (t.n_dims < 1 || t.n_dims > kGgufMaxDims) {
      return errorf("%s: %s: n_dims is %u, expected 1..%u", name, where.c_str(), t.n_dims,
                    kGgufMaxDims);
    }
    for (uint32_t d = 0; d < t.n_dims; ++d) {
      GEM_RETURN_IF_ERROR(cur.read(&t.ne[d], strprintf("ne[%u] of ", d) + where));
    }
    uint32_t raw_type = 0;
    const uint64_t type_at = cur.pos();
    GEM_RETURN_IF_ERROR(cur.read(&raw_type, "the type of " + where));
    GEM_RETURN_IF_ERROR(cur.read(&t.offset, "the data offset of " + where));

    const auto info = dtype_info(raw_type);
    if (!info) {
      return errorf("%s: %s: unknown tensor type %u at byte %" PRIu64, name, where.c_str(),
                    raw_type, type_at);
    }
    t.type = static_cast<DType>(raw_type);
    uint64_t n = 1;
    for (uint32_t d = 0; d < t.n_dims; ++d) {
      if (t.ne[d] == 0) {
        return errorf("%s: %s: ne[%u] is 0, expected >= 1", name, where.c_str(), d);
      }
      if (__builtin_mul_overflow(n, t.ne[d], &n) ||
          n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return errorf("%s: %s: element count overflows: the product of ne[0..%u] exceeds 2^63-1",
                      name, where.c_str(), d);
      }
    }
    t.n_elements = n;
    if (t.ne[0] % info->block_elems != 0) {
      return errorf("%s: %s: ne[0] = %" PRIu64 " is not a multiple of the %s block size %u",
                    name, where.c_str(), t.ne[0], std::string(info->name).c_str(),
                    info->block_elems);
    }
    if (__builtin_mul_overflow(n / info->block_elems, static_cast<uint64_t>(info->block_bytes),
                               &t.n_bytes)) {
      return errorf("%s: %s: byte size overflows 64 bits (%" PRIu64 " %s elements)", name,
                    where.c_str(), n, std::string(info->name).c_str());
    }
    if (t.offset % alignment_ != 0) {
      return errorf("%s: %s: data offset %" PRIu64 " is not a multiple of the alignment %" PRIu64,
                    name, where.c_str(), t.offset, alignment_);
    }
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back(t);
  }
  return ok_status();
}

Status GgufFile::check_tensor_extents() {
  const char* name = path_.c_str();
  if (tensors_.empty()) return ok_status();
  const auto where = [&](const TensorInfo& t) {
    return strprintf("tensor '%s' (info at byte %" PRIu64 ")", printable(t.name).c_str(),
                     t.info_offset);
  };
  for (TensorInfo& t : tensors_) {
    // data_offset_ <= size_ + alignment, offsets and sizes < 2^64: compare without overflow.
    const uint64_t avail = data_offset_ <= size_ ? size_ - data_offset_ : 0;
    if (data_offset_ > size_ || t.offset > avail || t.n_bytes > avail - t.offset) {
      uint64_t start = 0;
      uint64_t end = 0;
      const bool wraps = __builtin_add_overflow(data_offset_, t.offset, &start) ||
                         __builtin_add_overflow(start, t.n_bytes, &end);
      return errorf("%s: %s: data extent [%s, %s) ends past the end of the file (size %" PRIu64
                    ")",
                    name, where(t).c_str(),
                    wraps ? strprintf("%" PRIu64 " + %" PRIu64, data_offset_, t.offset).c_str()
                          : std::to_string(start).c_str(),
                    wraps ? "beyond 2^64" : std::to_string(end).c_str(), size_);
    }
    t.data = base_ + data_offset_ + t.offset;
  }
  std::vector<size_t> order(tensors_.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return tensors_[a].offset < tensors_[b].offset;
  });
  for (size_t k = 1; k < order.size(); ++k) {
    const TensorInfo& prev = tensors_[order[k - 1]];
    const TensorInfo& t = tensors_[order[k]];
    if (prev.offset + prev.n_bytes > t.offset) {
      return errorf("%s: %s: data extent [%" PRIu64 ", %" PRIu64 ") overlaps tensor '%s' at [%"
                    PRIu64 ", %" PRIu64 ")",
                    name, where(t).c_str(), data_offset_ + t.offset,
                    data_offset_ + t.offset + t.n_bytes, printable(prev.name).c_str(),
                    data_offset_ + prev.offset, data_offset_ + prev.offset + prev.n_bytes);
    }
  }
  return ok_status();
}

const KeyValue* GgufFile::find_kv(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kvs_[it->second];
}

const TensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

Result<const TensorInfo*> GgufFile::get_tensor(std::string_view name) const {
  const TensorInfo* t = find_tensor(name);
  if (t == nullptr) return errorf("tensor '%s' not found", printable(name).c_str());
  return t;
}

namespace {

Status missing(std::string_view key) {
  return errorf("key '%s' not found", printable(key).c_str());
}

Status wrong_type(const KeyValue& kv, const char* expected) {
  std::string found(value_type_name(kv.type));
  if (kv.type == ValueType::kArray) {
    found = "array of " + std::string(value_type_name(kv.array_type));
  }
  return errorf("key '%s': expected %s, found %s", printable(kv.key).c_str(), expected,
                found.c_str());
}

// The integer value of kv as int64 / uint64, with range checks against [lo, hi].
Status integer_in_range(const KeyValue& kv, const char* target, bool want_signed, int64_t lo,
                        uint64_t hi, uint64_t* u_out, int64_t* i_out) {
  if (!is_integer_type(kv.type)) return wrong_type(kv, target);
  const bool negative = is_signed_type(kv.type) && kv.i64 < 0;
  if (negative) {
    if (!want_signed || kv.i64 < lo) {
      return errorf("key '%s': value %" PRId64 " does not fit %s", printable(kv.key).c_str(),
                    kv.i64, target);
    }
  } else if (kv.u64 > hi) {
    return errorf("key '%s': value %" PRIu64 " does not fit %s", printable(kv.key).c_str(),
                  kv.u64, target);
  }
  *u_out = kv.u64;
  *i_out = kv.i64;
  return ok_status();
}

}  // namespace

Result<uint32_t> GgufFile::get_u32(std::string_view key) const {
  const KeyValue* kv = find_kv(key);
  if (kv == nullptr) return missing(key);
  uint64_t u = 0;
  int64_t i = 0;
  GEM_RETURN_IF_ERROR(integer_in_range(*kv, "u32", false, 0, UINT32_MAX, &u, &i));
  return static_cast<uint32_t>(u);
}

Result<uint64_t> GgufFile::get_u64(std::string_view key) const {
  const KeyValue* kv = find_kv(key);
  if (kv == nullptr) return missing(key);
  uint64_t u = 0;
  int64_t i = 0;
  GEM_RETURN_IF_ERROR(integer_in_range(*kv, "u64", false, 0, UINT64_MAX, &u, &i));
  return u;
}

Result<int64_t> GgufFile::get_i64(std::string_view key) const {
  const KeyValue* kv = find_kv(key);
  if (kv == nullptr) return missing(key);
  uint64_t u = 0;
  int64_t i = 0;
  GEM_RETURN_IF_ERROR(integer_in_range(*kv, "i64", true, std::numeric_limits<int64_t>::min(),
                                       static_cast<uint64_t>(INT64_MAX), &u, &i));
  return i;
}

Result<float> GgufFile::get_f32(std::string_view key) const {
  const KeyValue* kv = find_kv(key);
  if (kv == nullptr) return missing(key);
  if (kv->type != ValueType::kF32 && kv->type != ValueType::kF64) {
    return wrong_type(*kv, "f32");
  }
  return static_cast<float>(kv->f64);
}

Result<bool> GgufFile::get_bool(std::string_view key) const {
  const KeyValue* kv = find_kv(key);
  if (kv == nullptr) return missing(key);
  if (kv->type != ValueType::kBool) return wrong_type(*kv, "bool");
  return kv->b;
}

Result<std::string_view> GgufFile::get_string(std::string_view key) const {
  const KeyValue* kv = find_kv(key);
  if (kv == nullptr) return missing(key);
  if (kv->type != ValueType::kString) return wrong_type(*kv, "string");
  return kv->str;
}

Result<std::vector<int64_t>> GgufFile::get_int_array(std::string_view key) const {
  const KeyValue* kv = find_kv(key);
  if (kv == nullptr) return missing(key);
  if (kv->type != ValueType::kArray || !is_integer_type(kv->array_type)) {
    return wrong_type(*kv, "array of integers");
  }
  const uint64_t esize = value_type_size(kv->array_type);
  std::vector<int64_t> out;
  out.reserve(kv->array_count);
  for (uint64_t k = 0; k < kv->array_count; ++k) {
    uint64_t u = 0;
    int64_t i = 0;
    load_integer(kv->array_type, kv->array_data + k * esize, &u, &i);
    if (kv->array_type == ValueType::kU64 && u > static_cast<uint64_t>(INT64_MAX)) {
      return errorf("key '%s': element #%" PRIu64 " = %" PRIu64 " does not fit i64",
                    printable(kv->key).c_str(), k, u);
    }
    out.push_back(i);
  }
  return out;
}

Result<std::vector<float>> GgufFile::get_f32_array(std::string_view key) const {
  const KeyValue* kv = find_kv(key);
  if (kv == nullptr) return missing(key);
  if (kv->type != ValueType::kArray ||
      (kv->array_type != ValueType::kF32 && kv->array_type != ValueType::kF64)) {
    return wrong_type(*kv, "array of f32");
  }
  std::vector<float> out;
  out.reserve(kv->array_count);
  for (uint64_t k = 0; k < kv->array_count; ++k) {
    out.push_back(kv->array_type == ValueType::kF32
                      ? load<float>(kv->array_data + k * 4)
                      : static_cast<float>(load<double>(kv->array_data + k * 8)));
  }
  return out;
}

Result<std::vector<bool>> GgufFile::get_bool_array(std::string_view key) const {
  const KeyValue* kv = find_kv(key);
  if (kv == nullptr) return missing(key);
  if (kv->type != ValueType::kArray || kv->array_type != ValueType::kBool) {
    return wrong_type(*kv, "array of bool");
  }
  std::vector<bool> out(kv->array_count);
  for (uint64_t k = 0; k < kv->array_count; ++k) out[k] = kv->array_data[k] != 0;
  return out;
}

Result<const std::vector<std::string_view>*> GgufFile::get_string_array(
    std::string_view key) const {
  const KeyValue* kv = find_kv(key);
  if (kv == nullptr) return missing(key);
  if (kv->type != ValueType::kArray || kv->array_type != ValueType::kString) {
    return wrong_type(*kv, "array of string");
  }
  return &kv->array_strings;
}

}  // namespace gem::gguf
