// llama.cpp's answers on the architecture fixtures (tests/fixtures/arch,
// scripts/make_arch_fixtures.py): the prompt, its 16 greedy tokens, and the
// top-5 ids and logits at every position.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace lr::test {

inline const std::string kArchDir = LOWRANK_SOURCE_DIR "/tests/fixtures/arch/";

struct ArchGolden {
  std::vector<int32_t> tokens, greedy;
  std::vector<std::vector<int>> top5;
  std::vector<std::vector<double>> top5_logits;
  double scale = 1;
};

inline ArchGolden arch_golden(const std::string& arch) {
  std::ifstream in(kArchDir + arch + ".json");
  const nlohmann::json j = nlohmann::json::parse(in);
  return {j["tokens"].get<std::vector<int32_t>>(), j["greedy"].get<std::vector<int32_t>>(),
          j["top5_ids"].get<std::vector<std::vector<int>>>(),
          j["top5_logits"].get<std::vector<std::vector<double>>>(), j["logit_scale"].get<double>()};
}

// Logits [tokens, vocab] against llama.cpp's: the top-5 ids at every
// position, and those logits within tol of the logit scale (printed).
inline void expect_llamacpp(const std::vector<float>& logits, int vocab, const ArchGolden& g,
                            double tol, const std::string& what) {
  ASSERT_EQ(logits.size(), g.tokens.size() * size_t(vocab));
  double worst = 0;
  for (size_t p = 0; p < g.tokens.size(); ++p) {
    const float* row = logits.data() + p * size_t(vocab);
    std::vector<int> ids(static_cast<size_t>(vocab));
    for (int v = 0; v < vocab; ++v) ids[size_t(v)] = v;
    std::partial_sort(ids.begin(), ids.begin() + 5, ids.end(),
                      [&](int a, int b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
    EXPECT_EQ(std::vector<int>(ids.begin(), ids.begin() + 5), g.top5[p]) << "position " << p;
    for (size_t i = 0; i < 5; ++i)
      worst = std::max(worst, std::abs(double(row[g.top5[p][i]]) - g.top5_logits[p][i]));
  }
  EXPECT_LT(worst / g.scale, tol);
  fmt::print("  {:<34} top-5 logits within {:.1e} of the logit scale ({:.2f})\n", what,
             worst / g.scale, g.scale);
}

}  // namespace lr::test
