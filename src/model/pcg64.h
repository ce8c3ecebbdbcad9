// numpy's PCG64 bit generator (PCG XSL-RR 128/64) with numpy's SeedSequence seeding, so that gem
// synth draws exactly the values that shared/tools/gguf_synth.py draws for the same stream name:
//   np.random.PCG64(int.from_bytes(sha256("gem-synth/<seed>/<name>")[:16], "little")).random_raw()
// advance() jumps the stream in O(log n), so any chunk of a tensor can be produced on its own.
#pragma once

#include <cstdint>
#include <string_view>

namespace gem::model {

class Pcg64 {
 public:
  __extension__ typedef unsigned __int128 u128;

  // np.random.PCG64(entropy): SeedSequence(entropy).generate_state(4, uint64) → state and stream.
  static Pcg64 from_entropy(u128 entropy);
  // The stream gguf_synth.py's tensor_rng(seed, name) makes.
  static Pcg64 for_stream(uint64_t seed, std::string_view name);

  uint64_t next() {
    step();
    const uint64_t v = static_cast<uint64_t>(state_ >> 64) ^ static_cast<uint64_t>(state_);
    const unsigned rot = static_cast<unsigned>(state_ >> 122);
    return (v >> rot) | (v << ((64 - rot) & 63));
  }
  void advance(uint64_t delta);

 private:
  static constexpr u128 kMult = (static_cast<u128>(0x2360ED051FC65DA4ull) << 64) | 0x4385DF649FCCF645ull;
  void step() { state_ = state_ * kMult + inc_; }
  u128 state_ = 0;
  u128 inc_ = 1;
};

// Uniform in (-1, 1) from the top 53 bits of a raw word (gguf_synth.py's uniform_pm1).
inline double uniform_pm1(uint64_t r) {
  return (static_cast<double>(r >> 11) + 0.5) * (2.0 / 9007199254740992.0) - 1.0;
}

}  // namespace gem::model
