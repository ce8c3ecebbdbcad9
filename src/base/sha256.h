// SHA-256 (FIPS 180-4), incremental. gem needs it in two places that must agree byte for byte
// with other tools: the seeds of gem synth's reference streams (sha256 of a stream name, as
// gguf_synth.py derives them) and the tensor-data checksums the test data records. Written here
// rather than linked from OpenSSL so that the build needs no crypto library on any machine.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace gem {

class Sha256 {
 public:
  using Digest = std::array<uint8_t, 32>;

  Sha256();
  void update(std::span<const uint8_t> data);
  void update(std::string_view s) { update({reinterpret_cast<const uint8_t*>(s.data()), s.size()}); }
  Digest finish();  // the object is spent afterwards

  static Digest of(std::string_view s);
  static std::string hex(const Digest& d);

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

}  // namespace gem
