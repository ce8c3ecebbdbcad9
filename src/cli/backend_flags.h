// Flags shared by the subcommands that run the model (run, serve, bench): which backend,
// context, KV type, threads, prompt tile; and the one function that turns them into a backend.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "base/status.h"
#include "model/model.h"

namespace gem::cli {

// The KV-cache storage every command that serves or measures the model uses unless told otherwise:
// f16, as llama.cpp and llama-server (half the bytes of f32 and the tensor-core attention path on
// CUDA). One default for serve, agent, run, bench and inspect, so that a server and the benchmark
// of the same model at the same depth run the same kernels.
inline constexpr const char* kDefaultKvType = "f16";

struct BackendFlags {
  std::string backend = "auto";   // auto | cpu | cuda
  int n_ctx = 0;                  // 0: min(training context, 32768)
  std::string kv_type = kDefaultKvType;
  std::string cache_type_k, cache_type_v;  // llama.cpp's names for kv_type (resolve_cache_types)
  int n_threads = 0;
  int n_tile = 256;
  bool reference = false;
  int n_slots = 1;                // sequence slots (gem serve -np)
};

void add_backend_flags(CLI::App& app, BackendFlags& flags);

// A flag's comma-separated list of integers, each at least min_value (gem bench's -p/-n/-d,
// gem profile's --rows); the error names the flag and the item.
Result<std::vector<int>> parse_int_list(const char* flag, const std::string& s, int min_value);

// llama.cpp's -ctk/--cache-type-k and -ctv/--cache-type-v against gem's one KV type: K and V are
// stored in the same type, so the two must agree (and agree with --kv-type when that was given
// too); f32, f16 and f16-full exist, and llama.cpp's quantised types (q8_0, q4_0, ...) are an
// error naming those. Empty strings: not given. Writes the resolved type into *kv_type.
Status resolve_cache_types(const std::string& cache_type_k, const std::string& cache_type_v,
                           bool kv_type_given, std::string* kv_type);

// Resolves "auto" (CUDA when a GPU is present and the build has it) and creates the backend.
// With n_slots 0 the slots are chosen from memory (default_slots).
Result<std::unique_ptr<Backend>> make_backend(const model::Model& model, const BackendFlags& flags);

// gem serve's default -np: on CUDA kDefaultSlotsCuda sequence slots, halved while the backend
// cannot allocate their caches (the device's memory decides: at 32K context with the f16 cache
// a slot is about 0.9 GiB on the 12B and 3.3 GiB on the 31B, so 8 fit beside either on an
// H200); 8 keeps a main conversation and four subagents (and three more) each in its own slot.
// On the CPU one (a reference backend on shared cores; the server then runs exactly as a
// one-slot server). *n_slots gets the number used.
inline constexpr int kDefaultSlotsCuda = 8;
// The most sequence slots -np/--parallel takes (gem serve runs a worker per slot; the batched
// passes hold at most this many rows of one step).
inline constexpr int kMaxSlots = 256;
Result<std::unique_ptr<Backend>> make_backend_default_slots(const model::Model& model,
                                                            BackendFlags flags, int* n_slots);

}  // namespace gem::cli
