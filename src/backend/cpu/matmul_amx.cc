// AMX-INT8 matmul tiles over the 16-row interleaved layout (packed.h), for prompt-sized token
// ranges. Compiled with AMX target flags whatever the build's -march (CMakeLists.txt); called
// only when isa.cc found AMX-TILE/AMX-INT8, the OS's tile state (XCR0) and the process's
// permission to use it (Linux arch_prctl).
//
// The packed layout is already AMX's "VNNI" form of a B operand: one group-block of 16 rows is
// K/4 = 8 slices of 64 bytes, slice k holding elements 4k..4k+3 of each of the 16 rows. So per
// 32-value block, one TDPBSSD multiplies 16 tokens' signed q8 activations (an A tile
// read straight from the rounded x, row stride = cols) with 16 rows' weights (a B tile of 8
// slices) into 16 × 16 exact int32 block sums, the same integers the AVX-512 kernel builds with
// vpdpbusd. Each block's sums are then scaled exactly as there (acc += float(isum) · (d_w · d_x),
// block after block), so this path's output equals the AVX-512 packed kernel's bit for bit.
// Both types multiply signed by signed (TDPBSSD), so no offset correction is needed:
//   Q4_0: the nibbles are unpacked once per call into signed q - 8 (slice k & 0x0F for
//         elements 0..15, >> 4 for 16..31: the AVX-512 kernel's wv[]); Σ x·(q - 8) is what
//         that kernel's unsigned products plus its -8·Σx start value come to.
//   Q8_0: the packed bytes are the signed weights themselves, used in place; Σ x·w is what the
//         AVX-512 kernel's (w + 128) products minus 128·Σx come to.
// Token ranges shorter than a 16-token tile (decode, the tail of a range) go to the AVX-512
// kernel.
#include "backend/cpu/simd_kernels.h"

#ifdef GEM_CPU_X86

#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's AVX-512 headers self-initialise their "undefined" vectors (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstdlib>
#include <cstring>

#if !defined(__AMX_TILE__) || !defined(__AMX_INT8__) || !defined(__AVX512VNNI__)
#error "matmul_amx.cc needs its AMX-INT8 target flags (src/backend/cpu/CMakeLists.txt)"
#endif

