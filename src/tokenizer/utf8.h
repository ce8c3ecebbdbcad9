// Strict UTF-8 helpers shared by the encoder (splitting text into characters) and the streaming
// decoder (holding back unfinished sequences). "Strict" = RFC 3629: no overlong forms, no
// surrogates, nothing above U+10FFFF.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gem::utf8 {

// Length of the valid UTF-8 sequence starting at s[0] (1..4), or 0 when the bytes there do not
// start a valid sequence (including a sequence cut short by n). *cp receives the code point.
inline size_t decode(const uint8_t* s, size_t n, uint32_t* cp) {
  const uint8_t b0 = s[0];
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  if (b0 < 0xC2) return 0;  // continuation byte or overlong 2-byte lead
  if (b0 < 0xE0) {
    if (n < 2 || (s[1] & 0xC0) != 0x80) return 0;
    *cp = (uint32_t(b0 & 0x1F) << 6) | (s[1] & 0x3F);
    return 2;
  }
  if (b0 < 0xF0) {
    if (n < 3) return 0;
    const uint8_t b1 = s[1];
    // E0 needs A0..BF (no overlong), ED needs 80..9F (no surrogates).
    const uint8_t lo = b0 == 0xE0 ? 0xA0 : 0x80;
    const uint8_t hi = b0 == 0xED ? 0x9F : 0xBF;
    if (b1 < lo || b1 > hi || (s[2] & 0xC0) != 0x80) return 0;
    *cp = (uint32_t(b0 & 0x0F) << 12) | (uint32_t(b1 & 0x3F) << 6) | (s[2] & 0x3F);
    return 3;
  }
  if (b0 < 0xF5) {
    if (n < 4) return 0;
    const uint8_t b1 = s[1];
    // F0 needs 90..BF (no overlong), F4 needs 80..8F (nothing above U+10FFFF).
    const uint8_t lo = b0 == 0xF0 ? 0x90 : 0x80;
    const uint8_t hi = b0 == 0xF4 ? 0x8F : 0xBF;
    if (b1 < lo || b1 > hi || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80) return 0;
    *cp = (uint32_t(b0 & 0x07) << 18) | (uint32_t(b1 & 0x3F) << 12) |
          (uint32_t(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
    return 4;
  }
  return 0;
}

// For a prefix s[0..n) that does not (yet) form a complete sequence: true when more bytes could
// still complete it validly (a strict prefix of some valid sequence), false when it is already
// invalid. n >= 1.
inline bool is_incomplete_prefix(const uint8_t* s, size_t n) {
  const uint8_t b0 = s[0];
  size_t need;
  if (b0 >= 0xC2 && b0 < 0xE0) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 < 0xF0) {
    need = 3;
  } else if (b0 >= 0xF0 && b0 < 0xF5) {
    need = 4;
  } else {
    return false;
  }
  if (n >= need) return false;
  for (size_t i = 1; i < n; ++i) {
    uint8_t lo = 0x80, hi = 0xBF;
    if (i == 1) {
      if (b0 == 0xE0) lo = 0xA0;
      if (b0 == 0xED) hi = 0x9F;
      if (b0 == 0xF0) lo = 0x90;
      if (b0 == 0xF4) hi = 0x8F;
    }
    if (s[i] < lo || s[i] > hi) return false;
  }
  return true;
}

}  // namespace gem::utf8
