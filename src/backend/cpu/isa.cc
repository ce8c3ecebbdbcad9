// CPU feature detection and the kernel path choice (isa.h). The only place that reads CPUID or
// GEM_CPU_ISA.
#include "backend/cpu/isa.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "backend/cpu/simd_kernels.h"

namespace gem::cpu {
namespace {

struct Features {
  bool avx2 = false, fma = false, f16c = false, avx_vnni = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512vnni = false, avx512bf16 = false;
  bool amx_int8 = false;  // AMX-TILE + AMX-INT8 reported by the CPU
  bool amx_usable = false;  // ... and the OS saves tile state and let this process use it
};

#if defined(GEM_CPU_X86)
// AMX's tile data is an XSAVE feature the OS enables (XCR0 bits 17, 18) and, on Linux, hands to
// a process only on request (arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA; process-wide, so
// every thread may then use it). Without both, the first tile instruction faults.
bool amx_os_ready() {
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if (((lo >> 17) & 3) != 3) return false;
#if defined(__linux__)
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}
#endif

Features detect() {
  Features f;
#if defined(GEM_CPU_X86)
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  // F16C has no __builtin_cpu_supports name in GCC 12: CPUID leaf 1, ECX bit 29.
  unsigned a, b, c, d;
  __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(1), "c"(0));
  f.f16c = (c >> 29) & 1;
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512vl = __builtin_cpu_supports("avx512vl");
  f.avx512vnni = __builtin_cpu_supports("avx512vnni");
  // AVX512_BF16: CPUID leaf 7 sub-leaf 1, EAX bit 5 (reported only; no kernel uses it).
  __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(1));
  f.avx512bf16 = (a >> 5) & 1;
  f.avx_vnni = (a >> 4) & 1;  // AVX-VNNI: the same sub-leaf, EAX bit 4
  // AMX-TILE and AMX-INT8: CPUID leaf 7 sub-leaf 0, EDX bits 24 and 25; OSXSAVE: leaf 1 ECX 27.
  __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(1), "c"(0));
  const bool osxsave = (c >> 27) & 1;
  __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(0));
  f.amx_int8 = ((d >> 24) & 1) && ((d >> 25) & 1);
  f.amx_usable = f.amx_int8 && osxsave && amx_os_ready();
#endif
  return f;
}

const Features& features() {
  static const Features f = detect();
  return f;
}

Isa best_supported() {
  for (Isa i : {Isa::kAmx, Isa::kAvx512, Isa::kAvxVnni, Isa::kAvx2, Isa::kNeon}) {
    if (isa_supported(i)) return i;
  }
  return Isa::kScalar;
}

Isa choose() {
  const Isa best = best_supported();
  const char* env = std::getenv("GEM_CPU_ISA");
  if (env == nullptr || env[0] == '\0') return best;
  const std::string want = env;
  for (Isa i : kAllIsas) {
    if (want == isa_name(i)) {
      if (isa_supported(i)) return i;
      std::fprintf(stderr, "gem: GEM_CPU_ISA=%s is not supported on this CPU/binary; using %s\n",
                   env, std::string(isa_name(best)).c_str());
      return best;
    }
  }
  std::fprintf(stderr, "gem: GEM_CPU_ISA=%s is not one of scalar, neon, avx2, avxvnni, avx512, amx; "
               "using %s\n",
               env, std::string(isa_name(best)).c_str());
  return best;
}

}  // namespace

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kNeon: return "neon";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvxVnni: return "avxvnni";
    case Isa::kAvx512: return "avx512";
    case Isa::kAmx: return "amx";
  }
  return "?";
}

bool isa_supported(Isa isa) {
  const Features& f = features();
  switch (isa) {
    case Isa::kScalar:
      return true;
    case Isa::kNeon:
#if defined(GEM_CPU_NEON)
      return true;
#else
      return false;
#endif
    case Isa::kAvx2:
#if defined(GEM_CPU_X86)
      return f.avx2 && f.fma && f.f16c;
#else
      return false;
#endif
    case Isa::kAvxVnni:
      return isa_supported(Isa::kAvx2) && f.avx_vnni;
    case Isa::kAvx512:
#if defined(GEM_CPU_X86)
      return f.avx2 && f.fma && f.f16c && f.avx512f && f.avx512bw && f.avx512vl && f.avx512vnni;
#else
      return false;
#endif
    case Isa::kAmx:
      return isa_supported(Isa::kAvx512) && f.amx_usable;
  }
  return false;
}

Isa active_isa() {
  static const Isa isa = choose();
  return isa;
}

std::string isa_description() {
  const Features& f = features();
  std::string s(isa_name(active_isa()));
  s += " (cpu:";
#if defined(GEM_CPU_X86)
  if (f.avx2) s += " avx2";
  if (f.fma) s += " fma";
  if (f.f16c) s += " f16c";
  if (f.avx_vnni) s += " avx-vnni";
  if (f.avx512f) s += " avx512f";
  if (f.avx512bw) s += " avx512bw";
  if (f.avx512vl) s += " avx512vl";
  if (f.avx512vnni) s += " avx512vnni";
  if (f.avx512bf16) s += " avx512bf16";
  if (f.amx_int8) s += f.amx_usable ? " amx-int8" : " amx-int8(not enabled by the OS)";
#elif defined(GEM_CPU_NEON)
  s += " neon";
#else
  s += " no simd";
#endif
  (void)f;
  s += ")";
  if (const char* env = std::getenv("GEM_CPU_ISA"); env != nullptr && env[0] != '\0') {
    s += " GEM_CPU_ISA=";
    s += env;
  }
  return s;
}

}  // namespace gem::cpu