namespace gem::cpu::detail {
namespace {

constexpr int kTileTokens = 16;

// The tile configuration (palette 1). In static storage: a configuration the compiler may
// build lazily on the stack has been seen to reach LDTILECFG incomplete (and the next tile
// instruction faults).
struct alignas(64) TileConfig {
  uint8_t palette_id;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};
// Tiles 0, 1: A (16 tokens × 32 int8); 2, 3: B (8 slices × 64 bytes); 4, 5: C (16 × 16 int32).
// Two of each: two blocks' products in flight.
constexpr TileConfig kConfig = {
    1, 0, {}, {32, 32, 64, 64, 64, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {16, 16, 8, 8, 16, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}};

// Blocks per pass: their int32 sums (1 KB each) stay in L1 between the tile pass that stores
// them and the vector pass that scales them. Measured on a Xeon with AMX (one thread, L2-resident
// operands): all of a 3840-wide row's sums in one buffer (120 KB, in L2) ran at 380 GOP per
// CPU-second, 8-block passes at 660 (4: 650, 16: 630, 24: 540); the AVX-512 VNNI kernel 220.
constexpr int kPassBlocks = 8;

// Per-thread scratch: the group's Q4_0 weights unpacked, and one pass's int32 sums. (No
// standard containers here: a template instantiated in this file would be compiled for AMX
// hosts and could be picked by the linker for every caller; tests/kernels_cpu/isa_objects_test.)
struct Scratch {
  uint8_t* w = nullptr;
  size_t w_bytes = 0;
  alignas(64) int32_t c[kPassBlocks * 256];
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() { std::free(w); }
  uint8_t* w_aligned(size_t bytes) {
    if (w_bytes < bytes) {
      std::free(w);
      w_bytes = (bytes + 63) / 64 * 64;
      w = static_cast<uint8_t*>(std::aligned_alloc(64, w_bytes));
      if (w == nullptr) std::abort();
    }
    return w;
  }
};

Scratch& scratch() {
  static thread_local Scratch s;
  return s;
}

// A 16-token tile against one group over every block, kPassBlocks blocks at a time in two
// passes: their tile products into c (one 16 × 16 int32 tile per block; two blocks in flight on
// tiles 4 and 5), then the scaling, acc[j] += float(isum) · (d_w · d_x) block after block, the
// AVX-512 kernel's operations in its order.
inline void tile_group(const int8_t* xq, long x_stride, const uint8_t* wt, const uint16_t* wd,
                       const QuantizedX& x, int t, int64_t nb, int32_t* c, float* out,
                       int64_t ldy) {
  __m512 acc[kTileTokens];
  for (int j = 0; j < kTileTokens; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t b0 = 0; b0 < nb; b0 += kPassBlocks) {
    const int64_t b1 = nb < b0 + kPassBlocks ? nb : b0 + kPassBlocks;
    for (int64_t b = b0; b < b1; b += 2) {
      _tile_zero(4);
      _tile_loadd(0, xq + 32 * b, x_stride);
      _tile_loadd(2, wt + 512 * b, 64);
      _tile_dpbssd(4, 0, 2);
      if (b + 1 < b1) {
        _tile_zero(5);
        _tile_loadd(1, xq + 32 * (b + 1), x_stride);
        _tile_loadd(3, wt + 512 * (b + 1), 64);
        _tile_dpbssd(5, 1, 3);
        _tile_stored(4, c + 256 * (b - b0), 64);
        _tile_stored(5, c + 256 * (b + 1 - b0), 64);
      } else {
        _tile_stored(4, c + 256 * (b - b0), 64);
      }
    }
    for (int64_t b = b0; b < b1; ++b) {
      const __m512 dw = _mm512_cvtph_ps(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wd + b * kPackRows)));
      const int32_t* cb = c + 256 * (b - b0);
      for (int j = 0; j < kTileTokens; ++j) {
        const __m512 s = _mm512_cvtepi32_ps(_mm512_load_si512(cb + 16 * j));
        acc[j] = _mm512_fmadd_ps(s, _mm512_mul_ps(dw, _mm512_set1_ps(x.d[(t + j) * nb + b])),
                                 acc[j]);
      }
    }
  }
  for (int j = 0; j < kTileTokens; ++j) _mm512_storeu_ps(out + j * ldy, acc[j]);
}

template <bool kQ4>
void amx_tile(const PackedMatrix& w, const QuantizedX& x, int64_t g0, int64_t g1, int t0, int t1,
              float* y, int64_t ldy) {
  const int n_full = (t1 - t0) / kTileTokens * kTileTokens;
  if (n_full > 0) {
    const int64_t nb = x.n_blocks;
    Scratch& sc = scratch();
    uint8_t* u = kQ4 ? sc.w_aligned(static_cast<size_t>(nb) * 512) : nullptr;
    _tile_loadconfig(&kConfig);
    for (int64_t g = g0; g < g1; ++g) {
      const uint8_t* wg = w.qs + g * nb * w.group_block_bytes();
      const uint16_t* wd = w.d + g * nb * kPackRows;
      const uint8_t* wt = wg;  // the signed B slices of block b: wt + 512·b
      if constexpr (kQ4) {
        // The group's nibbles as signed q - 8, once for every token tile of the range.
        const __m512i m4 = _mm512_set1_epi8(0x0F), eight = _mm512_set1_epi8(8);
        for (int64_t b = 0; b < nb; ++b) {
          for (int k = 0; k < 4; ++k) {
            const __m512i v = _mm512_loadu_si512(wg + b * 256 + 64 * k);
            _mm512_store_si512(u + b * 512 + 64 * k,
                               _mm512_sub_epi8(_mm512_and_si512(v, m4), eight));
            _mm512_store_si512(
                u + b * 512 + 256 + 64 * k,
                _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(v, 4), m4), eight));
          }
        }
        wt = u;
      }
      for (int t = t0; t < t0 + n_full; t += kTileTokens) {
        tile_group(x.qs + static_cast<int64_t>(t) * x.cols, static_cast<long>(x.cols), wt, wd, x, t,
                   nb, sc.c, y + t * ldy + g * kPackRows, ldy);
      }
    }
    _tile_release();  // the thread's tile state back to init (cheaper context switches)
  }
  if (t0 + n_full < t1) {
    avx512_packed_fn(kQ4 ? DType::kQ4_0 : DType::kQ8_0)(w, x, g0, g1, t0 + n_full, t1, y, ldy);
  }
}

}  // namespace

PackedTileFn amx_packed_fn(DType t) {
  switch (t) {
    case DType::kQ4_0: return amx_tile<true>;
    case DType::kQ8_0: return amx_tile<false>;
    default: return nullptr;
  }
}

}  // namespace gem::cpu::detail

#endif  // GEM_CPU_X86
