// The malformed-file corpus: every file is rejected, quickly, with the message it was built to
// provoke; open() on a missing file, a directory and an empty file fails with a clear message.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "common/test_util.h"
#include "gguf/gguf.h"
#include "gguf/malformed_corpus.h"

namespace gem::gguf {
namespace {

bool contains_any(const std::string& message, const std::string& alternatives) {
  std::stringstream ss(alternatives);
  std::string alt;
  while (std::getline(ss, alt, '|')) {
    if (message.find(alt) != std::string::npos) return true;
  }
  return false;
}

TEST(GgufMalformed, EveryCaseIsRejectedWithItsMessage) {
  const auto cases = corpus::malformed_cases();
  std::set<std::string> names;
  size_t defects = 0;
  for (const corpus::MalformedCase& c : cases) {
    EXPECT_TRUE(names.insert(c.name).second) << "duplicate case name " << c.name;
    if (c.name.rfind("truncated-at-", 0) != 0) ++defects;
    const std::string label = c.name + ".gguf";
    const auto t0 = std::chrono::steady_clock::now();
    auto f = GgufFile::parse(c.bytes.data(), c.bytes.size(), label);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_FALSE(f.ok()) << c.name << ": accepted";
    EXPECT_EQ(f.message().rfind(label + ": ", 0), 0u) << c.name << ": " << f.message();
    EXPECT_TRUE(contains_any(f.message(), c.expected))
        << c.name << ": message \"" << f.message() << "\" lacks \"" << c.expected << "\"";
    EXPECT_LT(ms, 50.0) << c.name;  // absurd counts must fail at once, not loop or allocate
  }
  EXPECT_GE(defects, 30u);
  EXPECT_GE(cases.size() - defects, 30u);  // truncations
}

TEST(GgufMalformed, ValidSeedsParse) {
  for (const corpus::ValidCase& c : corpus::valid_cases()) {
    auto f = GgufFile::parse(c.bytes.data(), c.bytes.size(), c.name);
    EXPECT_TRUE(f.ok()) << c.name << ": " << f.message();
  }
}

TEST(GgufMalformed, TheBaseFileItselfParses) {
  // Every defect above is one edit away from this file, so each message is about that edit.
  const auto valid = corpus::valid_cases();
  ASSERT_EQ(valid[0].name, "base");
  auto f = GgufFile::parse(valid[0].bytes.data(), valid[0].bytes.size(), "base.gguf");
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_EQ((*f)->tensors().size(), 2u);
  EXPECT_EQ((*f)->kvs().size(), 5u);
  EXPECT_EQ((*(*f)->get_string_array("test.strings"))->size(), 3u);
}

TEST(GgufOpen, MissingFile) {
  auto f = GgufFile::open("/nonexistent/gem/model.gguf");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.message(), "/nonexistent/gem/model.gguf: cannot open: No such file or directory");
}

TEST(GgufOpen, Directory) {
  const std::string dir = test::temp_dir();
  auto f = GgufFile::open(dir);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.message(), dir + ": is a directory, expected a GGUF file");
}

TEST(GgufOpen, EmptyFile) {
  const std::string path = test::temp_dir() + "/empty.gguf";
  { std::ofstream out(path, std::ios::binary); }
  auto f = GgufFile::open(path);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.message(), path + ": empty file (0 bytes), expected a GGUF header (magic 'GGUF')");
}

TEST(GgufOpen, MalformedFileOnDiskNamesThePath) {
  const auto cases = corpus::malformed_cases();
  const std::string path = test::temp_dir() + "/bad.gguf";
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(cases[0].bytes.data()),
              static_cast<std::streamsize>(cases[0].bytes.size()));
  }
  auto f = GgufFile::open(path);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.message().rfind(path + ": bad magic at byte 0", 0), 0u) << f.message();
}

}  // namespace
}  // namespace gem::gguf
