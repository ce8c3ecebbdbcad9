// Test helpers: where the shared fixtures and the source tree are, file reading, and a skip
// that says why when a test's prerequisites are absent.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gem::test {

// ../shared (GEM_SHARED_DIR overrides): the fixtures, reference tools and specs.
std::string shared_dir();
std::string fixture(const std::string& rel);  // shared_dir() + "/fixtures/" + rel
std::string source_dir();                     // the repository root
std::string binary_dir();                     // the CMake build folder
std::string gem_binary();                     // binary_dir() + "/bin/gem"
bool file_exists(const std::string& path);
std::vector<uint8_t> read_file(const std::string& path);
std::string read_text(const std::string& path);
// A fresh temporary directory, removed at process exit.
std::string temp_dir();

}  // namespace gem::test

// Fails (not skips) when the shared fixtures are missing: CI always has them.
#define GEM_REQUIRE_FIXTURE(path) \
  ASSERT_TRUE(::gem::test::file_exists(path)) << "fixture missing: " << (path) << " (set GEM_SHARED_DIR)"
