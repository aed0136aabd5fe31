// TokenMask on a small hand-made vocabulary.
#include "grammar/token_mask.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

#include "core/error.h"
#include "grammar/json_schema.h"

namespace lr::grammar {
namespace {

TEST(TokenMask, SmallVocabulary) {
  // 0 empty (a control token), 1..: pieces, 7 the end token, 8 a split euro sign.
  std::vector<std::string> pieces = {"",     "a",    "ab",   "abc",  "b", "\xE2\x82",
                                     "\xAC", "</s>", "\xE2", "\xFF", "ba"};
  TokenMask mask(pieces, {7});
  auto g = Grammar::parse_shared("root ::= \"a\" \"b\"* \"\xE2\x82\xAC\"?");
  Matcher m(g);
  std::vector<uint8_t> allowed;
  mask.fill(m, allowed);
  EXPECT_EQ(allowed, (std::vector<uint8_t>{0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0}));
  ASSERT_TRUE(m.accept_bytes("ab"));
  mask.fill(m, allowed);
  EXPECT_EQ(allowed, (std::vector<uint8_t>{0, 0, 0, 0, 1, 1, 0, 1, 1, 0, 0}));
  ASSERT_TRUE(m.accept_bytes("\xE2\x82"));  // half of the euro sign
  mask.fill(m, allowed);
  EXPECT_EQ(allowed, (std::vector<uint8_t>{0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0}));
  ASSERT_TRUE(m.accept_bytes("\xAC"));
  mask.fill(m, allowed);
  EXPECT_EQ(allowed, (std::vector<uint8_t>{0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0}));
  EXPECT_THROW(TokenMask(pieces, {42}), Error);
}

}  // namespace
}  // namespace lr::grammar

namespace lr::grammar {
namespace {

// The trie walk against its brute-force twin: every token tried on a copy
// of the matcher, on a random vocabulary of 1..4-byte pieces (ASCII JSON
// characters, whole and split UTF-8 characters), along random walks through
// JSON-schema grammars.
TEST(TokenMask, TrieWalkEqualsBruteForce) {
  const std::vector<std::string> alphabet = {
      "{", "}", "[", "]", "\"", ":", ",", " ", "\n", "a",        "b",    "n",    "u", "l",
      "t", "r", "e", "0", "1",  "9", "-", ".", "\\", "\xC3\xA9", "\xC3", "\xA9", "x"};
  std::mt19937 rng(7);
  std::vector<std::string> vocab = {""};  // a control token
  for (int i = 0; i < 3000; ++i) {
    std::string piece;
    for (int k = 0, n = 1 + int(rng() % 4); k < n; ++k) piece += alphabet[rng() % alphabet.size()];
    vocab.push_back(piece);
  }
  const int32_t end = int32_t(vocab.size());
  vocab.push_back("</s>");
  const TokenMask mask(vocab, {end});
  const char* schemas[] = {
      R"({"type": "object", "properties": {"a": {"type": "string", "maxLength": 5},
          "b": {"type": "array", "items": {"type": "integer", "minimum": -10, "maximum": 99}}},
          "required": ["a"], "additionalProperties": false})",
      R"({"anyOf": [{"type": "null"}, {"type": "boolean"}, {"type": "number"}, {"enum": ["abé", "ba"]}]})"};
  for (const char* schema : schemas) {
    SCOPED_TRACE(schema);
    auto g = Grammar::parse_shared(schema_to_gbnf(std::string_view(schema)));
    std::map<std::string, std::vector<uint8_t>>
        by_state;  // Matcher::state_key: equal keys, equal masks
    for (int walk = 0; walk < 20; ++walk) {
      Matcher m(g);
      for (int step = 0; step < 40; ++step) {
        std::vector<uint8_t> fast, slow(vocab.size(), 0);
        mask.fill(m, fast);
        for (size_t id = 1; id < vocab.size(); ++id) {
          if (int32_t(id) == end) {
            slow[id] = m.can_end();
            continue;
          }
          Matcher copy = m;
          slow[id] = copy.accept_bytes(vocab[id]);
        }
        ASSERT_EQ(fast, slow) << "walk " << walk << " step " << step;
        const auto [at, fresh] = by_state.emplace(m.state_key(), fast);
        ASSERT_EQ(at->second, fast) << "a state key shared by two masks";
        std::vector<size_t> ok;
        for (size_t id = 1; id < vocab.size(); ++id)
          if (fast[id] && int32_t(id) != end) ok.push_back(id);
        if (ok.empty()) break;
        ASSERT_TRUE(m.accept_bytes(vocab[ok[rng() % ok.size()]]));
      }
    }
  }
}

}  // namespace
}  // namespace lr::grammar
