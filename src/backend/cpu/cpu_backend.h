// The CPU backend: Backend (backend.h) over ForwardCpu and the KV cache. Two flavours chosen by
// BackendOptions::reference: the plain scalar reference and the fast path (threads, SIMD
// matmuls). The weights stay in the model's mapping; the fast path on x86 adds a packed copy of
// the Q4_0/Q8_0 matrices at creation (packed.h; GEM_CPU_REPACK=0 leaves it out).
#pragma once

#include <cstdint>
#include <memory>

#include "backend/backend.h"
#include "backend/cpu/forward_cpu.h"
#include "base/status.h"
#include "model/model.h"

namespace gem::cpu {

// The model must outlive the backend. Fails on options it cannot honour (n_ctx, n_tile).
Result<std::unique_ptr<Backend>> make_cpu_backend(const model::Model& model,
                                                  const BackendOptions& options);

// Memory the CPU backend allocated at creation (for tests and `gem` diagnostics). nullopt-like
// zeros when `backend` is not a CPU backend.
struct CpuBackendMemory {
  uint64_t kv_bytes = 0;       // K+V storage (= model::kv_cache_bytes)
  uint64_t scratch_bytes = 0;  // activations of one tile, attention scratch
  uint64_t packed_bytes = 0;   // the packed weight copy (packed.h), 0 when none
};
CpuBackendMemory cpu_backend_memory(const Backend& backend);

// Read access to the KV cache of a CPU backend's sequence slot (the drafter's input; tests);
// null when `backend` is not a CPU backend or the slot does not exist.
const KvCache* cpu_backend_kv(const Backend& backend, int slot);

// Installs a checkpoint observer (forward_cpu.h TapFn) on a CPU backend; false when `backend` is
// not one. Rows passed to the tap are the current tile's, positions n_past() onwards.
bool set_cpu_backend_tap(Backend& backend, TapFn tap);

}  // namespace gem::cpu
