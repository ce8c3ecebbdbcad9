// Test helpers (see test_util.h).
#include "common/test_util.h"

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <sstream>

namespace gem::test {
namespace {
std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return (v != nullptr && v[0] != '\0') ? std::string(v) : fallback;
}
}  // namespace

std::string source_dir() { return env_or("GEM_SOURCE_DIR", GEM_DEFAULT_SOURCE_DIR); }
std::string binary_dir() { return env_or("GEM_BINARY_DIR", GEM_DEFAULT_BINARY_DIR); }
std::string test_models_dir() { return binary_dir() + "/test-models"; }

std::string fixture(const std::string& rel) {
  if (rel == "tiny-q4_0.gguf" || rel == "tiny6-f32.gguf" || rel == "tiny256-q6_k.gguf") {
    return test_models_dir() + "/" + rel;
  }
  if (rel == "mtp/tiny-q4_0-assistant.gguf") return test_models_dir() + "/tiny-q4_0-assistant.gguf";
  return source_dir() + "/tests/data/" + rel;
}

std::string missing_fixture_message(const std::string& path) {
  if (path.rfind(test_models_dir(), 0) == 0) {
    return "test model missing: " + path + " (the build writes it with gem synth: cmake --build " + binary_dir() +
           ")";
  }
  return "test data missing: " + path + " (vendored in tests/data; tools/vendor_test_data.py rewrites it)";
}
std::string gem_binary() { return binary_dir() + "/bin/gem"; }

std::pair<int, std::string> run_command(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return {-1, out};
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

bool file_exists(const std::string& path) { return std::filesystem::exists(path); }

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string temp_dir() {
  static std::string dir;
  static std::once_flag once;
  std::call_once(once, [] {
    std::string tmpl = (std::filesystem::temp_directory_path() / "gem-test-XXXXXX").string();
    char* made = mkdtemp(tmpl.data());
    dir = made != nullptr ? std::string(made) : std::string("/tmp");
    std::atexit([] { std::error_code ec; std::filesystem::remove_all(dir, ec); });
  });
  return dir;
}

}  // namespace gem::test
