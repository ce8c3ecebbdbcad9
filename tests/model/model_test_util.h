// Helpers for the model tests: synthetic sparse 12B/31B files from gem's synth writer, and a
// rewriter that copies a GGUF with edited metadata or tensors (for the rejection cases).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "gguf/gguf.h"
#include "gguf/writer.h"
#include "model/model.h"
#include "model/synth.h"

namespace gem::test {

// The vocabulary shipped in data/ (the tokenizer every synthetic model copies).
std::string vocab_path();
// That file, opened once per process (parsing it is not free).
const gguf::GgufFile* shared_vocab();

// Writes (once per process) a sparse synthetic model of `profile` ("12b", "31b") with the given
// embedding type and returns its path: real header, small F32 vectors written, matrices a hole.
std::string sparse_model(const std::string& profile, DType embd_type = DType::kQ8_0);

// Copies `src` to `dst` (sparse for big tensors, small ones copied for real). `edit_kv` may add
// its own replacement for a key and return true to drop the original; `edit_tensors` may change
// the tensor list (name, type, ne) before writing.
struct TensorDesc {
  std::string name;
  DType type;
  std::vector<uint64_t> ne;
  const uint8_t* src = nullptr;  // bytes to copy when the size is unchanged (null: zeros)
  uint64_t src_bytes = 0;
};
using KvEdit = std::function<bool(const gguf::KeyValue& kv, gguf::GgufWriter& w)>;
using TensorEdit = std::function<void(std::vector<TensorDesc>& tensors)>;
void rewrite_gguf(const gguf::GgufFile& src, const std::string& dst, const KvEdit& edit_kv,
                  const TensorEdit& edit_tensors);

// load_model's error message for `path` ("" when it loads).
std::string load_error(const std::string& path);

}  // namespace gem::test
