// libFuzzer target: any byte string given to GgufFile::parse must give a Status or a file whose
// every accessor, tensor view and decodable row stays in bounds; a parsed file rewritten by
// GgufWriter must parse again with the same contents.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "base/quant.h"
#include "gguf/gguf.h"
#include "gguf/writer.h"
#ifdef GEM_FUZZ_MODEL
#include "model/model.h"
#endif

namespace {

using gem::gguf::GgufFile;
using gem::gguf::KeyValue;
using gem::gguf::TensorInfo;

// Keeps results observable so the calls are not optimised away.
volatile uint64_t g_sink = 0;
void sink(uint64_t v) { g_sink = g_sink + v; }

void touch_kv(const GgufFile& f, const KeyValue& kv) {
  // Every getter on every key: wrong types must come back as errors, never crash.
  const std::string_view key = kv.key;
  if (auto r = f.get_u32(key); r.ok()) sink(*r);
  if (auto r = f.get_u64(key); r.ok()) sink(*r);
  if (auto r = f.get_i64(key); r.ok()) sink(static_cast<uint64_t>(*r));
  if (auto r = f.get_f32(key); r.ok()) sink(static_cast<uint64_t>(*r != 0.0f));
  if (auto r = f.get_bool(key); r.ok()) sink(*r);
  if (auto r = f.get_string(key); r.ok()) {
    for (char c : *r) sink(static_cast<uint8_t>(c));
  }
  if (auto r = f.get_int_array(key); r.ok()) sink(r->size());
  if (auto r = f.get_f32_array(key); r.ok()) sink(r->size());
  if (auto r = f.get_bool_array(key); r.ok()) sink(r->size());
  if (auto r = f.get_string_array(key); r.ok()) {
    for (std::string_view s : **r) {
      if (!s.empty()) sink(static_cast<uint8_t>(s.front()) + static_cast<uint8_t>(s.back()));
    }
  }
  if (f.find_kv(key) != &kv) __builtin_trap();  // the index must point at this entry
}

void touch_tensor(const GgufFile& f, const TensorInfo& t) {
  if (f.find_tensor(t.name) != &t || !f.get_tensor(t.name).ok()) __builtin_trap();
  // First and last byte of the extent (ASan checks the view lies inside the input buffer).
  sink(t.data[0] + t.data[t.n_bytes - 1]);
  if (gem::can_dequantize(t.type) && t.ne[0] <= (1u << 16)) {
    std::vector<float> row(t.ne[0]);
    gem::dequantize_row(t.type, t.data, row.data(), static_cast<int64_t>(t.ne[0]));
    sink(row.empty() ? 0 : static_cast<uint64_t>(row[0] == row[0]));
  }
}

// Rewrites the parsed file and parses it again: the writer must produce what the reader accepts.
void round_trip(const GgufFile& f) {
  uint64_t total = 0;
  for (const TensorInfo& t : f.tensors()) total += t.n_bytes + f.alignment();
  if (f.alignment() > 4096 || total > (1u << 20)) return;  // keep the fuzzer fast
  gem::gguf::GgufWriter w(f.version(), f.alignment());
  for (const KeyValue& kv : f.kvs()) {
    if (kv.key != "general.alignment") w.add_kv_copy(kv);  // the writer adds it itself
  }
  for (const TensorInfo& t : f.tensors()) {
    std::vector<uint64_t> ne(t.ne, t.ne + t.n_dims);
    w.add_tensor_bytes(t.name, t.type, ne, std::vector<uint8_t>(t.data, t.data + t.n_bytes));
  }
  const std::vector<uint8_t> bytes = w.to_bytes();
  auto g = GgufFile::parse(bytes.data(), bytes.size(), "rewritten");
  if (!g.ok()) __builtin_trap();
  // The writer writes general.alignment only when it is not the default 32.
  const bool dropped_alignment = f.find_kv("general.alignment") != nullptr && f.alignment() == 32;
  if ((*g)->kvs().size() + (dropped_alignment ? 1 : 0) != f.kvs().size()) __builtin_trap();
  if ((*g)->alignment() != f.alignment()) __builtin_trap();
  if ((*g)->tensors().size() != f.tensors().size()) __builtin_trap();
  for (size_t k = 0; k < f.tensors().size(); ++k) {
    const TensorInfo& a = f.tensors()[k];
    const TensorInfo& b = (*g)->tensors()[k];
    if (a.name != b.name || a.type != b.type || a.n_bytes != b.n_bytes ||
        std::memcmp(a.data, b.data, a.n_bytes) != 0) {
      __builtin_trap();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto parsed = GgufFile::parse(data, size, "fuzz.gguf");
  if (!parsed.ok()) {
    sink(parsed.message().size());
    return 0;
  }
  const GgufFile& f = **parsed;
  for (const KeyValue& kv : f.kvs()) touch_kv(f, kv);
  for (const TensorInfo& t : f.tensors()) touch_tensor(f, t);
  round_trip(f);
#ifdef GEM_FUZZ_MODEL
  auto model = gem::model::load_model(std::move(parsed).value());
  sink(model.ok() ? 1 : model.message().size());
#endif
  return 0;
}
