#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "compress/factorize.h"
#include "compress_test_util.h"

namespace lr::compress {
namespace {

using testing::error_of;
using testing::Rng;

// Two matrices whose rows all lie in one k-dimensional row space B [k, n].
struct SharedPair {
  std::vector<float> w1, w2;
  int64_t m1, m2, n, k;
};

SharedPair make_pair(Rng& rng, int64_t m1, int64_t m2, int64_t n, int64_t k) {
  const MatD B = testing::random_matrix(rng, k, n);
  return {testing::to_floats(matmul(testing::random_matrix(rng, m1, k), B)),
          testing::to_floats(matmul(testing::random_matrix(rng, m2, k), B)),
          m1,
          m2,
          n,
          k};
}

TEST(SharedFactorize, SharedRowSpaceIsReproducedExactly) {
  Rng rng(10);
  const SharedPair p = make_pair(rng, 12, 20, 16, 5);
  const MatD spd = testing::random_spd(rng, p.n, 1e3);
  for (const MatD* gram : {static_cast<const MatD*>(nullptr), &spd}) {
    WhitenReport rep;
    const SharedFactors sf = shared_factorize({p.w1.data(), p.w2.data()}, {p.m1, p.m2}, p.n,
                                              gram ? *gram : MatD(), p.k, &rep);
    EXPECT_FALSE(rep.fell_back);
    EXPECT_EQ(rep.lambda, 0.0);
    // One basis [k, n] for the whole group, one out factor per matrix.
    ASSERT_EQ(sf.basis.rows, p.k);
    ASSERT_EQ(sf.basis.cols, p.n);
    ASSERT_EQ(sf.outs.size(), 2u);
    ASSERT_EQ(sf.outs[0].rows, p.m1);
    ASSERT_EQ(sf.outs[0].cols, p.k);
    ASSERT_EQ(sf.outs[1].rows, p.m2);
    ASSERT_EQ(sf.outs[1].cols, p.k);
    EXPECT_LT(testing::rel_diff(testing::product(sf.outs[0], sf.basis),
                                testing::to_double(p.w1, p.m1, p.n)),
              1e-5);
    EXPECT_LT(testing::rel_diff(testing::product(sf.outs[1], sf.basis),
                                testing::to_double(p.w2, p.m2, p.n)),
              1e-5);
  }
}

TEST(SharedFactorize, GroupOfOneMatchesWhitenFactorize) {
  Rng rng(20);
  const int64_t m = 14, n = 10, k = 4;
  const std::vector<float> W = testing::to_floats(testing::random_matrix(rng, m, n));
  const MatD G = testing::random_spd(rng, n, 1e2);
  const SharedFactors sf = shared_factorize({W.data()}, {m}, n, G, k);
  const Factors f = whiten_factorize(W.data(), m, n, G, k);
  EXPECT_LT(
      testing::rel_diff(testing::product(sf.outs[0], sf.basis), testing::product(f.out, f.in)),
      1e-6);
}

TEST(SharedFactorize, JointErrorIsTheStackedWhitenedTail) {
  // sum_i ||(W_i - W_i') X^T||^2 = sum_{j > k} sigma_j^2 of [W_1; W_2] L.
  Rng rng(30);
  const int64_t m1 = 9, m2 = 11, n = 12, k = 5, tokens = 300;
  const MatD W1 = testing::random_matrix(rng, m1, n), W2 = testing::random_matrix(rng, m2, n);
  const std::vector<float> w1 = testing::to_floats(W1), w2 = testing::to_floats(W2);
  MatD Xd = testing::random_matrix(rng, tokens, n);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < n; ++j) Xd(t, j) *= std::pow(0.6, static_cast<double>(j));
  const std::vector<float> X = testing::to_floats(Xd);
  const MatD G =
      matmul(testing::to_double(X, tokens, n), testing::to_double(X, tokens, n), true, false);

  const SharedFactors sf = shared_factorize({w1.data(), w2.data()}, {m1, m2}, n, G, k);
  const double e1 = activation_error(w1.data(), Factors{sf.outs[0], sf.basis, {}}, X.data(), tokens);
  const double e2 = activation_error(w2.data(), Factors{sf.outs[1], sf.basis, {}}, X.data(), tokens);

  MatD stacked(m1 + m2, n);
  for (int64_t i = 0; i < m1; ++i)
    for (int64_t j = 0; j < n; ++j) stacked(i, j) = w1[i * n + j];
  for (int64_t i = 0; i < m2; ++i)
    for (int64_t j = 0; j < n; ++j) stacked(m1 + i, j) = w2[i * n + j];
  trmm(Side::Right, Uplo::Lower, false, cholesky(G), stacked);
  const Svd s = svd(stacked);
  double tail = 0.0;
  for (size_t j = k; j < s.s.size(); ++j) tail += s.s[j] * s.s[j];
  EXPECT_NEAR(std::sqrt(e1 * e1 + e2 * e2), std::sqrt(tail), 1e-4 * std::sqrt(tail));

