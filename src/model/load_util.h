// Shared by the loaders of gem's two GGUF kinds (model.cc: the Gemma 4 target; assistant.cc: the
// MTP assistant): a tensor's view, and one manifest entry's checks against the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"
#include "gguf/gguf.h"
#include "model/model.h"

namespace gem::model {

// "[3840, 262144]": a shape as the messages print it.
std::string shape_str(const uint64_t* ne, size_t n);

// The tensor's bytes and shape as the backends read them.
TensorView view_of(const gguf::TensorInfo& t);

// Entry e's tensor t (present) has e's shape, an accepted dtype (dtype_ok; `accepted` names the
// accepted ones in the message) and whole blocks per row.
Status check_entry(const gguf::TensorInfo& t, const ManifestEntry& e, bool dtype_ok,
                   std::string_view accepted);

}  // namespace gem::model
