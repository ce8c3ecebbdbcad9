// numpy-compatible PCG64 and SeedSequence (pcg64.h). SeedSequence: numpy/random/bit_generator.pyx
// (pool of 4 uint32 words, hashmix/mix constants of Melissa O'Neill's seed_seq design).
#include "model/pcg64.h"

#include <string>
#include <vector>

#include "base/sha256.h"

namespace gem::model {
namespace {

constexpr uint32_t kInitA = 0x43b0d7e5, kMultA = 0x931e8875, kInitB = 0x8b51f9dd, kMultB = 0x58f38ded;
constexpr uint32_t kMixMultL = 0xca01f9dd, kMixMultR = 0x4973f715;

}  // namespace

Pcg64 Pcg64::from_entropy(u128 entropy) {
  // The entropy as little-endian uint32 words, without leading zero words (at least one).
  std::vector<uint32_t> ent;
  for (u128 e = entropy; e != 0; e >>= 32) ent.push_back(static_cast<uint32_t>(e));
  if (ent.empty()) ent.push_back(0);

  uint32_t hash_const = kInitA;
  auto hashmix = [&hash_const](uint32_t v) {
    v ^= hash_const;
    hash_const *= kMultA;
    v *= hash_const;
    return v ^ (v >> 16);
  };
  auto mix = [](uint32_t x, uint32_t y) {
    uint32_t r = kMixMultL * x - kMixMultR * y;
    return r ^ (r >> 16);
  };
  uint32_t pool[4];
  for (size_t i = 0; i < 4; ++i) pool[i] = hashmix(i < ent.size() ? ent[i] : 0u);
  for (size_t s = 0; s < 4; ++s) {
    for (size_t d = 0; d < 4; ++d) {
      if (s != d) pool[d] = mix(pool[d], hashmix(pool[s]));
    }
  }
  for (size_t s = 4; s < ent.size(); ++s) {
    for (size_t d = 0; d < 4; ++d) pool[d] = mix(pool[d], hashmix(ent[s]));
  }
  // generate_state(4, uint64): 8 uint32 words, pairs read as little-endian uint64.
  uint32_t hb = kInitB;
  uint64_t words[4] = {};
  for (size_t i = 0; i < 8; ++i) {
    uint32_t v = pool[i % 4] ^ hb;
    hb *= kMultB;
    v *= hb;
    v ^= v >> 16;
    words[i / 2] |= static_cast<uint64_t>(v) << (32 * (i % 2));
  }
  // pcg64_set_seed: state = words[0]:words[1], sequence = words[2]:words[3] (high word first).
  const u128 init_state = (static_cast<u128>(words[0]) << 64) | words[1];
  const u128 init_seq = (static_cast<u128>(words[2]) << 64) | words[3];
  Pcg64 p;
  p.state_ = 0;
  p.inc_ = (init_seq << 1) | 1;
  p.step();
  p.state_ += init_state;
  p.step();
  return p;
}

Pcg64 Pcg64::for_stream(uint64_t seed, std::string_view name) {
  const Sha256::Digest h = Sha256::of("gem-synth/" + std::to_string(seed) + "/" + std::string(name));
  u128 entropy = 0;
  for (int i = 15; i >= 0; --i) entropy = (entropy << 8) | h[static_cast<size_t>(i)];
  return from_entropy(entropy);
}

void Pcg64::advance(uint64_t delta) {
  // Brown's LCG jump-ahead: state_{n+delta} = A·state_n + C.
  u128 acc_mult = 1, acc_plus = 0, cur_mult = kMult, cur_plus = inc_;
  for (; delta > 0; delta >>= 1) {
    if (delta & 1) {
      acc_mult *= cur_mult;
      acc_plus = acc_plus * cur_mult + cur_plus;
    }
    cur_plus = (cur_mult + 1) * cur_plus;
    cur_mult *= cur_mult;
  }
  state_ = acc_mult * state_ + acc_plus;
}

}  // namespace gem::model
