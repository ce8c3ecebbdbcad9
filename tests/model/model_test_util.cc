// Helpers for the model tests (see model_test_util.h).
#include "model/model_test_util.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <map>
#include <mutex>

#include "common/test_util.h"

namespace gem::test {

std::string vocab_path() { return source_dir() + "/data/gemma4-vocab.gguf"; }

const gguf::GgufFile* shared_vocab() {
  static std::unique_ptr<gguf::GgufFile> vocab = [] {
    auto f = gguf::GgufFile::open(vocab_path());
    EXPECT_TRUE(f.ok()) << f.message();
    return f.ok() ? std::move(f).value() : nullptr;
  }();
  return vocab.get();
}

std::string sparse_model(const std::string& profile, DType embd_type) {
  static std::mutex mu;
  static std::map<std::string, std::string> made;
  std::lock_guard<std::mutex> lock(mu);
  const std::string key = profile + "/" + std::string(dtype_name(embd_type));
  if (auto it = made.find(key); it != made.end()) return it->second;
  auto geometry = model::synth_geometry(profile);
  EXPECT_TRUE(geometry.ok()) << geometry.message();
  model::SynthOptions opt;
  opt.geometry = *geometry;
  opt.embd_type = embd_type;
  opt.sparse = true;
  const gguf::GgufFile* vocab = shared_vocab();
  EXPECT_TRUE(vocab);
  const std::string path = temp_dir() + "/sparse-" + profile + "-" + std::string(dtype_name(embd_type)) + ".gguf";
  auto s = model::write_synth_model(opt, *vocab, path);
  EXPECT_TRUE(s.ok()) << s.message();
  made[key] = path;
  return path;
}

void rewrite_gguf(const gguf::GgufFile& src, const std::string& dst, const KvEdit& edit_kv,
                  const TensorEdit& edit_tensors) {
  gguf::GgufWriter w;
  for (const gguf::KeyValue& kv : src.kvs()) {
    if (edit_kv && edit_kv(kv, w)) continue;
    w.add_kv_copy(kv);
  }
  std::vector<TensorDesc> tensors;
  for (const gguf::TensorInfo& t : src.tensors()) {
    tensors.push_back({std::string(t.name), t.type, std::vector<uint64_t>(t.ne, t.ne + t.n_dims), t.data, t.n_bytes});
  }
  if (edit_tensors) edit_tensors(tensors);
  for (const TensorDesc& t : tensors) {
    const uint8_t* data = t.src;
    const uint64_t n = t.src_bytes;
    w.add_tensor(t.name, t.type, t.ne, [data, n](uint64_t off, std::span<uint8_t> out) {
      if (data && off + out.size() <= n) {
        std::memcpy(out.data(), data + off, out.size());
      } else {
        std::memset(out.data(), 0, out.size());
      }
    });
  }
  // Sparse write, then the small tensors (norms, scales, rope_freqs) copied for real.
  Status s = w.write(dst, {}, /*sparse_data=*/true);
  ASSERT_TRUE(s.ok()) << s.message();
  // Offsets as the writer lays them out: in order, each padded to the alignment (32).
  const int fd = ::open(dst.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  uint64_t off = w.data_offset();
  for (const TensorDesc& t : tensors) {
    uint64_t n = 1;
    for (uint64_t d : t.ne) n *= d;
    const uint64_t n_bytes = dtype_row_bytes(*dtype_info(static_cast<uint32_t>(t.type)), n);
    if (t.src && n_bytes == t.src_bytes && n_bytes <= (1u << 20)) {
      ASSERT_EQ(::pwrite(fd, t.src, n_bytes, static_cast<off_t>(off)), static_cast<ssize_t>(n_bytes));
    }
    off += (n_bytes + 31) / 32 * 32;
  }
  ASSERT_EQ(off, w.file_size());
  ::close(fd);
}

std::string load_error(const std::string& path) {
  auto m = model::load_model(path);
  return m.ok() ? std::string() : m.message();
}

}  // namespace gem::test
