// Internal to the CPU matmul: the rounded-activation layout shared by every kernel, and the
// per-ISA tile functions (matmul.cc: scalar; matmul_avx2.cc: AVX2; matmul_avxvnni.cc: AVX2 with
// AVX-VNNI; matmul_avx512.cc: AVX-512 VNNI; matmul_neon.cc). The x86 kernel files are compiled with their own target flags
// (src/backend/cpu/CMakeLists.txt) and called only after isa.cc has checked CPUID, so they must
// not define anything that other files call without that check: everything they define lives
// in an anonymous namespace except the entry points declared here.
#pragma once

#include <cstdint>

#include "backend/cpu/packed.h"
#include "model/model.h"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define GEM_CPU_X86 1
#endif
#if defined(__aarch64__) && defined(__ARM_NEON)
#define GEM_CPU_NEON 1
#endif

namespace gem::cpu::detail {

// Blocks b = 2p and b + 1 of one token, laid out for a 32-byte register that holds the 16
// nibble bytes of weight block b in its low lane and those of block b + 1 in its high lane:
// lo pairs with the low nibbles (elements 0..15), hi with the high nibbles (16..31). corr is
// 8·Σ q over a block (lane 0: block b, lane 4: block b + 1, other lanes 0), so that
// Σ (nib - 8)·q = Σ nib·q - corr exactly. d is d_x per lane. When n_blocks is odd, the last
// record's block b + 1 is all zeros (q, corr and d).
struct alignas(32) Q4PairX {
  int8_t lo[32];    // q_b[0..15], q_b+1[0..15]
  int8_t hi[32];    // q_b[16..31], q_b+1[16..31]
  int32_t corr[8];  // 8·Σq_b, 0, 0, 0, 8·Σq_b+1, 0, 0, 0
  float d[8];       // d_b ×4, d_b+1 ×4
};

// x after the fast path's rounding (see matmul.h), n_tokens rows of `cols`.
//   F32 weights:        only xf is set.
//   Q4_0/Q8_0 weights:  qs [n_tokens, cols] int8; d [n_tokens, cols/32] f32 (fp16-rounded);
//                       neg_corr [n_tokens, cols/32] int32 = -8·Σq (Q4_0) or -128·Σq (Q8_0)
//                       per block: the packed kernels' integer offset (packed.h).
//   Q6_K weights:       qs [n_tokens, cols] int8; d [n_tokens, cols/256] f32;
//                       bsums [n_tokens, cols/16] int16 (sum of qs over each 16-value group);
//                       neg_corr [n_tokens, cols/16] int32 = -32·bsum (the packed kernel's).
struct QuantizedX {
  int64_t cols = 0;
  int64_t n_blocks = 0;  // d entries per token
  const float* xf = nullptr;
  const int8_t* qs = nullptr;
  const float* d = nullptr;
  const int16_t* bsums = nullptr;
  const int32_t* neg_corr = nullptr;
  // The AVX2 Q4_0 tile on the file's layout: the same rounded x once more, as block-pair
  // records, [n_tokens][n_pairs] with n_pairs = ceil(n_blocks / 2).
  const Q4PairX* q4_pairs = nullptr;
  int64_t n_pairs = 0;
};

// y[t * ldy + r] = (W x_t)[r] for rows r in [r0, r1) and tokens t in [t0, t1).
using TileFn = void (*)(const model::TensorView& w, const QuantizedX& x, int64_t r0, int64_t r1,
                        int t0, int t1, float* y, int64_t ldy);
// The same over a packed matrix, rows [16·g0, 16·g1).
using PackedTileFn = void (*)(const PackedMatrix& w, const QuantizedX& x, int64_t g0, int64_t g1,
                              int t0, int t1, float* y, int64_t ldy);
// One token's 32-value blocks rounded as quantize_block32 (matmul.cc) does, bit for bit.
using QuantizeFn = void (*)(const float* x, int64_t n_blocks, int8_t* q, float* d);

TileFn scalar_tile_fn(DType t);  // never null for the supported types
#ifdef GEM_CPU_X86
TileFn avx2_tile_fn(DType t);            // the file's layout (Q4_0 reads Q4PairX records)
PackedTileFn avx2_packed_fn(DType t);    // Q4_0, Q8_0, Q6_K; else null
void avx2_quantize_q8(const float* x, int64_t n_blocks, int8_t* q, float* d);
PackedTileFn avxvnni_packed_fn(DType t);  // Q4_0, Q8_0 (256-bit vpdpbusd); else null
PackedTileFn avx512_packed_fn(DType t);  // Q4_0, Q8_0, Q6_K; else null
PackedTileFn amx_packed_fn(DType t);     // Q4_0, Q8_0 (AMX-INT8 tiles); else null
#endif
#ifdef GEM_CPU_NEON
TileFn neon_tile_fn(DType t);
#endif

}  // namespace gem::cpu::detail
