// Tokenizer::from_hf_json: tokenizer.json files built here from the GGUF test
// vocabularies must tokenize exactly like the GGUF originals.
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "format/gguf.h"
#include "tok_test_util.h"

namespace lr {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

class HfJson : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("lowrank_tok_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const json& j) {
    const std::string p = (dir_ / name).string();
    std::ofstream(p) << j.dump();
    return p;
  }
  fs::path dir_;
};

// Byte-level BPE tokenizer.json from a gpt2-type GGUF vocab.
json bpe_json(const gguf::File& f, json pre_tokenizer) {
  const auto& tokens = f.get_strings("tokenizer.ggml.tokens");
  const auto& types = f.get_ints("tokenizer.ggml.token_type");
  json vocab = json::object(), added = json::array();
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (types[i] == 3) added.push_back({{"id", i}, {"content", tokens[i]}, {"special", true}});
    else vocab[tokens[i]] = i;
  }
  return {{"added_tokens", added},
          {"pre_tokenizer", pre_tokenizer},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model",
           {{"type", "BPE"}, {"vocab", vocab}, {"merges", f.get_strings("tokenizer.ggml.merges")}}}};
}

void expect_same(const Tokenizer& a, const Tokenizer& b, const std::vector<std::string>& texts, bool special) {
  for (const std::string& t : texts) {
    EXPECT_EQ(tok_test::ids_str(a.encode(t, false, special)), tok_test::ids_str(b.encode(t, false, special)))
        << tok_test::escape(t);
  }
}

std::vector<std::string> golden_inputs(const std::string& base) {
  const std::string inp = tok_test::read_file(base + ".inp");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> out;
  size_t pos = 0;
  for (size_t hit; (hit = inp.find(sep, pos)) != std::string::npos; pos = hit + sep.size())
    out.push_back(inp.substr(pos, hit - pos));
  return out;
}

TEST_F(HfJson, ByteLevelBpeMatchesGguf) {
  const std::string base = tok_test::shared_tokenizer_dir() + "ggml-vocab-gpt-2.gguf";
  if (!fs::exists(base)) GTEST_SKIP() << "shared test vocab missing: " << base;
  auto f = gguf::File::open(base);
  auto ref = Tokenizer::from_gguf(*f);
  const std::string path =
      write("tokenizer.json", bpe_json(*f, {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}));
  auto tok = Tokenizer::from_hf_json(path);
  EXPECT_EQ(tok->kind(), VocabKind::BytePairGpt2);
  EXPECT_EQ(tok->n_vocab(), ref->n_vocab());
  EXPECT_TRUE(tok->is_control(50256));
  const auto inputs = golden_inputs(base);
  ASSERT_GT(inputs.size(), 40u);
  expect_same(*ref, *tok, inputs, false);
}

TEST_F(HfJson, SmolLM2DigitsSequenceAndConfig) {
  const std::string model = tok_test::default_model_path();
  if (model.empty()) GTEST_SKIP() << "SmolLM2 GGUF not found (LOWRANK_MODEL)";
  auto f = gguf::File::open(model);
  auto ref = Tokenizer::from_gguf(*f);
  json pre = {{"type", "Sequence"},
              {"pretokenizers",
               {{{"type", "Digits"}, {"individual_digits", true}},
                {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}}}};
  const std::string path = write("tokenizer.json", bpe_json(*f, pre));
  write("tokenizer_config.json", {{"bos_token", "<|im_start|>"},
                                  {"eos_token", {{"content", "<|im_end|>"}}},
                                  {"chat_template", "TEMPLATE"}});
  auto tok = Tokenizer::from_hf_json(path);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_FALSE(tok->add_bos());
  EXPECT_EQ(tok->chat_template(), "TEMPLATE");
  const auto doc = json::parse(tok_test::read_file(LOWRANK_SOURCE_DIR "/tests/fixtures/tokenizer/smollm2.json"));
  for (const auto& c : doc.at("cases")) {
    const std::string text = c.at("text");
    const bool special = c.at("special");
    EXPECT_EQ(tok_test::ids_str(tok->encode(text, false, special)),
              tok_test::ids_str(c.at("ids").get<std::vector<int32_t>>()))
        << tok_test::escape(text);
  }
}

TEST_F(HfJson, UnigramScoresMatchSpmGguf) {
  const std::string base = tok_test::shared_tokenizer_dir() + "ggml-vocab-llama-spm.gguf";
  if (!fs::exists(base)) GTEST_SKIP() << "shared test vocab missing: " << base;
  auto f = gguf::File::open(base);
  auto ref = Tokenizer::from_gguf(*f);
  const auto& tokens = f->get_strings("tokenizer.ggml.tokens");
  const auto& scores = f->get_floats("tokenizer.ggml.scores");
  json vocab = json::array();
  for (size_t i = 0; i < tokens.size(); ++i) vocab.push_back(json::array({tokens[i], scores[i]}));
  json j = {
      {"added_tokens",
       {{{"id", 0}, {"content", "<unk>"}, {"special", true}},
        {{"id", 1}, {"content", "<s>"}, {"special", true}},
        {{"id", 2}, {"content", "</s>"}, {"special", true}}}},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         {{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
          {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}}}}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}}}},
      {"model", {{"type", "Unigram"}, {"unk_id", 0}, {"vocab", vocab}, {"byte_fallback", true}}}};
  auto tok = Tokenizer::from_hf_json(write("tokenizer.json", j));
  EXPECT_EQ(tok->kind(), VocabKind::SentencePiece);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_TRUE(tok->add_bos());
  EXPECT_EQ(tok->unk_id(), 0);
  EXPECT_EQ(tok->eos_id(), -1);  // not named anywhere in tokenizer.json
  const auto inputs = golden_inputs(base);
  ASSERT_GT(inputs.size(), 40u);
  expect_same(*ref, *tok, inputs, false);
  EXPECT_EQ(tok->decode(tok->encode("Hello world", true)), "Hello world");
}

TEST_F(HfJson, Errors) {
  EXPECT_THROW(Tokenizer::from_hf_json((dir_ / "missing.json").string()), Error);
  std::ofstream(dir_ / "bad.json") << "{not json";
  EXPECT_THROW(Tokenizer::from_hf_json((dir_ / "bad.json").string()), Error);
  try {
    Tokenizer::from_hf_json(write("wp.json", {{"model", {{"type", "WordPiece"}, {"vocab", json::object()}}}}));
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_HAS(e.what(), "WordPiece");
  }
}

}  // namespace
}  // namespace lr
