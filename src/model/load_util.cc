// The loaders' shared checks (see load_util.h).
#include "model/load_util.h"

namespace gem::model {

std::string shape_str(const uint64_t* ne, size_t n) {
  std::string s = "[";
  for (size_t i = 0; i < n; ++i) {
    if (i) s += ", ";
    s += std::to_string(ne[i]);
  }
  return s + "]";
}

TensorView view_of(const gguf::TensorInfo& t) {
  TensorView v;
  v.name = t.name;
  v.type = t.type;
  v.data = t.data;
  v.cols = static_cast<int64_t>(t.ne[0]);
  v.rows = t.n_dims >= 2 ? static_cast<int64_t>(t.ne[1]) : 1;
  v.n_bytes = t.n_bytes;
  return v;
}

Status check_entry(const gguf::TensorInfo& t, const ManifestEntry& e, bool dtype_ok,
                   std::string_view accepted) {
  const std::string got = shape_str(t.ne, t.n_dims);
  const std::string want = shape_str(e.ne.data(), e.ne.size());
  if (got != want) {
    return errorf("tensor %s: shape %s, expected %s", e.name.c_str(), got.c_str(), want.c_str());
  }
  const std::string_view tn = dtype_name(t.type);
  if (!dtype_ok) {
    return errorf("tensor %s: dtype %.*s, gem accepts %.*s", e.name.c_str(),
                  static_cast<int>(tn.size()), tn.data(), static_cast<int>(accepted.size()),
                  accepted.data());
  }
  auto info = dtype_info(static_cast<uint32_t>(t.type));
  if (!info || t.ne[0] % info->block_elems) {
    return errorf("tensor %s: row of %llu values is not a whole number of %.*s blocks",
                  e.name.c_str(), static_cast<unsigned long long>(t.ne[0]),
                  static_cast<int>(tn.size()), tn.data());
  }
  return ok_status();
}

}  // namespace gem::model
