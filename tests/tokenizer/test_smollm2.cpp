// The default model's vocabulary (SmolLM2-135M-Instruct, byte-level BPE with the
// "smollm" pre-tokenizer) against ids produced by llama.cpp
// (scripts/make_tokenizer_fixture.py -> tests/fixtures/tokenizer/smollm2.json).
#include <nlohmann/json.hpp>

#include "format/gguf.h"
#include "tok_test_util.h"

namespace lr {
namespace {

using tok_test::escape;
using tok_test::ids_str;

class SmolLM2Tokenizer : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = tok_test::default_model_path();
    if (path_.empty())
      GTEST_SKIP() << "SmolLM2-135M-Instruct.Q4_1.gguf not found: set LOWRANK_MODEL or put it in "
                      "~/.cache/lowrank/models/";
    file_ = gguf::File::open(path_);
    tok_ = Tokenizer::from_gguf(*file_);
  }
  std::string path_;
  std::shared_ptr<gguf::File> file_;
  std::unique_ptr<Tokenizer> tok_;
};

TEST_F(SmolLM2Tokenizer, MatchesLlamaCppFixture) {
  const std::string fixture = LOWRANK_SOURCE_DIR "/tests/fixtures/tokenizer/smollm2.json";
  const auto doc = nlohmann::json::parse(tok_test::read_file(fixture));
  const auto& cases = doc.at("cases");
  ASSERT_GE(cases.size(), 40u);
  size_t matched = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string text = cases[i].at("text").get<std::string>();
    const bool special = cases[i].at("special").get<bool>();
    const auto want = cases[i].at("ids").get<std::vector<int32_t>>();
    const std::vector<int32_t> got = tok_->encode(text, /*add_bos=*/false, special);
    if (got == want) ++matched;
    EXPECT_EQ(ids_str(got), ids_str(want)) << "case " << i << " special=" << special << ": '"
                                           << escape(text) << "'";
    // Round trip (control tokens rendered as their text when they were parsed).
    EXPECT_EQ(escape(tok_->decode(got, special)), escape(text)) << "case " << i;
    if (!special) {
      EXPECT_EQ(escape(tok_->decode(got)), escape(text)) << "case " << i;
    }
  }
  std::printf("[ golden   ] smollm2.json: %zu/%zu cases match\n", matched, cases.size());
}

TEST_F(SmolLM2Tokenizer, Metadata) {
  EXPECT_EQ(tok_->kind(), VocabKind::BytePairGpt2);
  EXPECT_EQ(tok_->pre(), "smollm");
  EXPECT_EQ(tok_->n_vocab(), 49152);
  EXPECT_EQ(tok_->bos_id(), 1);
  EXPECT_EQ(tok_->eos_id(), 2);
  EXPECT_FALSE(tok_->add_bos());
  EXPECT_EQ(tok_->find("<|im_end|>"), 2);
  EXPECT_EQ(tok_->find("<|im_start|>"), 1);
  EXPECT_FALSE(tok_->find("<|no such token|>").has_value());
  EXPECT_TRUE(tok_->is_control(2));
  EXPECT_FALSE(tok_->is_control(19556));
  EXPECT_NE(tok_->chat_template().find("<|im_start|>"), std::string::npos);
}

TEST_F(SmolLM2Tokenizer, StreamDecoderOverChat) {
  const std::string text =
      "<|im_start|>user\nSalut 👨‍👩‍👧‍👦! Ça va? 日本語 🇺🇸<|im_end|>\n";
  const auto ids = tok_->encode(text, false, true);
  StreamDecoder sd(*tok_);
  std::string all;
  for (int32_t id : ids) all += sd.push(id);
  all += sd.flush();
  EXPECT_EQ(all, tok_->decode(ids));
  StreamDecoder sd2(*tok_, true);
  std::string all2;
  for (int32_t id : ids) all2 += sd2.push(id);
  all2 += sd2.flush();
  EXPECT_EQ(all2, text);
}

}  // namespace
}  // namespace lr
