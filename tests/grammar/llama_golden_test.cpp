// Against llama.cpp's grammar sampler (scripts/make_grammar_fixtures.py):
// its example grammars parse here, strings it accepts/rejects are
// sentences/non-sentences here, and for SmolLM2's 49152-token vocabulary the
// token mask after a prefix is exactly the set llama.cpp allows.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "fixture_util.h"
#include "grammar/token_mask.h"

namespace lr::grammar {
namespace {

std::string grammar_text(const std::string& name, const nlohmann::json& cases) {
  if (cases["converted"].contains(name)) return cases["converted"][name];
  return test::read_fixture("gbnf/" + name);
}

TEST(LlamaGolden, ExampleGrammarsParse) {
  size_t n = 0;
  for (const auto& entry : std::filesystem::directory_iterator(test::fixture_path("gbnf"))) {
    SCOPED_TRACE(entry.path().string());
    auto g = Grammar::parse(test::read_fixture("gbnf/" + entry.path().filename().string()));
    EXPECT_GT(g.rule_count(), 1u);
    ++n;
  }
  EXPECT_EQ(n, 8u);  // arithmetic c chess english japanese json json_arr list
}

TEST(LlamaGolden, AcceptsWhatLlamaAccepts) {
  auto cases = nlohmann::json::parse(test::read_fixture("gbnf_cases.json"));
  size_t accepted = 0, rejected = 0;
  for (const auto& c : cases["cases"]) {
    auto g = Grammar::parse_shared(grammar_text(c["grammar"], cases));
    Matcher m(g);
    std::string text = c["text"];
    bool got = m.accept_bytes(text) && m.can_end();
    EXPECT_EQ(got, c["accept"].get<bool>()) << c["grammar"] << ": " << text;
    (got ? accepted : rejected)++;
  }
  EXPECT_GT(accepted, 15u);
  EXPECT_GT(rejected, 15u);
}

struct Vocab {
  std::vector<std::string> pieces;
  std::vector<int32_t> eog;
};

const Vocab& vocab() {
  static const Vocab v = [] {
    auto j = nlohmann::json::parse(test::read_fixture("vocab.json"));
    Vocab out;
    for (const auto& p : j["pieces_latin1"])
      out.pieces.push_back(test::latin1_bytes(p.get<std::string>()));
    out.eog = j["eog"].get<std::vector<int32_t>>();
    return out;
  }();
  return v;
}

std::vector<uint8_t> unpack_bitmap(const std::string& b64, size_t n) {
  static const std::string abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::vector<uint8_t> bytes;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : b64) {
    if (c == '=') break;
    acc = (acc << 6) | static_cast<uint32_t>(abc.find(c));
    if ((bits += 6) >= 8) bytes.push_back(static_cast<uint8_t>(acc >> (bits -= 8)));
  }
  std::vector<uint8_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = (bytes[i / 8] >> (i % 8)) & 1;
  return out;
}

std::string from_hex(const std::string& h) {
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2)
    out += static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16));
  return out;
}

TEST(LlamaGolden, TokenMasksMatchLlamaCpp) {
  auto cases = nlohmann::json::parse(test::read_fixture("gbnf_cases.json"));
  auto masks = nlohmann::json::parse(test::read_fixture("masks.json"));
  const Vocab& v = vocab();
  ASSERT_EQ(v.pieces.size(), 49152u);
  TokenMask mask(v.pieces, v.eog);
  for (const auto& c : masks) {
    std::string prefix = from_hex(c["prefix_hex"]);
    SCOPED_TRACE(c["grammar"].get<std::string>() + " after '" + prefix + "'");
    Matcher m(Grammar::parse_shared(grammar_text(c["grammar"], cases)));
    ASSERT_TRUE(m.accept_bytes(prefix));
    std::vector<uint8_t> got;
    mask.fill(m, got);
    auto want = unpack_bitmap(c["allowed"], v.pieces.size());
    size_t count = 0, differ = 0;
    for (size_t t = 0; t < want.size(); ++t) {
      count += got[t];
      if (got[t] != want[t] && ++differ <= 5)
        ADD_FAILURE() << "token " << t << " '" << v.pieces[t] << "': llama.cpp " << int(want[t])
                      << ", here " << int(got[t]);
    }
    EXPECT_EQ(count, c["count"].get<size_t>());
  }
}

// Prints (does not assert) the time of one mask over the 49152-token
// vocabulary with a JSON grammar in the middle of a string, where nearly
// every token survives and the walk visits most of the trie.
TEST(LlamaGolden, MaskTiming) {
  const Vocab& v = vocab();
  TokenMask mask(v.pieces, v.eog);
  auto cases = nlohmann::json::parse(test::read_fixture("gbnf_cases.json"));
  Matcher m(Grammar::parse_shared(test::read_fixture("gbnf/json.gbnf")));
  ASSERT_TRUE(m.accept_bytes(R"({"name": "Jo)"));
  std::vector<uint8_t> allowed;
  mask.fill(m, allowed);  // warm the per-thread scratch
  const int reps = 20;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) mask.fill(m, allowed);
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
      reps;
  Matcher structural(Grammar::parse_shared(test::read_fixture("gbnf/json.gbnf")));
  ASSERT_TRUE(structural.accept_bytes(R"({"a": [1, 2)"));
  t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) mask.fill(structural, allowed);
  double ms2 =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
      reps;
  std::printf("mask over %zu tokens (%zu trie nodes): %.2f ms mid-string, %.3f ms mid-array\n",
              v.pieces.size(), mask.trie_nodes(), ms, ms2);
}

}  // namespace
}  // namespace lr::grammar
