// Eigen whitening (S = Q diag(sqrt(lambda)), SVD-LLM v2) against the Cholesky
// form and against the whitened SVD tail it must reach.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <vector>

#include "compress/factorize.h"
#include "compress_test_util.h"

namespace lr::compress {
namespace {

using testing::Rng;

MatD gram_of(const MatD& X) {
  return matmul(X, X, true, false);
}

bool all_finite(const MatF& F) {
  for (float v : F.a)
    if (!std::isfinite(v)) return false;
  return true;
}

TEST(EigenWhiten, ExactRankKIsReproduced) {
  Rng rng(1200);
  for (auto [m, n, k] : {std::array<int64_t, 3>{8, 5, 3}, {37, 64, 10}, {96, 64, 20}}) {
    const MatD Wd = matmul(testing::random_matrix(rng, m, k), testing::random_matrix(rng, k, n));
    const std::vector<float> W = testing::to_floats(Wd);
    const MatD G = testing::random_spd(rng, n, 1e3);
    WhitenReport rep;
    const Factors f = whiten_factorize(W.data(), m, n, G, k, &rep, Whitening::Eigen);
    EXPECT_FALSE(rep.fell_back);
    EXPECT_EQ(rep.note, "");
    EXPECT_LT(testing::rel_diff(testing::product(f.out, f.in), testing::to_double(W, m, n)), 1e-5)
        << m << "x" << n;
    // Exactly rank k: the singular values past k vanish.
    ASSERT_EQ(f.sigma.size(), size_t(std::min(m, n)));
    EXPECT_LT(f.sigma[size_t(k)], 1e-5 * f.sigma[0]);
  }
}

TEST(EigenWhiten, SameOptimumAsCholeskyAndErrorIsTheSigmaTail) {
  Rng rng(1300);
  const int64_t m = 40, n = 32, r = 6, tokens = 500;
  const std::vector<float> W = testing::to_floats(testing::random_matrix(rng, m, n));
  MatD X = testing::random_matrix(rng, tokens, n);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < n; ++j) X(t, j) *= std::pow(10.0, -2.0 * double(j) / double(n));
  const std::vector<float> Xf = testing::to_floats(X);
  const MatD G = gram_of(testing::to_double(Xf, tokens, n));
  const Factors e = whiten_factorize(W.data(), m, n, G, r, nullptr, Whitening::Eigen);
  const Factors c = whiten_factorize(W.data(), m, n, G, r, nullptr, Whitening::Cholesky);
  const double ee = activation_error(W.data(), e, Xf.data(), tokens);
  const double ec = activation_error(W.data(), c, Xf.data(), tokens);
  EXPECT_NEAR(ee, ec, 1e-5 * ec);
  // The whitened spectrum does not depend on which square root of G is used.
  ASSERT_EQ(e.sigma.size(), c.sigma.size());
  for (size_t i = 0; i < e.sigma.size(); ++i)
    EXPECT_NEAR(e.sigma[i], c.sigma[i], 1e-8 * e.sigma[0]);
  double tail = 0;
  for (size_t i = r; i < e.sigma.size(); ++i) tail += e.sigma[i] * e.sigma[i];
  EXPECT_NEAR(ee, std::sqrt(tail), 1e-4 * std::sqrt(tail));
}

TEST(EigenWhiten, RankDeficientGramNeedsNoRidge) {
  // The Cholesky path needs a ridge here (test_factorize.cpp); the eigen path
  // raises the null eigenvalues to a floor and whitens without one.
  Rng rng(1400);
  const int64_t m = 10, n = 16, r = 6;
  const std::vector<float> W = testing::to_floats(testing::random_matrix(rng, m, n));
  const MatD tall = matmul(testing::random_matrix(rng, 300, 4), testing::random_matrix(rng, 4, n));
  const MatD wide = testing::random_matrix(rng, 5, n);
  for (const MatD& Xd : {tall, wide}) {
    const std::vector<float> X = testing::to_floats(Xd);
    const MatD G = gram_of(testing::to_double(X, Xd.rows, n));
    WhitenReport rep;
    const Factors f = whiten_factorize(W.data(), m, n, G, r, &rep, Whitening::Eigen);
    EXPECT_EQ(rep.lambda, 0.0);
    EXPECT_FALSE(rep.fell_back);
    LR_EXPECT_CONTAINS(rep.note, fmt::format("of {} gram eigenvalues below 1e-10", n));
    EXPECT_TRUE(all_finite(f.out));
    EXPECT_TRUE(all_finite(f.in));
    const double total =
        activation_error(W.data(), Factors{MatF(m, 1), MatF(1, n), {}}, X.data(), Xd.rows);
    const double white = activation_error(W.data(), f, X.data(), Xd.rows);
    const double chol =
        activation_error(W.data(), whiten_factorize(W.data(), m, n, G, r), X.data(), Xd.rows);
    EXPECT_LT(white, 1e-4 * total) << white << " vs " << total;
    EXPECT_LE(white, chol * (1 + 1e-6) + 1e-6 * total);
  }
}

TEST(EigenWhiten, NegativeEigenvaluesAreRaisedAndNonGramsFallBack) {
  MatD G(3, 3);
  G(0, 0) = 1;
  G(1, 1) = 1;
  G(0, 1) = G(1, 0) = -5;  // eigenvalues 6, -4 and -1.5; mean diagonal 1/6 > 0
  G(2, 2) = -1.5;
  const float W[] = {1, 2, 3, 4, 5, 6};
  WhitenReport rep;
  const Factors f = whiten_factorize(W, 2, 3, G, 1, &rep, Whitening::Eigen);
  EXPECT_FALSE(rep.fell_back);  // 6 > 0: whitened, the negative eigenvalues raised to the floor
  LR_EXPECT_CONTAINS(rep.note, "2 of 3 gram eigenvalues");
  EXPECT_TRUE(all_finite(f.in));
  MatD N(2, 2);
  N(0, 0) = 0.5;
  N(1, 1) = -1;  // mean diagonal -0.25 <= 0: not a Gram
  const Factors p = whiten_factorize(W, 2, 2, N, 1, &rep, Whitening::Eigen);
  EXPECT_TRUE(rep.fell_back);
  EXPECT_EQ(p.out.a, svd_factorize(W, 2, 2, 1).out.a);
}

// Auto on a map with more outputs than inputs: Cholesky where it holds
// without a ridge, else eigen whitening.
TEST(EigenWhiten, AutoIsCholeskyWhereItHoldsElseEigen) {
  Rng rng(1600);
  const int64_t m = 16, n = 10, r = 6;
  const std::vector<float> W = testing::to_floats(testing::random_matrix(rng, m, n));
  const MatD good = testing::random_spd(rng, n, 1e3);
  WhitenReport rep;
  const Factors a = whiten_factorize(W.data(), m, n, good, r, &rep, Whitening::Auto);
  EXPECT_EQ(rep.note, "");
  EXPECT_EQ(a.in.a, whiten_factorize(W.data(), m, n, good, r, nullptr, Whitening::Cholesky).in.a);
  const MatD X = testing::random_matrix(rng, 5, n);  // 5 tokens: a Gram of rank 5
  const MatD bad = gram_of(X);
  const Factors b = whiten_factorize(W.data(), m, n, bad, r, &rep, Whitening::Auto);
  EXPECT_EQ(rep.lambda, 0.0);
  EXPECT_FALSE(rep.fell_back);
  EXPECT_EQ(rep.note.rfind("Cholesky (", 0), 0u) << rep.note;
  LR_EXPECT_CONTAINS(rep.note, ": eigen whitening; 5 of 10 gram eigenvalues");
  EXPECT_EQ(b.in.a, whiten_factorize(W.data(), m, n, bad, r, nullptr, Whitening::Eigen).in.a);
}

// Auto on a map with no more outputs than inputs: the leading eigenvectors
// of the outputs' covariance W G W^T, no factor of G. The same spectrum and
// activation error as Cholesky on a well-conditioned Gram; on a singular one
// (5 tokens, 16 inputs) the exact optimum, whose error is the spectrum's
// tail, without the ridge Cholesky needs or the floor eigen whitening
// applies (noted by neither).
TEST(EigenWhiten, AutoProjectsOntoTheOutputsLeadingDirections) {
  Rng rng(1700);
  const int64_t m = 10, n = 16, r = 4;
  const std::vector<float> W = testing::to_floats(testing::random_matrix(rng, m, n));
  for (int64_t tokens : {200, 5}) {
    SCOPED_TRACE(tokens);
    MatD Xd = testing::random_matrix(rng, tokens, n);
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t j = 0; j < n; ++j) Xd(t, j) *= std::pow(10.0, -2.0 * double(j) / double(n));
    const std::vector<float> X = testing::to_floats(Xd);
    const MatD G = gram_of(testing::to_double(X, tokens, n));
    WhitenReport rep;
    const Factors p = whiten_factorize(W.data(), m, n, G, r, &rep, Whitening::Auto);
    EXPECT_EQ(rep.note, "");
    EXPECT_EQ(rep.lambda, 0.0);
    EXPECT_FALSE(rep.fell_back);
    EXPECT_TRUE(all_finite(p.out) && all_finite(p.in));
    ASSERT_EQ(p.sigma.size(), size_t(m));
    double tail = 0;
    for (size_t i = r; i < p.sigma.size(); ++i) tail += p.sigma[i] * p.sigma[i];
    const double err = activation_error(W.data(), p, X.data(), tokens);
    EXPECT_NEAR(err, std::sqrt(tail), 1e-4 * std::sqrt(tail));
    const Factors e = whiten_factorize(W.data(), m, n, G, r, nullptr, Whitening::Eigen);
    EXPECT_LE(err, activation_error(W.data(), e, X.data(), tokens) * (1 + 1e-6));
    if (tokens == 5) {
      EXPECT_LT(p.sigma[5], 1e-6 * p.sigma[0]);  // 5 tokens: 5 directions of output energy
      continue;
    }
    const Factors c = whiten_factorize(W.data(), m, n, G, r, nullptr, Whitening::Cholesky);
    for (size_t i = 0; i < p.sigma.size(); ++i)
      EXPECT_NEAR(p.sigma[i], c.sigma[i], 1e-8 * p.sigma[0]) << i;
    EXPECT_LT(testing::rel_diff(testing::product(p.out, p.in), testing::product(c.out, c.in)),
              1e-5);
    // Balanced as the SVD path: column j of out carries sqrt(sigma_j), and
    // row j of in is Cholesky's up to its sign.
    for (int64_t j = 0; j < r; ++j) {
      double o = 0, same = 0, flip = 0, norm = 0;
      for (int64_t x = 0; x < m; ++x) o += double(p.out(x, j)) * p.out(x, j);
      for (int64_t x = 0; x < n; ++x) {
        same = std::max(same, std::fabs(double(p.in(j, x)) - c.in(j, x)));
        flip = std::max(flip, std::fabs(double(p.in(j, x)) + c.in(j, x)));
        norm = std::max(norm, std::fabs(double(c.in(j, x))));
      }
      EXPECT_NEAR(o, p.sigma[size_t(j)], 1e-5 * p.sigma[size_t(j)]) << j;
      EXPECT_LT(std::min(same, flip), 1e-4 * norm) << j;
    }
  }
  // Exactly rank 3 (more outputs would not project): reproduced.
  const MatD W3 = matmul(testing::random_matrix(rng, m, 3), testing::random_matrix(rng, 3, n));
  const std::vector<float> W3f = testing::to_floats(W3);
  const Factors x = whiten_factorize(W3f.data(), m, n, testing::random_spd(rng, n, 1e3), 3,
                                     nullptr, Whitening::Auto);
  EXPECT_LT(testing::rel_diff(testing::product(x.out, x.in), W3), 1e-5);
}

TEST(EigenWhiten, SharedGroupOfOneMatchesWhitenFactorize) {
  Rng rng(1500);
  const int64_t m = 12, n = 9, k = 4;
  const std::vector<float> W = testing::to_floats(testing::random_matrix(rng, m, n));
  const MatD G = testing::random_spd(rng, n, 1e2);
  const SharedFactors sf = shared_factorize({W.data()}, {m}, n, G, k, nullptr, Whitening::Eigen);
  const Factors f = whiten_factorize(W.data(), m, n, G, k, nullptr, Whitening::Eigen);
  EXPECT_EQ(sf.basis.a, f.in.a);
  EXPECT_EQ(sf.outs[0].a, f.out.a);
  EXPECT_EQ(sf.sigma, f.sigma);
}

}  // namespace
}  // namespace lr::compress
