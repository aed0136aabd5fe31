// Tokenizer algorithms on small in-memory vocabularies: byte-level BPE merge
// order, SentencePiece scoring and byte fallback, special-token splitting,
// UTF-8 helpers and the streaming detokenizer.
#include "tok_test_util.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/utf8.h"

namespace lr {
namespace {

// gpt2 toy: ids 0..255 are the byte-level characters of bytes 0..255, then the
// merge results, then specials.
VocabSpec toy_gpt2() {
  VocabSpec s;
  s.source = "toy-gpt2";
  s.model = "gpt2";
  s.pre = "gpt2";
  for (int b = 0; b < 256; ++b) s.tokens.push_back(byte_level::byte_to_text(static_cast<uint8_t>(b)));
  s.types.assign(256, 1);
  auto add = [&](std::string t, int type = 1) {
    s.tokens.push_back(std::move(t));
    s.types.push_back(type);
  };
  for (const char* m : {"h e", "l l", "he ll", "hell o", "Ġ w", "o r", "Ġw or", "Ġwor l", "Ġworl d", "a a"}) {
    std::string ms = m;
    s.merges.push_back(ms);
    const size_t sp = ms.find(' ');
    add(ms.substr(0, sp) + ms.substr(sp + 1));
  }
  add("<|end|>", 3);     // control
  add("<|user|>", 4);    // user-defined
  add("<|end|>x", 3);    // longer control sharing a prefix
  s.eos = static_cast<int64_t>(s.tokens.size()) - 3;
  return s;
}

int32_t id_of(const Tokenizer& t, const std::string& text) {
  auto id = t.find(text);
  EXPECT_TRUE(id.has_value()) << text;
  return id.value_or(-1);
}

TEST(TokenizerBpe, MergesByRankLeftmostFirst) {
  auto tok = Tokenizer::from_spec(toy_gpt2());
  EXPECT_EQ(tok->encode("hello", false), (std::vector<int32_t>{id_of(*tok, "hello")}));
  EXPECT_EQ(tok->encode("hello world", false),
            (std::vector<int32_t>{id_of(*tok, "hello"), id_of(*tok, "Ġworld")}));
  // "a a" applies to the leftmost pair first: aaa -> aa a.
  EXPECT_EQ(tok->encode("aaa", false), (std::vector<int32_t>{id_of(*tok, "aa"), 'a'}));
  EXPECT_EQ(tok->encode("aaaa", false), (std::vector<int32_t>{id_of(*tok, "aa"), id_of(*tok, "aa")}));
  // Unmerged bytes stay byte tokens.
  EXPECT_EQ(tok->encode("xyz", false), (std::vector<int32_t>{'x', 'y', 'z'}));
  EXPECT_EQ(tok->decode(tok->encode("hello world", false)), "hello world");
  EXPECT_FALSE(tok->add_bos());
  EXPECT_EQ(tok->bos_id(), -1);
  EXPECT_EQ(tok->encode("hi", true), (std::vector<int32_t>{'h', 'i'}));  // no BOS token
}

TEST(TokenizerBpe, ArbitraryBytesRoundTrip) {
  auto tok = Tokenizer::from_spec(toy_gpt2());
  std::string bytes;
  for (int b = 0; b < 256; ++b) bytes += static_cast<char>(b);
  bytes += "\xff\xfe hello \xe2\x82 world \xc3";  // invalid UTF-8 in places
  EXPECT_EQ(tok->decode(tok->encode(bytes, false)), bytes);
}

TEST(TokenizerBpe, SpecialTokens) {
  auto tok = Tokenizer::from_spec(toy_gpt2());
  const int32_t end = id_of(*tok, "<|end|>"), endx = id_of(*tok, "<|end|>x"), user = id_of(*tok, "<|user|>");
  // Control tokens only with parse_special.
  auto plain = tok->encode("a<|end|>", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), end), 0);
  EXPECT_EQ(tok->encode("a<|end|>", false, true), (std::vector<int32_t>{'a', end}));
  // Longest match first.
  EXPECT_EQ(tok->encode("<|end|>x<|end|>", false, true), (std::vector<int32_t>{endx, end}));
  // User-defined tokens are always whole units.
  EXPECT_EQ(tok->encode("a<|user|>b", false, false), (std::vector<int32_t>{'a', user, 'b'}));
  EXPECT_TRUE(tok->is_control(end));
  EXPECT_FALSE(tok->is_control(user));
  EXPECT_EQ(tok->decode({'a', end, user}), "a<|user|>");
  EXPECT_EQ(tok->decode({'a', end, user}, true), "a<|end|><|user|>");
  EXPECT_THROW(tok->token_piece(-1), Error);
  EXPECT_THROW(tok->token_piece(tok->n_vocab()), Error);
}

