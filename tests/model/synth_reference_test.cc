// gem synth reproduces the reference models exactly: the four test models the build writes (with
// the commands tests/data/models.json records) hold byte for byte the tensor data of the GGUF
// files llama.cpp's reference outputs were computed on (whose SHA-256 models.json records). Also
// the building blocks against independent values: SHA-256 (FIPS 180-4 vectors) and numpy's PCG64
// (values printed by numpy 1.24's np.random.PCG64(...).random_raw()).
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "base/sha256.h"
#include "common/test_util.h"
#include "gguf/gguf.h"
#include "model/pcg64.h"

namespace gem::model {
namespace {

TEST(Sha256, FipsVectors) {
  EXPECT_EQ(Sha256::hex(Sha256::of("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256::hex(Sha256::of("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256::hex(Sha256::of("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // Fed in uneven pieces: the same digest as in one call.
  const std::string million(1000000, 'a');
  Sha256 h;
  for (size_t pos = 0; pos < million.size(); pos += 777) {
    h.update(std::string_view(million).substr(pos, 777));
  }
  EXPECT_EQ(Sha256::hex(h.finish()), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Pcg64, MatchesNumpyStreams) {
  // np.random.PCG64(int.from_bytes(sha256(b"gem-synth/1/blk.0.attn_q.weight").digest()[:16], "little"))
  Pcg64 a = Pcg64::for_stream(1, "blk.0.attn_q.weight");
  EXPECT_EQ(a.next(), 888937337122703782ull);
  EXPECT_EQ(a.next(), 13682093939428118961ull);
  Pcg64 b = Pcg64::for_stream(1, "token_embd.weight");
  EXPECT_EQ(b.next(), 9975165049156881718ull);
  EXPECT_EQ(b.next(), 12882236391131842641ull);
}

TEST(Pcg64, AdvanceEqualsStepping) {
  Pcg64 stepped = Pcg64::for_stream(7, "x");
  for (int i = 0; i < 1000; ++i) stepped.next();
  Pcg64 jumped = Pcg64::for_stream(7, "x");
  jumped.advance(1000);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(jumped.next(), stepped.next());
}

struct Digests {
  std::string total;
  std::vector<std::pair<std::string, std::string>> tensors;
};

// Each tensor's data, and all of it in name order (the order of the files differs: llama-quantize
// writes tensors in another order than gguf_synth.py and gem synth).
Digests tensor_digests(const gguf::GgufFile& f) {
  std::vector<const gguf::TensorInfo*> sorted;
  for (const gguf::TensorInfo& t : f.tensors()) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->name < b->name; });
  Digests d;
  Sha256 all;
  for (const gguf::TensorInfo* tp : sorted) {
    const gguf::TensorInfo& t = *tp;
    const std::span<const uint8_t> bytes(t.data, t.n_bytes);
    all.update(bytes);
    Sha256 one;
    one.update(bytes);
    d.tensors.emplace_back(std::string(t.name), Sha256::hex(one.finish()));
  }
  d.total = Sha256::hex(all.finish());
  return d;
}

TEST(SynthReference, TestModelsHoldTheReferenceWeights) {
  const std::string path = test::fixture("models.json");
  GEM_REQUIRE_FIXTURE(path);
  const nlohmann::json models = nlohmann::json::parse(test::read_text(path));
  ASSERT_EQ(models.size(), 4u);
  for (const auto& [name, m] : models.items()) {
    SCOPED_TRACE(name);
    const std::string file = test::test_models_dir() + "/" + m["file"].get<std::string>();
    GEM_REQUIRE_FIXTURE(file);
    auto f = gguf::GgufFile::open(file);
    ASSERT_TRUE(f.ok()) << f.message();
    const Digests d = tensor_digests(**f);
    const auto& ref = m["tensors"];
    ASSERT_EQ(d.tensors.size(), ref.size()) << "tensor count";
    for (size_t i = 0; i < ref.size(); ++i) {
      EXPECT_EQ(d.tensors[i].first, ref[i][0].get<std::string>()) << "tensor " << i;
      EXPECT_EQ(d.tensors[i].second, ref[i][1].get<std::string>()) << "data of " << d.tensors[i].first;
    }
    EXPECT_EQ(d.total, m["tensor_data_sha256"].get<std::string>()) << "all tensor data";
  }
}

}  // namespace
}  // namespace gem::model
