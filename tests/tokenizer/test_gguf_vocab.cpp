// Tokenizer::from_gguf on hand-made GGUF images: the keys it reads, and an
// lr::Error naming the key for each kind of malformed vocabulary.
#include <chrono>
#include <filesystem>

#include "format/gguf.h"
#include "tok_test_util.h"
#include "tokenizer/byte_level.h"

namespace lr {
namespace {

// A tiny byte-level vocab: the 256 byte characters, "he", "ll", control token.
gguf::Writer gpt2_writer() {
  gguf::Writer w;
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", "smollm");
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(byte_level::byte_to_text(static_cast<uint8_t>(b)));
  tokens.push_back("he");
  tokens.push_back("ll");
  tokens.push_back("<|im_end|>");
  std::vector<int32_t> types(tokens.size(), 1);
  types[258] = 3;
  w.set_strings("tokenizer.ggml.tokens", tokens);
  w.set_i32s("tokenizer.ggml.token_type", types);
  w.set_strings("tokenizer.ggml.merges", {"h e", "l l"});
  w.set_u32("tokenizer.ggml.bos_token_id", 258);
  w.set_u32("tokenizer.ggml.eos_token_id", 258);
  w.set_bool("tokenizer.ggml.add_bos_token", true);
  w.set_string("tokenizer.chat_template", "{{ messages }}");
  return w;
}

std::unique_ptr<Tokenizer> load(const gguf::Writer& w) {
  auto f = gguf::File::from_bytes(w.to_bytes(), "vocab.gguf");
  return Tokenizer::from_gguf(*f);
}

void expect_error(const gguf::Writer& w, const char* key) {
  try {
    load(w);
    ADD_FAILURE() << "no error for " << key;
  } catch (const Error& e) {
    EXPECT_HAS(e.what(), key);
  }
}

TEST(TokenizerGguf, ReadsKeys) {
  auto tok = load(gpt2_writer());
  EXPECT_EQ(tok->n_vocab(), 259);
  EXPECT_EQ(tok->pre(), "smollm");
  EXPECT_TRUE(tok->add_bos());
  EXPECT_EQ(tok->bos_id(), 258);
  EXPECT_EQ(tok->chat_template(), "{{ messages }}");
  EXPECT_EQ(tok->encode("hello1", true), (std::vector<int32_t>{258, 256, 257, 'o', '1'}));
  EXPECT_EQ(tok->encode("x<|im_end|>", false, true), (std::vector<int32_t>{'x', 258}));
}

TEST(TokenizerGguf, MalformedVocabNamesTheKey) {
  {
    gguf::Writer w;
    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_strings("tokenizer.ggml.merges", {});
    expect_error(w, "tokenizer.ggml.tokens");
  }
  {
    gguf::Writer w = gpt2_writer();
    w.set_i32s("tokenizer.ggml.tokens", {1, 2, 3});  // wrong element type
    expect_error(w, "tokenizer.ggml.tokens");
  }
  {
    gguf::Writer w = gpt2_writer();
    w.set_f32s("tokenizer.ggml.scores", {0.0f, 1.0f});
    expect_error(w, "tokenizer.ggml.scores");
  }
  {
    gguf::Writer w = gpt2_writer();
    w.set_i32s("tokenizer.ggml.token_type", {1, 1, 1});
    expect_error(w, "tokenizer.ggml.token_type");
  }
  {
    gguf::Writer w = gpt2_writer();
    w.set_strings("tokenizer.ggml.merges", {"h e", "l zz"});
    expect_error(w, "tokenizer.ggml.merges");
  }
  {
    gguf::Writer w = gpt2_writer();
    w.set_string("tokenizer.ggml.model", "llama");  // llama needs scores
    expect_error(w, "tokenizer.ggml.scores");
  }
  {
    gguf::Writer w = gpt2_writer();
    w.set_string("tokenizer.ggml.model", "wordpiece-xyz");
    expect_error(w, "tokenizer.ggml.model");
  }
  {
    gguf::Writer w = gpt2_writer();
    w.set_u32("tokenizer.ggml.eos_token_id", 5000);
    expect_error(w, "tokenizer.ggml.eos_token_id");
  }
  {
    gguf::Writer w;
    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_strings("tokenizer.ggml.tokens", {"a", "b"});
    expect_error(w, "tokenizer.ggml.merges");  // gpt2 needs merges
  }
  {
    gguf::Writer w;
    w.set_strings("tokenizer.ggml.tokens", {"a", "b"});
    expect_error(w, "tokenizer.ggml.model");
  }
}

// Encoding speed sanity on a real vocab (reported, not asserted): ~1 MB of
// mixed text.
TEST(TokenizerGguf, MegabyteOfText) {
  const std::string dir = tok_test::shared_tokenizer_dir();
  std::string text;
  const std::string para =
      "The quick brown fox jumps over the lazy dog. Ça coûte 12,50 € — naïve café. "
      "日本語のテキスト、中文。 🚀👨‍👩‍👧 x = f(y) + 42;\n\tif (a && b) { return 0; }\n\n";
  while (text.size() < (1u << 20)) text += para;
  for (const char* name : {"ggml-vocab-gpt-2.gguf", "ggml-vocab-llama-spm.gguf"}) {
    const std::string path = dir + name;
    if (!std::filesystem::exists(path)) GTEST_SKIP() << "shared test vocab missing: " << path;
    auto tok = Tokenizer::from_gguf(*gguf::File::open(path));
    const auto t0 = std::chrono::steady_clock::now();
    const auto ids = tok->encode(text, false);
    const auto t1 = std::chrono::steady_clock::now();
    EXPECT_EQ(tok->decode(ids), text);
    std::printf("[ speed    ] %s: %zu bytes -> %zu tokens in %.0f ms\n", name, text.size(), ids.size(),
                std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
}

}  // namespace
}  // namespace lr
