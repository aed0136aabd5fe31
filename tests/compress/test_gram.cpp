#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "compress/gram.h"
#include "compress_test_util.h"

namespace lr::compress {
namespace {

using testing::error_of;
using testing::Rng;

std::vector<float> random_tokens(Rng& rng, int64_t tokens, int64_t n) {
  std::vector<float> X(static_cast<size_t>(tokens * n));
  for (size_t i = 0; i < X.size(); ++i) X[i] = static_cast<float>(rng.normal() * (1.0 + i % 7));
  return X;
}

// sum_t x_t x_t^T with a plain double loop.
MatD naive_gram(const std::vector<float>& X, int64_t n) {
  const int64_t tokens = static_cast<int64_t>(X.size()) / n;
  MatD G(n, n);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j)
        G(i, j) += static_cast<double>(X[t * n + i]) * static_cast<double>(X[t * n + j]);
  return G;
}

void expect_symmetric(const MatD& G) {
  for (int64_t i = 0; i < G.rows; ++i)
    for (int64_t j = 0; j < G.cols; ++j) ASSERT_EQ(G(i, j), G(j, i)) << i << "," << j;
}

TEST(GramAccumulator, StartsEmpty) {
  GramAccumulator acc(3);
  EXPECT_EQ(acc.n(), 3);
  EXPECT_EQ(acc.count(), 0);
  EXPECT_EQ(acc.gram().rows, 3);
  EXPECT_EQ(acc.gram().cols, 3);
  for (double v : acc.gram().a) EXPECT_EQ(v, 0.0);
  acc.add(nullptr, 0);
  EXPECT_EQ(acc.count(), 0);
}

TEST(GramAccumulator, KnownSmallGram) {
  // Tokens (1, 2) and (3, -1): G = [[1+9, 2-3], [2-3, 4+1]].
  GramAccumulator acc(2);
  const float X[] = {1, 2, 3, -1};
  acc.add(X, 2);
  EXPECT_EQ(acc.count(), 2);
  EXPECT_EQ(acc.gram().a, (std::vector<double>{10, -1, -1, 5}));
}

TEST(GramAccumulator, MatchesNaiveLoopAcrossChunkBoundaries) {
  constexpr int64_t C = GramAccumulator::kChunkTokens;
  const int64_t n = 19;
  for (int64_t tokens : {int64_t{1}, C - 1, C, C + 1, 2 * C, 3 * C + 7}) {
    Rng rng(static_cast<uint64_t>(tokens));
    const std::vector<float> X = random_tokens(rng, tokens, n);
    GramAccumulator acc(n);
    acc.add(X.data(), tokens);
    EXPECT_EQ(acc.count(), tokens);
    EXPECT_LT(testing::rel_diff(acc.gram(), naive_gram(X, n)), 1e-9) << tokens;
    expect_symmetric(acc.gram());
  }
}

TEST(GramAccumulator, IncrementalAddsAndMergeEqualOneBigAdd) {
  constexpr int64_t C = GramAccumulator::kChunkTokens;
  const int64_t n = 33, tokens = 2 * C + 45;
  Rng rng(7);
  const std::vector<float> X = random_tokens(rng, tokens, n);
  const MatD ref = naive_gram(X, n);

  // Uneven pieces that straddle the chunk size.
  GramAccumulator a(n), b(n);
  const int64_t cut1 = C + 3, cut2 = C + 3 + 17;
  a.add(X.data(), cut1);
  a.add(X.data() + cut1 * n, cut2 - cut1);
  b.add(X.data() + cut2 * n, tokens - cut2);
  EXPECT_EQ(a.count(), cut2);
  EXPECT_EQ(b.count(), tokens - cut2);
  a.merge(b);
  EXPECT_EQ(a.count(), tokens);
  EXPECT_LT(testing::rel_diff(a.gram(), ref), 1e-9);
  expect_symmetric(a.gram());

  GramAccumulator empty(n);
  a.merge(empty);
  EXPECT_EQ(a.count(), tokens);
  EXPECT_LT(testing::rel_diff(a.gram(), ref), 1e-9);
}

TEST(GramAccumulator, LargeWidthMatchesNaive) {
  // n above the symmetrisation tile (64) and not a multiple of it.
  const int64_t n = 150, tokens = 300;
  Rng rng(11);
  const std::vector<float> X = random_tokens(rng, tokens, n);
  GramAccumulator acc(n);
  acc.add(X.data(), tokens);
  EXPECT_LT(testing::rel_diff(acc.gram(), naive_gram(X, n)), 1e-9);
  expect_symmetric(acc.gram());
}

TEST(GramAccumulator, Errors) {
  LR_EXPECT_CONTAINS(error_of([] { GramAccumulator acc(0); }), "width n=0");
  GramAccumulator a(4), b(5);
  LR_EXPECT_CONTAINS(error_of([&] { a.merge(b); }), "width mismatch (4 vs 5)");
  LR_EXPECT_CONTAINS(error_of([&] { a.add(nullptr, -1); }), "negative token count");
  std::vector<float> X(12, 1.0f);
  X[6] = std::numeric_limits<float>::infinity();
  LR_EXPECT_CONTAINS(error_of([&] { a.add(X.data(), 3); }),
                     "non-finite value (inf) at token 1, column 2");
}

}  // namespace
}  // namespace lr::compress
