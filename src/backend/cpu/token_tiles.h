// Internal to the x86 kernel files: the token-tile loop every packed kernel runs over one unit,
// and (with GEM_CPU_SIMD256_HELPERS defined) the small 256-bit helpers of the AVX2-class files. Everything has
// internal linkage (an anonymous namespace), so each kernel file compiles its own copy for its
// own instruction set and shares no symbol (isa_objects_test.sh).
#pragma once

#if defined(GEM_CPU_SIMD256_HELPERS)
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#endif

namespace gem::cpu::detail {
namespace {

// micro.template operator()<T>(t, first) over tokens [t0, t1): 4-token tiles, then a remainder
// of 3, 2 or 1; `first` is true for the unit's first tile (the one that streams its weights).
template <class Micro>
inline void token_tiles(int t0, int t1, Micro&& micro) {
  int t = t0;
  for (; t + 4 <= t1; t += 4) micro.template operator()<4>(t, t == t0);
  const bool first = t == t0;
  switch (t1 - t) {
    case 3: micro.template operator()<3>(t, first); break;
    case 2: micro.template operator()<2>(t, first); break;
    case 1: micro.template operator()<1>(t, first); break;
    default: break;
  }
}

// The 256-bit helpers, for the files whose vectors are 256 bits wide (AVX2, AVX-VNNI).
#if defined(GEM_CPU_SIMD256_HELPERS)
inline __m256i loadu256(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

// The 4 int8 at p broadcast to every 32-bit lane.
inline __m256i bcast32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}
#endif

}  // namespace
}  // namespace gem::cpu::detail