  // Sharing the basis can only cost accuracy versus private whitened factors of the same rank.
  const double p1 =
      activation_error(w1.data(), whiten_factorize(w1.data(), m1, n, G, k), X.data(), tokens);
  const double p2 =
      activation_error(w2.data(), whiten_factorize(w2.data(), m2, n, G, k), X.data(), tokens);
  EXPECT_GE(e1 * e1 + e2 * e2, (p1 * p1 + p2 * p2) * (1 - 1e-6));
}

TEST(SharedFactorize, SingularAndZeroGrams) {
  Rng rng(40);
  const SharedPair p = make_pair(rng, 6, 7, 10, 3);
  // Rank-deficient calibration: 4 tokens for n = 10.
  const MatD X = testing::random_matrix(rng, 4, p.n);
  WhitenReport rep;
  const SharedFactors sf = shared_factorize({p.w1.data(), p.w2.data()}, {p.m1, p.m2}, p.n,
                                            matmul(X, X, true, false), 3, &rep);
  EXPECT_GT(rep.lambda, 0.0);
  EXPECT_FALSE(rep.fell_back);
  for (float v : sf.basis.a) ASSERT_TRUE(std::isfinite(v));
  for (const MatF& o : sf.outs)
    for (float v : o.a) ASSERT_TRUE(std::isfinite(v));

  const SharedFactors z =
      shared_factorize({p.w1.data(), p.w2.data()}, {p.m1, p.m2}, p.n, MatD(p.n, p.n), 3, &rep);
  EXPECT_TRUE(rep.fell_back);
  LR_EXPECT_CONTAINS(rep.note, "all zero");
  EXPECT_LT(
      testing::rel_diff(testing::product(z.outs[1], z.basis), testing::to_double(p.w2, p.m2, p.n)),
      1e-5);
}

TEST(SharedFactorize, Errors) {
  const std::vector<float> a(6 * 4, 1.0f);
  std::vector<float> b(5 * 4, 1.0f);
  EXPECT_EQ(error_of([] { shared_factorize({}, {}, 4, MatD(), 1); }),
            "shared_factorize: empty group");
  LR_EXPECT_CONTAINS(error_of([&] {
                       shared_factorize({a.data(), b.data()}, {6}, 4, MatD(), 1);
                     }),
                     "2 matrices but 1 row counts");
  EXPECT_EQ(error_of([&] {
              shared_factorize({a.data(), b.data()}, {6, 5}, 4, MatD(), 5);
            }),
            "shared_factorize: rank 5 out of range [1, 4] for a [11 x 4] matrix");
  LR_EXPECT_CONTAINS(error_of([&] {
                       shared_factorize({a.data(), b.data()}, {6, 0}, 4, MatD(), 1);
                     }),
                     "Ws[1] shape [0 x 4]");
  LR_EXPECT_CONTAINS(error_of([&] {
                       shared_factorize({a.data(), b.data()}, {6, 5}, 4, MatD::identity(3), 1);
                     }),
                     "gram is [3 x 3], expected [4 x 4]");
  b[7] = std::nanf("");
  EXPECT_EQ(error_of([&] {
              shared_factorize({a.data(), b.data()}, {6, 5}, 4, MatD(), 2);
            }),
            "shared_factorize: Ws[1] [5 x 4] has a non-finite value (nan) at row 1, col 3");
}

TEST(SharedFactorize, WideGroupRankUpToInputWidth) {
  // k may exceed each m_i as long as k <= min(n, sum m_i).
  Rng rng(50);
  const int64_t n = 8;
  const std::vector<float> w1 = testing::to_floats(testing::random_matrix(rng, 3, n));
  const std::vector<float> w2 = testing::to_floats(testing::random_matrix(rng, 4, n));
  const SharedFactors sf =
      shared_factorize({w1.data(), w2.data()}, {3, 4}, n, MatD::identity(n), 7);
  EXPECT_LT(testing::rel_diff(testing::product(sf.outs[0], sf.basis), testing::to_double(w1, 3, n)),
            1e-5);
  EXPECT_LT(testing::rel_diff(testing::product(sf.outs[1], sf.basis), testing::to_double(w2, 4, n)),
            1e-5);
}

}  // namespace
}  // namespace lr::compress
