// `gem synth` and `gem inspect` end to end through the binary: a synthesised model inspects as a
// test model with its plan; a rejected file exits non-zero with the reason.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "common/test_util.h"
#include "model/model.h"

namespace gem {
namespace {

struct CmdResult {
  int rc = -1;
  std::string out;  // stdout and stderr
};

CmdResult run_gem(const std::string& args) {
  const auto [rc, out] = test::run_command(test::gem_binary() + " " + args + " 2>&1");
  return CmdResult{rc, out};
}

TEST(GemCli, SynthThenInspect) {
  ASSERT_TRUE(test::file_exists(test::gem_binary())) << test::gem_binary();
  const std::string path = test::temp_dir() + "/cli-tiny6.gguf";
  CmdResult s = run_gem("synth --profile tiny6 --layout f32 --seed 7 -q --vocab " + test::source_dir() +
              "/data/gemma4-vocab.gguf -o " + path);
  ASSERT_EQ(s.rc, 0) << s.out;
  EXPECT_NE(s.out.find("86 tensors"), std::string::npos) << s.out;
  CmdResult i = run_gem("inspect " + path + " -c 1000 --kv-type f16 --parallel 3");
  ASSERT_EQ(i.rc, 0) << i.out;
  EXPECT_NE(i.out.find("profile test"), std::string::npos) << i.out;
  EXPECT_NE(i.out.find("layers 6 (5 sliding, 1 full)"), std::string::npos) << i.out;
  EXPECT_NE(i.out.find("F32      86 tensors"), std::string::npos) << i.out;
  // tiny6 at 1000 tokens, F16: 5 sliding x 2 x 4 x 32 x (8 + spare) ring slots + 1 full x 2 x 2
  // x 64 x 1000, x 2 bytes; three sequence slots hold three caches.
  const unsigned long long kv = 2ull * (5 * 2 * 4 * 32 * (8 + model::kRingSpare) + 2 * 2 * 64 * 1000);
  EXPECT_NE(i.out.find("at -c 1000: " + std::to_string(kv) + " B"), std::string::npos) << i.out;
  EXPECT_NE(i.out.find("at -c 1000 --parallel 3 (one cache per sequence slot): " + std::to_string(3 * kv) + " B"),
            std::string::npos) << i.out;
}

// An MTP assistant is described (not rejected): its kind, layers, widths and the target layers it
// reads; --target gives the pairing verdict, naming the mismatched key when refused. No serving
// flag is advertised (they come with the runtime's drafting rounds).
TEST(GemCli, InspectDescribesTheAssistant) {
  ASSERT_TRUE(test::file_exists(test::gem_binary())) << test::gem_binary();
  const std::string path = test::fixture("mtp/tiny-q4_0-assistant.gguf");
  GEM_REQUIRE_FIXTURE(path);
  CmdResult i = run_gem("inspect " + path);
  ASSERT_EQ(i.rc, 0) << i.out;
  EXPECT_NE(i.out.find("Gemma 4 MTP assistant"), std::string::npos) << i.out;
  EXPECT_NE(i.out.find("layers 4 (3 sliding, 1 full), n_embd 32, n_ff 128, heads 4"), std::string::npos) << i.out;
  EXPECT_NE(i.out.find("target width 64"), std::string::npos) << i.out;
  EXPECT_NE(i.out.find("reads target layer"), std::string::npos) << i.out;
  EXPECT_NE(i.out.find("tensors: 49"), std::string::npos) << i.out;
  EXPECT_EQ(i.out.find("--mtp"), std::string::npos) << i.out;
  EXPECT_EQ(i.out.find("pairing"), std::string::npos) << i.out;
}

TEST(GemCli, InspectPairsTheAssistantWithItsTarget) {
  ASSERT_TRUE(test::file_exists(test::gem_binary())) << test::gem_binary();
  const std::string path = test::fixture("mtp/tiny-q4_0-assistant.gguf");
  const std::string target = test::fixture("tiny-q4_0.gguf");
  GEM_REQUIRE_FIXTURE(path);
  GEM_REQUIRE_FIXTURE(target);
  CmdResult i = run_gem("inspect " + path + " --target " + target);
  ASSERT_EQ(i.rc, 0) << i.out;
  EXPECT_NE(i.out.find("pairing with " + target + ": ok (target of 12 layers, width 64): the sliding layers "
                       "read target layer 10, the full layer target layer 11"),
            std::string::npos) << i.out;
}

TEST(GemCli, InspectRefusesAMismatchedPairing) {
  ASSERT_TRUE(test::file_exists(test::gem_binary())) << test::gem_binary();
  const std::string path = test::fixture("mtp/tiny-q4_0-assistant.gguf");
  const std::string tiny6 = test::fixture("tiny6-f32.gguf");
  GEM_REQUIRE_FIXTURE(path);
  GEM_REQUIRE_FIXTURE(tiny6);
  CmdResult i = run_gem("inspect " + path + " --target " + tiny6);
  EXPECT_NE(i.rc, 0);
  EXPECT_NE(i.out.find("pairing refused: assistant key gemma4-assistant.embedding_length_out: expected 32 (the "
                       "target's embedding_length), found 64"),
            std::string::npos) << i.out;
  // --target is for assistants only.
  CmdResult t = run_gem("inspect " + tiny6 + " --target " + tiny6);
  EXPECT_NE(t.rc, 0);
  EXPECT_NE(t.out.find("only an MTP assistant file"), std::string::npos) << t.out;
}

// A decode test shorter than the warm-up (4 tokens) must fit the context the tests size: -n 2
// asks for 2 positions, and the warm-up used to run 4 and fail with "exceed the context".
TEST(GemCli, BenchShortDecodeFitsItsContext) {
  ASSERT_TRUE(test::file_exists(test::gem_binary())) << test::gem_binary();
  const std::string path = test::fixture("tiny6-f32.gguf");
  GEM_REQUIRE_FIXTURE(path);
  CmdResult b = run_gem("bench -m " + path + " -p 0 -n 2 -r 1 --backend cpu -t 1");
  ASSERT_EQ(b.rc, 0) << b.out;
  EXPECT_NE(b.out.find("| tg2 |"), std::string::npos) << b.out;
}

// The batched mode reports llama-batched-bench's columns, one row per sequence count, with the
// token counts it ran (N_KV = B·(PP+TG)); it refuses a depth.
TEST(GemCli, BenchBatchedModeRunsEverySequenceCount) {
  ASSERT_TRUE(test::file_exists(test::gem_binary())) << test::gem_binary();
  const std::string path = test::fixture("tiny6-f32.gguf");
  GEM_REQUIRE_FIXTURE(path);
  CmdResult b = run_gem("bench -m " + path + " -p 12 -n 3 --parallel 1,3 --backend cpu -t 1 -o json");
  ASSERT_EQ(b.rc, 0) << b.out;
  const auto j = nlohmann::json::parse(b.out.substr(b.out.find('[')));
  ASSERT_EQ(j.size(), 2u) << b.out;
  EXPECT_EQ(j[0]["pl"], 1);
  EXPECT_EQ(j[1]["pl"], 3);
  EXPECT_EQ(j[1]["n_kv"], 3 * (12 + 3));
  EXPECT_GT(j[1]["speed_tg"].get<double>(), 0.0);
  CmdResult d = run_gem("bench -m " + path + " -p 12 -n 3 -d 5 --parallel 2 --backend cpu");
  EXPECT_NE(d.rc, 0);
  EXPECT_NE(d.out.find("--parallel takes one -p and one -n value and no depth"), std::string::npos) << d.out;
  // As -np: at most 256 sequences, said before any backend is made (it allocated until bad_alloc).
  CmdResult big = run_gem("bench -m " + path + " -p 12 -n 3 --parallel 2,100000 --backend cpu");
  EXPECT_NE(big.rc, 0);
  EXPECT_NE(big.out.find("--parallel 100000: expected at most 256 sequences"), std::string::npos) << big.out;
  EXPECT_EQ(big.out.find("B=2 done"), std::string::npos) << "checked before the first run: " << big.out;
}

TEST(GemCli, SynthWithAMissingVocabularyFails) {
  ASSERT_TRUE(test::file_exists(test::gem_binary())) << test::gem_binary();
  CmdResult s = run_gem("synth --profile tiny -q --vocab /nonexistent/vocab.gguf -o " + test::temp_dir() + "/x.gguf");
  EXPECT_NE(s.rc, 0);
  EXPECT_NE(s.out.find("/nonexistent/vocab.gguf"), std::string::npos) << s.out;
}

// --matrices q8_0 writes an assistant with Q8_0 matrices (as most public assistant files), which
// inspects as such and pairs with its target; for a model it is refused, naming why.
TEST(GemCli, SynthWritesAQ8_0AssistantOnly) {
  ASSERT_TRUE(test::file_exists(test::gem_binary())) << test::gem_binary();
  const std::string model = test::fixture("tiny-q4_0.gguf");
  GEM_REQUIRE_FIXTURE(model);
  const std::string vocab = " --vocab " + test::source_dir() + "/data/gemma4-vocab.gguf";
  const std::string path = test::temp_dir() + "/cli-q8_0-assistant.gguf";
  CmdResult s = run_gem("synth --assistant-for " + model + " --matrices q8_0 -q -o " + path);
  ASSERT_EQ(s.rc, 0) << s.out;
  EXPECT_NE(s.out.find("layout prod(mat=Q8_0,embd=Q8_0)"), std::string::npos) << s.out;
  CmdResult i = run_gem("inspect " + path + " --target " + model);
  ASSERT_EQ(i.rc, 0) << i.out;
  EXPECT_NE(i.out.find("Q8_0     23 tensors"), std::string::npos) << i.out;
  EXPECT_EQ(i.out.find("Q4_0"), std::string::npos) << i.out;
  CmdResult m = run_gem("synth --profile tiny --matrices q8_0 -q" + vocab + " -o " + test::temp_dir() + "/x8.gguf");
  EXPECT_NE(m.rc, 0);
  EXPECT_NE(m.out.find("--matrices q8_0: sets an assistant's matrix type and needs --assistant-for"),
            std::string::npos) << m.out;
  CmdResult bad = run_gem("synth --assistant-for " + model + " --matrices q6_k -q -o " + path);
  EXPECT_NE(bad.rc, 0);
  EXPECT_NE(bad.out.find("q6_k"), std::string::npos) << bad.out;
}

// gem run --mtp: the assistant drafts, the greedy output is the same text as without it, and a
// wrong file is named.
TEST(GemCli, RunWithTheMtpAssistantPrintsWhatPlainGreedyPrints) {
  ASSERT_TRUE(test::file_exists(test::gem_binary())) << test::gem_binary();
  const std::string model = test::fixture("tiny-q4_0.gguf");
  const std::string mtp = test::fixture("mtp/tiny-q4_0-assistant.gguf");
  GEM_REQUIRE_FIXTURE(model);
  GEM_REQUIRE_FIXTURE(mtp);
  const std::string common = "run -m " + model + " --backend cpu -t 1 --temp 0 -n 20 -p Hello";
  // The generated text: stdout, flushed token by token before the summary lines on stderr.
  auto text = [](const std::string& out) {
    std::string t = out.substr(0, out.find("gem run: load"));
    std::string kept, line;
    std::istringstream in(t);
    while (std::getline(in, line)) {
      if (line.rfind("gem ", 0) != 0) kept += line + "\n";
    }
    return kept;
  };
  CmdResult plain = run_gem(common);
  CmdResult spec = run_gem(common + " --mtp " + mtp);
  ASSERT_EQ(plain.rc, 0) << plain.out;
  ASSERT_EQ(spec.rc, 0) << spec.out;
  EXPECT_FALSE(text(plain.out).empty()) << plain.out;
  EXPECT_EQ(text(spec.out), text(plain.out));
  EXPECT_NE(spec.out.find("gem run: drafted "), std::string::npos) << spec.out;
  CmdResult wrong = run_gem(common + " --mtp " + model);
  EXPECT_NE(wrong.rc, 0);
  EXPECT_NE(wrong.out.find("--mtp " + model + ":"), std::string::npos) << wrong.out;
}

// --no-mtp turns drafting off whatever --mtp says; --draft-min drafts at least that many tokens a
// round (the greedy text unchanged); bad draft bounds are named.
TEST(GemCli, RunNoMtpAndDraftMin) {
  ASSERT_TRUE(test::file_exists(test::gem_binary())) << test::gem_binary();
  const std::string model = test::fixture("tiny-q4_0.gguf");
  const std::string mtp = test::fixture("mtp/tiny-q4_0-assistant.gguf");
  GEM_REQUIRE_FIXTURE(model);
  GEM_REQUIRE_FIXTURE(mtp);
  const std::string common = "run -m " + model + " --backend cpu -t 1 --temp 0 -n 20 -p Hello";
  // The generated text: stdout, flushed token by token before the summary lines on stderr.
  auto text = [](const std::string& out) {
    std::string kept, line;
    std::istringstream in(out.substr(0, out.find("gem run: load")));
    while (std::getline(in, line)) {
      if (line.rfind("gem ", 0) != 0) kept += line + "\n";
    }
    return kept;
  };
  CmdResult plain = run_gem(common);
  CmdResult off = run_gem(common + " --mtp " + mtp + " --no-mtp");
  ASSERT_EQ(plain.rc, 0) << plain.out;
  ASSERT_EQ(off.rc, 0) << off.out;
  EXPECT_EQ(off.out.find("gem run: drafted"), std::string::npos) << off.out;
  CmdResult min = run_gem(common + " --mtp " + mtp + " --draft-min 3 --draft-max 4");
  ASSERT_EQ(min.rc, 0) << min.out;
  EXPECT_NE(min.out.find("gem run: drafted "), std::string::npos) << min.out;
  EXPECT_FALSE(text(plain.out).empty()) << plain.out;
  EXPECT_EQ(text(min.out), text(plain.out));
  EXPECT_EQ(text(off.out), text(plain.out));
  CmdResult bad = run_gem(common + " --mtp " + mtp + " --draft-min 9");
  EXPECT_NE(bad.rc, 0);
  EXPECT_NE(bad.out.find("--draft-min 9: expected 0..8 (--draft-max)"), std::string::npos) << bad.out;
  // Without an assistant too: a bad draft length is an error, not ignored.
  CmdResult bad_plain = run_gem(common + " --draft-min -1");
  EXPECT_NE(bad_plain.rc, 0);
  EXPECT_NE(bad_plain.out.find("--draft-min -1: expected 0..8 (--draft-max)"), std::string::npos)
      << bad_plain.out;
  CmdResult zero = run_gem(common + " --mtp " + mtp + " --draft-max 0");
  EXPECT_NE(zero.rc, 0);
  EXPECT_NE(zero.out.find("--draft-max 0: expected at least 1"), std::string::npos) << zero.out;
}

// gem bench --mtp: plain greedy decoding, the assistant as it is and the forced-acceptance
// rates, one row each in one run; at rate 1 every draft is accepted (the target's own tokens),
// at rate 0 none, and every row's tokens are plain greedy's; -v adds the round's parts; --temp
// samples the plain and the assistant's rows. Refusals are named.
TEST(GemCli, BenchMtpReportsPlainTheAssistantAndForcedRates) {
  ASSERT_TRUE(test::file_exists(test::gem_binary())) << test::gem_binary();
  const std::string model = test::fixture("tiny-q4_0.gguf");
  const std::string mtp = test::fixture("mtp/tiny-q4_0-assistant.gguf");
  GEM_REQUIRE_FIXTURE(model);
  GEM_REQUIRE_FIXTURE(mtp);
  const std::string common = "bench -m " + model + " --backend cpu -t 1 -p 8 -n 40 -r 1";
  // A refused command: non-zero exit and the message.
  auto expect_refused = [](const std::string& args, const std::string& message) {
    const CmdResult r = run_gem(args);
    EXPECT_NE(r.rc, 0) << args;
    EXPECT_NE(r.out.find(message), std::string::npos) << args << "\n" << r.out;
  };
  CmdResult b = run_gem(common + " --mtp " + mtp + " --forced-acceptance 1,0 -v -o json");
  ASSERT_EQ(b.rc, 0) << b.out;
  const auto j = nlohmann::json::parse(b.out.substr(b.out.find("\n[") + 1));
  ASSERT_EQ(j.size(), 4u) << b.out;
  EXPECT_EQ(j[0]["mode"], "plain");
  EXPECT_EQ(j[0]["drafted"], 0);
  EXPECT_EQ(j[1]["mode"], "mtp");
  EXPECT_GT(j[1]["drafted"].get<int>(), 0);
  EXPECT_EQ(j[2]["mode"], "mtp forced 1.00");
  EXPECT_GT(j[2]["drafted"].get<int>(), 0);
  EXPECT_EQ(j[2]["accepted"], j[2]["drafted"]);
  EXPECT_GT(j[2]["rounds"].get<int>(), 0);
  EXPECT_LT(j[2]["rounds"].get<int>(), 40 / 2) << "rounds of several tokens each";
  EXPECT_GT(j[2]["verify_ms_per_round"].get<double>(), 0.0);
  EXPECT_GT(j[2]["draft_ms_per_round"].get<double>(), 0.0);
  EXPECT_EQ(j[3]["mode"], "mtp forced 0.00");
  EXPECT_EQ(j[3]["accepted"], 0);
  for (const auto& row : j) {
    EXPECT_GT(row["median_tps"].get<double>(), 0.0) << row;
    // Lossless: every greedy mode's tokens are plain greedy decoding's.
    EXPECT_EQ(row["output_sha256"], j[0]["output_sha256"]) << row;
  }
  CmdResult md = run_gem(common + " --mtp " + mtp + " --forced-acceptance 0.5 -v");
  ASSERT_EQ(md.rc, 0) << md.out;
  EXPECT_NE(md.out.find("| mtp forced 0.50 |"), std::string::npos) << md.out;
  EXPECT_NE(md.out.find("verify ms/round"), std::string::npos) << md.out;
  EXPECT_NE(md.out.find("plain decode: "), std::string::npos) << md.out;
  expect_refused(common + " --forced-acceptance 1", "--forced-acceptance needs --mtp");
  expect_refused(common + " --mtp " + mtp + " --forced-acceptance 1.5",
                 "--forced-acceptance: '1.5' is not a rate in [0, 1]");
  // --temp: plain and the assistant's rows sampled (a fixed seed: other tokens than greedy's).
  CmdResult t = run_gem(common + " --mtp " + mtp + " --temp 0.8 -o json");
  ASSERT_EQ(t.rc, 0) << t.out;
  const auto jt = nlohmann::json::parse(t.out.substr(t.out.find("\n[") + 1));
  ASSERT_EQ(jt.size(), 2u) << t.out;
  EXPECT_EQ(jt[0]["mode"], "plain (temp 0.80)");
  EXPECT_EQ(jt[1]["mode"], "mtp (temp 0.80)");
  EXPECT_FLOAT_EQ(jt[1]["temperature"].get<float>(), 0.8f);
  EXPECT_GT(jt[1]["drafted"].get<int>(), 0);
  EXPECT_NE(jt[0]["output_sha256"], j[0]["output_sha256"]) << "sampled tokens equal greedy ones";
  expect_refused(common + " --mtp " + mtp + " --temp 0.8 --forced-acceptance 1",
                 "--forced-acceptance runs greedy rounds");
  expect_refused(common + " --temp 0.8", "--temp needs --mtp");
  expect_refused(common + " --mtp " + mtp + " --temp -1",
                 "--temp -1: expected a temperature in [0, 100]");
  expect_refused("bench -m " + model + " --backend cpu -t 1 -p 8,16 -n 8 -r 1 --mtp " + mtp,
                 "--mtp takes one -p value");
}

// gem agent drafts with mtp-<model file name> beside the model (its /props says so) unless
// --no-mtp; without such a file it serves without drafting.
TEST(GemCli, AgentUsesTheAssistantBesideTheModel) {
  ASSERT_TRUE(test::file_exists(test::gem_binary())) << test::gem_binary();
  const std::string model = test::fixture("tiny-q4_0.gguf");
  const std::string mtp = test::fixture("mtp/tiny-q4_0-assistant.gguf");
  GEM_REQUIRE_FIXTURE(model);
  GEM_REQUIRE_FIXTURE(mtp);
  const std::string dir = test::temp_dir() + "/agent-mtp";
  ASSERT_EQ(test::run_command("mkdir -p " + dir + " && ln -sf " + model + " " + dir + "/m.gguf").first, 0);
  const std::string props = " -- bash -c 'curl -sf \"${OPENAI_BASE_URL%/v1}/props\"'";
  const std::string agent = "agent -m " + dir + "/m.gguf --backend cpu -t 1 -c 256";
  CmdResult none = run_gem(agent + props);
  ASSERT_EQ(none.rc, 0) << none.out;
  EXPECT_NE(none.out.find("\"speculative\":false"), std::string::npos) << none.out;
  ASSERT_EQ(test::run_command("ln -sf " + mtp + " " + dir + "/mtp-m.gguf").first, 0);
  CmdResult with = run_gem(agent + props);
  ASSERT_EQ(with.rc, 0) << with.out;
  EXPECT_NE(with.out.find("\"speculative\":true"), std::string::npos) << with.out;
  EXPECT_NE(with.out.find("speculative decoding with " + dir + "/mtp-m.gguf, found beside the model"),
            std::string::npos) << with.out;
  CmdResult off = run_gem(agent + " --no-mtp" + props);
  ASSERT_EQ(off.rc, 0) << off.out;
  EXPECT_NE(off.out.find("\"speculative\":false"), std::string::npos) << off.out;
}

}  // namespace
}  // namespace gem
