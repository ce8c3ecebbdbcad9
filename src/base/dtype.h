// DType: ggml storage types as GGUF numbers them, with their block geometry; fp16/bf16 conversions.
// The numbering is the GGUF on-disk contract (ggml_type); gem computes with a few of them only,
// but the reader must know every block size to check tensor extents.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace gem {

enum class DType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
};

struct DTypeInfo {
  std::string_view name;   // "Q4_0"
  uint32_t block_elems;    // weights per block (1 for plain types)
  uint32_t block_bytes;    // bytes per block
};

// Geometry of a known type; nullopt for numbers GGUF does not define.
std::optional<DTypeInfo> dtype_info(uint32_t raw);
std::string_view dtype_name(DType t);  // "Q4_0"; "?" when unknown

// Bytes of one row of n elements; requires n % block_elems == 0.
inline uint64_t dtype_row_bytes(const DTypeInfo& info, uint64_t n) {
  return n / info.block_elems * info.block_bytes;
}

// Block layouts gem computes with (spec §1).
constexpr int kQK4_0 = 32;
constexpr int kQK8_0 = 32;
constexpr int kQK_K = 256;
struct BlockQ4_0 {
  uint16_t d;       // fp16 scale
  uint8_t qs[16];   // low nibbles: weights 0..15, high nibbles: weights 16..31
};
struct BlockQ8_0 {
  uint16_t d;       // fp16 scale
  int8_t qs[32];
};
struct BlockQ6_K {
  uint8_t ql[128];  // low 4 bits
  uint8_t qh[64];   // high 2 bits
  int8_t scales[16];
  uint16_t d;       // fp16 super-block scale
};
static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ6_K) == 210);

// Q6_K element i of a super-block: code = 4 low bits (ql) | 2 high bits (qh) << 4, in 0..63, with
// scale sc[i/16]; the value is d·sc·(code - 32). Within each 128-value half h: element
// 128h + 32k + l (k = 0..3, l = 0..31) takes its low bits from ql[64h + 32(k&1) + l] (low nibble
// for k < 2, high for k >= 2) and its high bits from qh[32h + l] bits 2k..2k+1.
inline int q6k_code(const BlockQ6_K& b, int i) {
  const int h = i / 128, k = (i % 128) / 32, l = i % 32;
  const uint8_t lo = b.ql[64 * h + 32 * (k & 1) + l];
  const int low = k < 2 ? (lo & 0x0F) : (lo >> 4);
  const int high = (b.qh[32 * h + l] >> (2 * k)) & 3;
  return low | high << 4;
}

// IEEE half <-> float, exact in both directions for representable values (round-to-nearest-even
// on the way down).
float fp16_to_f32(uint16_t h);
uint16_t f32_to_fp16(float f);

inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
uint16_t f32_to_bf16(float f);  // round-to-nearest-even, NaN kept quiet

}  // namespace gem