TEST(TokenizerPre, Gpt2WhitespaceRuns) {
  PreTokenizer pre(PreTokenizer::patterns_for("gpt2", nullptr));
  auto split = [&](std::string_view s) {
    std::vector<std::string_view> v;
    pre.split(s, v);
    return std::vector<std::string>(v.begin(), v.end());
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(split("   Hello"), (V{"  ", " Hello"}));
  EXPECT_EQ(split("a   "), (V{"a", "   "}));
  EXPECT_EQ(split("it's 42!"), (V{"it", "'s", " 42", "!"}));
  EXPECT_EQ(split("\n\n x"), (V{"\n\n", " x"}));
  EXPECT_EQ(split("a\xff b"), (V{"a", "\xff", " b"}));
  PreTokenizer smol(PreTokenizer::patterns_for("smollm", nullptr));
  std::vector<std::string_view> v;
  smol.split("ab 123", v);
  EXPECT_EQ(std::vector<std::string>(v.begin(), v.end()), (V{"ab", " ", "1", "2", "3"}));
  PreTokenizer l3(PreTokenizer::patterns_for("llama-bpe", nullptr));
  v.clear();
  l3.split("I'VE 12345 x", v);
  EXPECT_EQ(std::vector<std::string>(v.begin(), v.end()), (V{"I", "'VE", " ", "123", "45", " x"}));
  bool known = true;
  PreTokenizer::patterns_for("no-such-pre", &known);
  EXPECT_FALSE(known);
  EXPECT_THROW(PreTokenizer({"("}), Error);
}

// SentencePiece toy: <unk> <s> </s> <0x00>..<0xFF>, then pieces with scores.
VocabSpec toy_spm() {
  VocabSpec s;
  s.source = "toy-spm";
  s.model = "llama";
  s.tokens = {"<unk>", "<s>", "</s>"};
  s.types = {2, 3, 3};
  char buf[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    s.tokens.push_back(buf);
    s.types.push_back(6);
  }
  s.scores.assign(s.tokens.size(), 0.0f);
  auto add = [&](const char* t, float score) {
    s.tokens.push_back(t);
    s.types.push_back(1);
    s.scores.push_back(score);
  };
  add("\xE2\x96\x81", -1);            // ▁
  add("a", -2);
  add("b", -2);
  add("c", -2);
  add("\xE2\x96\x81" "a", -5);        // ▁a
  add("ab", -3);                      // preferred over ▁a
  add("\xE2\x96\x81" "ab", -4);       // ▁ab
  add("bc", -6);
  add("\xE2\x96\x81\xE2\x96\x81", -7);  // ▁▁
  return s;
}

TEST(TokenizerSpm, ScoresAndByteFallback) {
  auto tok = Tokenizer::from_spec(toy_spm());
  const int32_t sp = id_of(*tok, "\xE2\x96\x81"), ab = id_of(*tok, "\xE2\x96\x81" "ab"),
                c = id_of(*tok, "c"), spsp = id_of(*tok, "\xE2\x96\x81\xE2\x96\x81");
  EXPECT_TRUE(tok->add_bos());
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  // "▁abc": ab (-3) first, then ▁+ab (-4); "bc" never forms.
  EXPECT_EQ(tok->encode("abc", true), (std::vector<int32_t>{1, ab, c}));
  // "€" is not a piece: its three bytes.
  EXPECT_EQ(tok->encode("\xE2\x82\xAC", false), (std::vector<int32_t>{sp, 3 + 0xE2, 3 + 0x82, 3 + 0xAC}));
  EXPECT_EQ(tok->encode(" ", false), (std::vector<int32_t>{spsp}));
  EXPECT_EQ(tok->encode("", false), (std::vector<int32_t>{}));
  EXPECT_EQ(tok->decode(tok->encode("abc \xE2\x82\xAC", true)), "abc \xE2\x82\xAC");
  // Control tokens never form from plain text.
  const auto plain = tok->encode("<s>", false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 1), 0);
  EXPECT_EQ(tok->encode("a<s>b", false, true)[1], 1);
}

