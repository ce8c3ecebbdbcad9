// Test helpers: where the test data, the test models and the source tree are, file reading, and a
// check that says what is missing when a test's data is absent.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace gem::test {

// Reference data and models by their fixture names (tests/data/README.md):
//   the four test models ("tiny-q4_0.gguf", "tiny6-f32.gguf", "tiny256-q6_k.gguf",
//   "mtp/tiny-q4_0-assistant.gguf") are written by `gem synth` at build time into
//   binary_dir()/test-models/ (tests/CMakeLists.txt);
//   everything else (llama.cpp's outputs, tokenizer and chat references, quant vectors) is
//   vendored in source_dir()/tests/data/.
std::string fixture(const std::string& rel);
std::string test_models_dir();                // binary_dir() + "/test-models"
// "test data missing: PATH (where it comes from)", for failures.
std::string missing_fixture_message(const std::string& path);
std::string source_dir();                     // the repository root
std::string binary_dir();                     // the CMake build folder
std::string gem_binary();                     // binary_dir() + "/bin/gem"
// Runs a shell command: (its exit status, -1 when it did not exit normally; its stdout).
std::pair<int, std::string> run_command(const std::string& cmd);
bool file_exists(const std::string& path);
std::vector<uint8_t> read_file(const std::string& path);
std::string read_text(const std::string& path);
// A fresh temporary directory, removed at process exit.
std::string temp_dir();

}  // namespace gem::test

// Fails (not skips) when a data file or test model is missing, saying where it comes from.
#define GEM_REQUIRE_FIXTURE(path) \
  ASSERT_TRUE(::gem::test::file_exists(path)) << ::gem::test::missing_fixture_message(path)
