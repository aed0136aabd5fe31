// llama.cpp's ggml-vocab-*.gguf tokenizer test vectors (shared data): every
// string of the .inp file must encode (no BOS, parse_special off) to exactly the
// ids of the matching .out line.
#include <filesystem>

#include "format/gguf.h"
#include "tok_test_util.h"

namespace lr {
namespace {

using tok_test::escape;
using tok_test::ids_str;

struct Golden {
  std::vector<std::string> inputs;
  std::vector<std::vector<int32_t>> outputs;
};

// .inp: each test string followed by "\n__ggml_vocab_test__\n" (so a string may
// be empty or consist of newlines). .out: one line per string, ids separated
// by spaces (each preceded by one), empty line for no ids.
Golden read_golden(const std::string& base) {
  Golden g;
  const std::string inp = tok_test::read_file(base + ".inp");
  const std::string sep = "\n__ggml_vocab_test__\n";
  size_t pos = 0;
  for (size_t hit; (hit = inp.find(sep, pos)) != std::string::npos; pos = hit + sep.size())
    g.inputs.push_back(inp.substr(pos, hit - pos));
  EXPECT_EQ(pos, inp.size()) << "trailing text after the last separator";

  std::istringstream out(tok_test::read_file(base + ".out"));
  std::string line;
  while (std::getline(out, line)) {
    std::istringstream ls(line);
    std::vector<int32_t> ids;
    for (int32_t id; ls >> id;) ids.push_back(id);
    g.outputs.push_back(std::move(ids));
  }
  return g;
}

void check_golden(const std::string& name, bool round_trip) {
  const std::string base = tok_test::shared_tokenizer_dir() + name;
  if (!std::filesystem::exists(base)) GTEST_SKIP() << "shared test vocab missing: " << base;
  auto file = gguf::File::open(base);
  auto tok = Tokenizer::from_gguf(*file);
  const Golden g = read_golden(base);
  ASSERT_EQ(g.inputs.size(), g.outputs.size()) << name;
  ASSERT_GT(g.inputs.size(), 40u);
  size_t matched = 0;
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    const std::vector<int32_t> got = tok->encode(g.inputs[i], /*add_bos=*/false);
    if (got == g.outputs[i]) ++matched;
    EXPECT_EQ(ids_str(got), ids_str(g.outputs[i])) << name << " line " << i + 1 << ": '"
                                                   << escape(g.inputs[i]) << "'";
    if (round_trip) {
      EXPECT_EQ(escape(tok->decode(got)), escape(g.inputs[i])) << name << " line " << i + 1;
    }
  }
  std::printf("[ golden   ] %s: %zu/%zu lines match\n", name.c_str(), matched, g.inputs.size());
}

TEST(TokenizerGolden, Gpt2) { check_golden("ggml-vocab-gpt-2.gguf", true); }

TEST(TokenizerGolden, LlamaSpm) { check_golden("ggml-vocab-llama-spm.gguf", true); }

TEST(TokenizerGolden, Gpt2Metadata) {
  const std::string path = tok_test::shared_tokenizer_dir() + "ggml-vocab-gpt-2.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "shared test vocab missing: " << path;
  auto tok = Tokenizer::from_gguf(*gguf::File::open(path));
  EXPECT_EQ(tok->kind(), VocabKind::BytePairGpt2);
  EXPECT_EQ(tok->n_vocab(), 50257);
  EXPECT_EQ(tok->bos_id(), 50256);
  EXPECT_EQ(tok->eos_id(), 50256);
  EXPECT_FALSE(tok->add_bos());
  EXPECT_EQ(tok->find("<|endoftext|>"), 50256);
  EXPECT_TRUE(tok->is_control(50256));
  EXPECT_EQ(tok->token_piece(50256), "");
  EXPECT_EQ(tok->token_piece(50256, true), "<|endoftext|>");
  EXPECT_EQ(tok->token_piece(198), "\n");
  EXPECT_EQ(tok->token_piece(220), " ");
  EXPECT_EQ(tok->encode("Hello world", true), (std::vector<int32_t>{50256, 15496, 995}));
  EXPECT_EQ(tok->encode("<|endoftext|>", false, true), (std::vector<int32_t>{50256}));
  EXPECT_NE(tok->encode("<|endoftext|>", false, false).size(), 1u);
}

TEST(TokenizerGolden, LlamaSpmMetadata) {
  const std::string path = tok_test::shared_tokenizer_dir() + "ggml-vocab-llama-spm.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "shared test vocab missing: " << path;
  auto tok = Tokenizer::from_gguf(*gguf::File::open(path));
  EXPECT_EQ(tok->kind(), VocabKind::SentencePiece);
  EXPECT_EQ(tok->n_vocab(), 32000);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_EQ(tok->unk_id(), 0);
  EXPECT_TRUE(tok->add_bos());
  EXPECT_EQ(tok->encode("Hello world", true), (std::vector<int32_t>{1, 15043, 3186}));
  EXPECT_EQ(tok->encode("", true), (std::vector<int32_t>{1}));
  EXPECT_EQ(tok->token_piece(15043), " Hello");
  EXPECT_EQ(tok->token_piece(3 + 0x0A), "\n");  // <0x0A>
  EXPECT_EQ(tok->token_piece(1), "");
  EXPECT_EQ(tok->token_piece(1, true), "<s>");
  EXPECT_EQ(tok->decode({1, 15043, 3186, 2}), "Hello world");
  EXPECT_EQ(tok->decode({1, 15043, 3186, 2}, true), "<s>Hello world</s>");
  // parse_special: "</s>" becomes the token, and text after it gets a space prefix.
  EXPECT_EQ(tok->encode("Hello</s>world", false, true), (std::vector<int32_t>{15043, 2, 3186}));
}

}  // namespace
}  // namespace lr