TEST(TokenizerSpm, NoSpacePrefixAndUnknown) {
  VocabSpec s = toy_spm();
  s.add_space_prefix = false;
  // Remove the byte tokens' type so "€" has no fallback: it becomes <unk>.
  for (int b = 0; b < 256; ++b) s.tokens[3 + b] = "<byte" + std::to_string(b) + ">";
  auto tok = Tokenizer::from_spec(s);
  EXPECT_EQ(tok->encode("ab\xE2\x82\xAC", false), (std::vector<int32_t>{id_of(*tok, "ab"), 0}));
  EXPECT_EQ(tok->decode(tok->encode("ab", false)), "ab");
}

bool valid_utf8(const std::string& s) { return utf8::is_valid(s); }

TEST(TokenizerStream, EmojiSplitAcrossByteTokens) {
  auto tok = Tokenizer::from_spec(toy_spm());
  const std::string text = "a\xF0\x9F\x98\x80" "b\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9";  // a😀b👨‍👩
  const auto ids = tok->encode(text, true);
  ASSERT_GT(ids.size(), 12u);
  StreamDecoder sd(*tok);
  std::string all;
  int empty_pushes = 0;
  for (int32_t id : ids) {
    const std::string piece = sd.push(id);
    EXPECT_TRUE(valid_utf8(piece)) << tok_test::escape(piece);
    if (piece.empty()) ++empty_pushes;
    all += piece;
  }
  const std::string rest = sd.flush();
  EXPECT_EQ(rest, "");
  all += rest;
  EXPECT_EQ(all, tok->decode(ids));
  EXPECT_EQ(all, text);
  EXPECT_GE(empty_pushes, 3);  // the held-back bytes of 😀
}

TEST(TokenizerStream, ByteLevelAndInvalidBytes) {
  auto tok = Tokenizer::from_spec(toy_gpt2());
  const std::string text = "x\xF0\x9F\x98\x80y\xE2\x82" "z\x80\xF0";  // emoji, truncated €, stray bytes
  const auto ids = tok->encode(text, false);
  StreamDecoder sd(*tok);
  std::string all;
  std::vector<std::string> pieces;
  for (int32_t id : ids) pieces.push_back(sd.push(id)), all += pieces.back();
  all += sd.flush();
  EXPECT_EQ(all, tok->decode(ids));
  EXPECT_EQ(all, text);
  // The emoji comes out in one piece.
  EXPECT_NE(std::find(pieces.begin(), pieces.end(), "\xF0\x9F\x98\x80"), pieces.end());
  sd.reset();
  EXPECT_EQ(sd.push('a'), "a");
}

