// Which SIMD kernels the CPU backend runs: chosen once per process from CPUID (the one place),
// optionally lowered by GEM_CPU_ISA for benchmarking (`avx2` or `avxvnni` on an AVX-512 host,
// `scalar` anywhere). Every kernel file is compiled for its own instruction set (per-file target flags),
// so one binary carries all the x86 paths and runs the best one the host has.
#pragma once

#include <string_view>

namespace gem::cpu {

enum class Isa {
  kScalar,   // plain C++ (the portable path)
  kNeon,     // aarch64 NEON (+ dotprod where compiled)
  kAvx2,     // AVX2 + FMA + F16C
  kAvxVnni,  // kAvx2, with AVX-VNNI's 256-bit vpdpbusd for the packed Q4_0/Q8_0 products
  kAvx512,   // AVX-512 F/BW/VL + VNNI (+ FMA, F16C)
  kAmx,      // kAvx512, with AMX-INT8 tiles for the products of prompt-sized token ranges
};

// Every path, from the plainest to the widest (what the tests walk).
inline constexpr Isa kAllIsas[] = {Isa::kScalar, Isa::kNeon, Isa::kAvx2, Isa::kAvxVnni,
                                   Isa::kAvx512, Isa::kAmx};

// "scalar", "neon", "avx2", "avxvnni", "avx512", "amx".
std::string_view isa_name(Isa isa);

// True when this binary has the kernels of `isa` and this CPU can run them.
bool isa_supported(Isa isa);

// The path the CPU kernels run (matmul and the fast ops of ops_fast.h): the best supported one,
// or GEM_CPU_ISA=scalar|avx2|avxvnni|avx512|amx|neon when that one is supported (an unsupported or unknown
// value is reported once on stderr and ignored). Read once, on the first call.
Isa active_isa();

// A one-line description for `gem inspect` / `gem bench -v`: the active path, what the CPU
// reports, and the override if one is set, e.g. "avx512 (cpu: avx2 avx512f/bw/vl avx512vnni
// avx512bf16)".
std::string isa_description();

}  // namespace gem::cpu
