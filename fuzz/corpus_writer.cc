// Writes the fuzzer's seed corpus into a folder: every malformed case of tests/gguf's generator
// and the small valid files, one file each.
#include <cstdio>
#include <string>

#include "gguf/malformed_corpus.h"

namespace {

bool write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return false;
  const bool ok = bytes.empty() || std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  return std::fclose(f) == 0 && ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR (an existing folder)\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  int n = 0;
  for (const auto& c : gem::gguf::corpus::malformed_cases()) {
    if (!write_file(dir + "/bad-" + c.name + ".gguf", c.bytes)) {
      std::fprintf(stderr, "cannot write %s/bad-%s.gguf\n", dir.c_str(), c.name.c_str());
      return 1;
    }
    ++n;
  }
  for (const auto& c : gem::gguf::corpus::valid_cases()) {
    if (!write_file(dir + "/ok-" + c.name + ".gguf", c.bytes)) {
      std::fprintf(stderr, "cannot write %s/ok-%s.gguf\n", dir.c_str(), c.name.c_str());
      return 1;
    }
    ++n;
  }
  std::printf("wrote %d seed files to %s\n", n, dir.c_str());
  return 0;
}