TEST(TokenizerUtf8, IncompleteTail) {
  EXPECT_EQ(utf8::incomplete_tail(""), 0u);
  EXPECT_EQ(utf8::incomplete_tail("abc"), 0u);
  EXPECT_EQ(utf8::incomplete_tail("a\xF0"), 1u);
  EXPECT_EQ(utf8::incomplete_tail("a\xF0\x9F"), 2u);
  EXPECT_EQ(utf8::incomplete_tail("a\xF0\x9F\x98"), 3u);
  EXPECT_EQ(utf8::incomplete_tail("a\xF0\x9F\x98\x80"), 0u);
  EXPECT_EQ(utf8::incomplete_tail("\xE0\x80"), 0u);  // overlong: can never complete
  EXPECT_EQ(utf8::incomplete_tail("\xED\xA0"), 0u);  // surrogate
  EXPECT_EQ(utf8::incomplete_tail("\x80\x80"), 0u);
  EXPECT_TRUE(utf8::is_valid("\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80"));
  EXPECT_FALSE(utf8::is_valid("\xC0\xAF"));
  EXPECT_FALSE(utf8::is_valid("\xF4\x90\x80\x80"));
  EXPECT_EQ(byte_level::encode(" \n"), "\xC4\xA0\xC4\x8A");  // "ĠĊ"
  EXPECT_EQ(byte_level::decode("\xC4\xA0\xC4\x8A"), " \n");
}

TEST(TokenizerMalformed, SpecErrorsNameTheKey) {
  auto expect_error = [](VocabSpec s, const char* key) {
    try {
      Tokenizer::from_spec(std::move(s));
      ADD_FAILURE() << "no error for " << key;
    } catch (const Error& e) {
      EXPECT_HAS(e.what(), key);
    }
  };
  VocabSpec s = toy_spm();
  s.scores.pop_back();
  expect_error(s, "tokenizer.ggml.scores");
  s = toy_spm();
  s.scores.clear();
  expect_error(s, "tokenizer.ggml.scores");
  s = toy_spm();
  s.types.push_back(1);
  expect_error(s, "tokenizer.ggml.token_type");
  s = toy_spm();
  s.types[5] = 9;
  expect_error(s, "tokenizer.ggml.token_type");
  s = toy_spm();
  s.tokens.clear();
  s.scores.clear();
  s.types.clear();
  expect_error(s, "tokenizer.ggml.tokens");
  s = toy_spm();
  s.model = "bert";
  expect_error(s, "tokenizer.ggml.model");
  s = toy_spm();
  s.bos = 100000;
  expect_error(s, "tokenizer.ggml.bos_token_id");
  VocabSpec g = toy_gpt2();
  g.merges.push_back("h nosuchtoken");
  expect_error(g, "tokenizer.ggml.merges");
  g = toy_gpt2();
  g.merges.push_back("nospace");
  expect_error(g, "tokenizer.ggml.merges");
}

TEST(TokenizerSpeed, LargeInputs) {
  // Sanity only (not timed): 1 MB texts, including a single 1 MB "word" and a
  // 1 MB whitespace run, must finish and round-trip.
  auto gpt2 = Tokenizer::from_spec(toy_gpt2());
  auto spm = Tokenizer::from_spec(toy_spm());
  std::string prose;
  while (prose.size() < (1u << 20)) prose += "hello world, aaa abc \xE2\x82\xAC 123\n";
  VocabSpec l3 = toy_gpt2();
  l3.pre = "llama-bpe";
  auto llama3 = Tokenizer::from_spec(l3);
  std::string mixed_ws;
  while (mixed_ws.size() < (1u << 20)) mixed_ws += " \t\n \r\n  ";
  for (const std::string& text : {prose, std::string(1u << 20, 'a'), std::string(1u << 20, ' '),
                                  std::string(1u << 20, '!'), std::string(1u << 20, '\n'), mixed_ws}) {
    EXPECT_EQ(gpt2->decode(gpt2->encode(text, false)), text);
    EXPECT_EQ(llama3->decode(llama3->encode(text, false)), text);
    EXPECT_EQ(spm->decode(spm->encode(text, false)), text);
  }
}

}  // namespace
}  // namespace lr
