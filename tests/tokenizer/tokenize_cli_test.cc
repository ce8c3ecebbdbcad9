// `gem tokenize` / `gem detokenize` end to end: ids, pieces, flags and errors.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "common/test_util.h"

namespace gem {
namespace {

struct GemRun {
  int status = -1;
  std::string out;
};

// Runs `gem ARGS` through the shell, capturing stdout (stderr discarded).
GemRun run_gem(const std::string& args) {
  GemRun r;
  // Built with += : GCC 12's -Wrestrict misfires on "literal" + std::string at -O3 (GCC PR 105329).
  std::string cmd = "'";
  cmd += test::gem_binary();
  cmd += "' ";
  cmd += args;
  cmd += " 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  r.status = pclose(p);
  return r;
}

std::string vocab() {
  const std::string own = test::source_dir() + "/data/gemma4-vocab.gguf";
  return test::file_exists(own) ? own : test::fixture("tiny-q4_0.gguf");
}

TEST(TokenizeCli, IdsPiecesAndFlags) {
  ASSERT_TRUE(test::file_exists(test::gem_binary())) << test::gem_binary();
  GEM_REQUIRE_FIXTURE(vocab());
  std::string m = "-m '";
  m += vocab();
  m += "' ";
  GemRun r = run_gem("tokenize " + m + "--ids --parse-special 'Hello world<turn|>'");
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out, "[2, 9259, 1902, 106]\n");
  r = run_gem("tokenize " + m + "--ids --no-bos 'Hello world<turn|>'");  // not parsed: plain text
  EXPECT_EQ(r.out, "[9259, 1902, 236820, 887, 111038]\n");
  r = run_gem("tokenize " + m + "' Hello'");
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("26352 -> '▁Hello'"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("2 tokens"), std::string::npos) << r.out;

  const std::string path = test::temp_dir() + "/cli_text.txt";
  FILE* f = fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  fputs("\n\n\n", f);
  fclose(f);
  r = run_gem("tokenize " + m + "--ids -f '" + path + "'");
  EXPECT_EQ(r.out, "[2, 109]\n");
}

TEST(TokenizeCli, Detokenize) {
  ASSERT_TRUE(test::file_exists(test::gem_binary())) << test::gem_binary();
  GEM_REQUIRE_FIXTURE(vocab());
  std::string m = "-m '";
  m += vocab();
  m += "' ";
  GemRun r = run_gem("detokenize " + m + "'2, 9259 1902,106'");
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out, "Hello world\n");
  r = run_gem("detokenize " + m + "--special 2,9259,1902,106");
  EXPECT_EQ(r.out, "<bos>Hello world<turn|>\n");
  EXPECT_NE(run_gem("detokenize " + m + "2,x").status, 0);
  EXPECT_NE(run_gem("detokenize " + m + "262144").status, 0);
  EXPECT_NE(run_gem("tokenize -m /nonexistent.gguf hi").status, 0);
}

}  // namespace
}  // namespace gem
