#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "compress/factorize.h"
#include "compress/gram.h"
#include "compress_test_util.h"

namespace lr::compress {
namespace {

using testing::error_of;
using testing::Rng;

// W = A B with A [m, k], B [k, n] Gaussian: rank exactly k (before float rounding).
MatD rank_k_matrix(Rng& rng, int64_t m, int64_t n, int64_t k) {
  return matmul(testing::random_matrix(rng, m, k), testing::random_matrix(rng, k, n));
}

// X [tokens, n] with covariance Q diag(scale_j^2) Q^T, scale_j = 10^(-decades * j / n).
MatD correlated_inputs(Rng& rng, int64_t tokens, int64_t n, double decades) {
  MatD Z = testing::random_matrix(rng, tokens, n);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t j = 0; j < n; ++j)
      Z(t, j) *= std::pow(10.0, -decades * static_cast<double>(j) / static_cast<double>(n));
  const Svd q = svd(testing::random_matrix(rng, n, n));
  return matmul(Z, q.u, false, true);
}

MatD gram_of(const MatD& X) {
  return matmul(X, X, true, false);
}

bool all_finite(const MatF& F) {
  for (float v : F.a)
    if (!std::isfinite(v)) return false;
  return true;
}

// ---------------------------------------------------------------- output energy

TEST(OutputEnergy, IsTheTraceOfWGWt) {
  // Against the sum over calibration tokens of ||W x||^2 (G = X^T X), with
  // more rows than one block of 256 and a last block that is not whole.
  Rng rng(7);
  const int64_t m = 300, n = 24, tokens = 40;
  const MatD X = testing::random_matrix(rng, tokens, n);
  const MatD Wd = testing::random_matrix(rng, m, n);
  std::vector<float> W(Wd.a.begin(), Wd.a.end());
  double want = 0;
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t i = 0; i < m; ++i) {
      double y = 0;
      for (int64_t j = 0; j < n; ++j) y += double(W[size_t(i * n + j)]) * X(t, j);
      want += y * y;
    }
  EXPECT_NEAR(output_energy(W.data(), m, n, gram_of(X)), want, 1e-10 * want);
}

// ---------------------------------------------------------------- rank formulas

TEST(RankForKeep, KnownValues) {
  EXPECT_EQ(rank_for_keep(0.6, 576, 576), 172);   // 0.6 * 288 = 172.8
  EXPECT_EQ(rank_for_keep(0.6, 1536, 576), 251);  // 0.6 * 1536 * 576 / 2112 = 251.3
  EXPECT_EQ(rank_for_keep(0.6, 576, 1536), 251);
  // LLaMA-7B SVD-LLM ranks (checkpoint-formats.md §3).
  EXPECT_EQ(rank_for_keep(0.8, 4096, 4096), 1638);
  EXPECT_EQ(rank_for_keep(0.8, 11008, 4096), 2388);
  EXPECT_EQ(rank_for_keep(0.5, 4096, 4096), 1024);
  EXPECT_EQ(rank_for_keep(0.5, 4096, 11008), 1492);
  EXPECT_EQ(rank_for_keep(0.6, 4096, 4096), 1228);
  EXPECT_EQ(rank_for_keep(0.6, 11008, 4096), 1791);
}

TEST(RankForKeep, KeepOneMeansDenseParameterCountNotFullRank) {
  // keep = 1.0 spends exactly the dense budget: r (m + n) = m n -> r = m n / (m + n).
  EXPECT_EQ(rank_for_keep(1.0, 576, 576), 288);
  EXPECT_EQ(rank_for_keep(1.0, 4096, 11008), 2985);
}

TEST(RankForKeep, ClampedToAtLeastOne) {
  EXPECT_EQ(rank_for_keep(0.01, 2, 2), 1);
  EXPECT_EQ(rank_for_keep(1e-9, 1, 1000), 1);
  EXPECT_EQ(rank_for_keep(1.0, 1, 1), 1);
}

TEST(RankForKeep, BudgetIsRespectedAndTight) {
  for (double keep : {0.1, 0.25, 0.5, 0.7, 0.95, 1.0})
    for (auto [m, n] : {std::pair<int64_t, int64_t>{64, 64}, {100, 37}, {3072, 1024}}) {
      const int64_t r = rank_for_keep(keep, m, n);
      EXPECT_LE(static_cast<double>(r * (m + n)), keep * m * n + 1e-9)
          << keep << " " << m << " " << n;
      EXPECT_GT(static_cast<double>((r + 1) * (m + n)), keep * m * n)
          << keep << " " << m << " " << n;
    }
}

TEST(RankForKeep, RejectsBadKeep) {
  EXPECT_EQ(error_of([] { rank_for_keep(0.0, 4, 4); }), "keep must be in (0, 1], got 0");
  EXPECT_EQ(error_of([] { rank_for_keep(1.5, 4, 4); }), "keep must be in (0, 1], got 1.5");
  EXPECT_EQ(error_of([] { rank_for_keep(-0.2, 4, 4); }), "keep must be in (0, 1], got -0.2");
  EXPECT_EQ(error_of([] { rank_for_keep(std::nan(""), 4, 4); }), "keep must be in (0, 1], got nan");
  LR_EXPECT_CONTAINS(error_of([] { rank_for_keep(0.5, 0, 4); }), "shape [0 x 4]");
}

TEST(SharedRankForKeep, BasisSharingLlamaValues) {
  // g = 2, LLaMA-7B (checkpoint-formats.md §3): q/k/v [4096, 4096], gate/up [11008, 4096].
  EXPECT_EQ(shared_rank_for_keep(0.8, 4096, 4096, 2), 2184);
  EXPECT_EQ(shared_rank_for_keep(0.8, 11008, 4096, 2), 2762);
  EXPECT_EQ(shared_rank_for_keep(0.6, 4096, 4096, 2), 1638);
  EXPECT_EQ(shared_rank_for_keep(0.6, 11008, 4096, 2), 2072);
  EXPECT_EQ(shared_rank_for_keep(0.5, 4096, 4096, 2), 1365);
  EXPECT_EQ(shared_rank_for_keep(0.5, 11008, 4096, 2), 1726);
}

TEST(SharedRankForKeep, GroupOfOneIsRankForKeep) {
  for (double keep : {0.2, 0.6, 0.8, 1.0})
    for (auto [m, n] : {std::pair<int64_t, int64_t>{576, 576}, {1536, 576}, {576, 1536}, {7, 3}})
      EXPECT_EQ(shared_rank_for_keep(keep, m, n, 1), rank_for_keep(keep, m, n));
}

TEST(SharedRankForKeep, BudgetIsRespectedAndTight) {
  for (int g : {1, 2, 3, 4})
    for (double keep : {0.3, 0.6, 0.8, 1.0})
      for (auto [m, n] : {std::pair<int64_t, int64_t>{576, 576}, {1536, 576}, {64, 200}}) {
        const int64_t k = shared_rank_for_keep(keep, m, n, g);
        const double budget = keep * g * m * n;
        EXPECT_LE(static_cast<double>(k * n + g * m * k), budget + 1e-6);
        EXPECT_GT(static_cast<double>((k + 1) * n + g * m * (k + 1)), budget);
        EXPECT_LE(k, std::min<int64_t>(n, g * m));
      }
}

TEST(SharedRankForKeep, Errors) {
  EXPECT_EQ(error_of([] { shared_rank_for_keep(0.0, 4, 4, 2); }), "keep must be in (0, 1], got 0");
  EXPECT_EQ(error_of([] { shared_rank_for_keep(1.5, 4, 4, 2); }),
            "keep must be in (0, 1], got 1.5");
  LR_EXPECT_CONTAINS(error_of([] { shared_rank_for_keep(0.5, 4, 4, 0); }),
                     "group size must be >= 1, got 0");
}

// ---------------------------------------------------------------- exact recovery

struct Shape {
  int64_t m, n, k;
};
constexpr Shape kShapes[] = {{8, 5, 3}, {37, 64, 10}, {96, 64, 20}};

TEST(SvdFactorize, ExactRankKIsReproduced) {
  Rng rng(100);
  for (const Shape& s : kShapes) {
    const std::vector<float> W = testing::to_floats(rank_k_matrix(rng, s.m, s.n, s.k));
    const MatD Wd = testing::to_double(W, s.m, s.n);
    const Factors f = svd_factorize(W.data(), s.m, s.n, s.k);
    ASSERT_EQ(f.out.rows, s.m);
    ASSERT_EQ(f.out.cols, s.k);
    ASSERT_EQ(f.in.rows, s.k);
    ASSERT_EQ(f.in.cols, s.n);
    EXPECT_LT(testing::rel_diff(testing::product(f.out, f.in), Wd), 1e-5) << s.m << "x" << s.n;
  }
}

TEST(SvdFactorize, SplitsSqrtSigmaEvenly) {
  // diag(4, 1): out = U sqrt(S), in = sqrt(S) Vt -> |entries| 2 and 1 on both sides.
  const float W[] = {4, 0, 0, 1};
  const Factors f = svd_factorize(W, 2, 2, 2);
  EXPECT_FLOAT_EQ(std::fabs(f.out(0, 0)), 2.0f);
  EXPECT_FLOAT_EQ(std::fabs(f.in(0, 0)), 2.0f);
  EXPECT_FLOAT_EQ(std::fabs(f.out(1, 1)), 1.0f);
  EXPECT_FLOAT_EQ(std::fabs(f.in(1, 1)), 1.0f);
  const Factors t = svd_factorize(W, 2, 2, 1);
  EXPECT_FLOAT_EQ(t.out(0, 0) * t.in(0, 0), 4.0f);
  EXPECT_FLOAT_EQ(t.out(1, 0) * t.in(0, 1), 0.0f);
}

TEST(WhitenFactorize, ExactRankKIsReproducedWithRandomSpdGram) {
  Rng rng(200);
  for (const Shape& s : kShapes) {
    const std::vector<float> W = testing::to_floats(rank_k_matrix(rng, s.m, s.n, s.k));
    const MatD Wd = testing::to_double(W, s.m, s.n);
    const MatD G = testing::random_spd(rng, s.n, 1e3);
    WhitenReport rep;
    const Factors f = whiten_factorize(W.data(), s.m, s.n, G, s.k, &rep);
    EXPECT_EQ(rep.lambda, 0.0);
    EXPECT_FALSE(rep.fell_back);
    EXPECT_EQ(rep.note, "");
    ASSERT_EQ(f.out.rows, s.m);
    ASSERT_EQ(f.in.cols, s.n);
    EXPECT_LT(testing::rel_diff(testing::product(f.out, f.in), Wd), 1e-5) << s.m << "x" << s.n;
  }
}

// ---------------------------------------------------------------- whitening quality

TEST(WhitenFactorize, ErrorIsTheWhitenedSvdTail) {
  // ||(W - W') X^T||_F must equal sqrt(sum_{i > r} sigma_i^2) of W L (L L^T = X^T X).
  Rng rng(300);
  const int64_t m = 40, n = 32, r = 6, tokens = 500;
  const MatD Wd = testing::random_matrix(rng, m, n);
  const std::vector<float> W = testing::to_floats(Wd);
  const MatD X = correlated_inputs(rng, tokens, n, 2.0);
  const std::vector<float> Xf = testing::to_floats(X);
  const MatD G = gram_of(testing::to_double(Xf, tokens, n));
  const Factors f = whiten_factorize(W.data(), m, n, G, r);

  MatD WL = testing::to_double(W, m, n);
  trmm(Side::Right, Uplo::Lower, false, cholesky(G), WL);
  const Svd s = svd(WL);
  double tail = 0.0;
  for (size_t i = r; i < s.s.size(); ++i) tail += s.s[i] * s.s[i];
  const double err = activation_error(W.data(), f, Xf.data(), tokens);
  EXPECT_NEAR(err, std::sqrt(tail), 1e-4 * std::sqrt(tail));
}

TEST(WhitenFactorize, BeatsPlainSvdOnCorrelatedInputs) {
  // Input energy spread over 4 decades across directions (a rotated, strongly
  // non-isotropic covariance). Measured ratio with this seed: ~7.4.
  Rng rng(400);
  const int64_t m = 48, n = 64, r = 16, tokens = 2000;
  const std::vector<float> W = testing::to_floats(testing::random_matrix(rng, m, n));
  const std::vector<float> X = testing::to_floats(correlated_inputs(rng, tokens, n, 4.0));
  GramAccumulator acc(n);
  acc.add(X.data(), tokens);
  const double plain =
      activation_error(W.data(), svd_factorize(W.data(), m, n, r), X.data(), tokens);
  const double white =
      activation_error(W.data(), whiten_factorize(W.data(), m, n, acc.gram(), r), X.data(), tokens);
  EXPECT_LT(white * 4.0, plain) << "whitened " << white << " vs plain " << plain;
}

TEST(WhitenFactorize, NeverWorseThanPlainOnIsotropicInputs) {
  Rng rng(450);
  const int64_t m = 30, n = 20, r = 5, tokens = 400;
  const std::vector<float> W = testing::to_floats(testing::random_matrix(rng, m, n));
  const std::vector<float> X = testing::to_floats(testing::random_matrix(rng, tokens, n));
  const MatD G = gram_of(testing::to_double(X, tokens, n));
  const double plain =
      activation_error(W.data(), svd_factorize(W.data(), m, n, r), X.data(), tokens);
  const double white =
      activation_error(W.data(), whiten_factorize(W.data(), m, n, G, r), X.data(), tokens);
  EXPECT_LE(white, plain * (1 + 1e-6));
}

// ---------------------------------------------------------------- regularisation / fallback

TEST(WhitenFactorize, RankDeficientInputsAreRegularised) {
  Rng rng(500);
  const int64_t m = 10, n = 16, r = 6;
  const std::vector<float> W = testing::to_floats(testing::random_matrix(rng, m, n));
  // X lives in a 4-dimensional subspace (tall case) or has fewer tokens than n (wide case).
  const MatD tall = matmul(testing::random_matrix(rng, 300, 4), testing::random_matrix(rng, 4, n));
  const MatD wide = testing::random_matrix(rng, 5, n);
  for (const MatD& Xd : {tall, wide}) {
    const std::vector<float> X = testing::to_floats(Xd);
    const MatD G = gram_of(testing::to_double(X, Xd.rows, n));
    WhitenReport rep;
    const Factors f = whiten_factorize(W.data(), m, n, G, r, &rep);
    EXPECT_GT(rep.lambda, 0.0);
    EXPECT_LE(rep.lambda, 1e-1);
    EXPECT_FALSE(rep.fell_back);
    LR_EXPECT_CONTAINS(rep.note, "not numerically positive definite");
    EXPECT_TRUE(all_finite(f.out));
    EXPECT_TRUE(all_finite(f.in));
    // The inputs span <= 5 dimensions, so rank 6 captures W X^T almost exactly,
    // which plain SVD cannot.
    const double plain =
        activation_error(W.data(), svd_factorize(W.data(), m, n, r), X.data(), Xd.rows);
    const double white = activation_error(W.data(), f, X.data(), Xd.rows);
    const double total =
        activation_error(W.data(), Factors{MatF(m, 1), MatF(1, n), {}}, X.data(), Xd.rows);
    EXPECT_LT(white, 1e-2 * total) << white << " vs " << total;
    EXPECT_LT(white, plain);
  }
}

TEST(WhitenFactorize, AllZeroGramFallsBackToPlainSvd) {
  Rng rng(600);
  const int64_t m = 12, n = 9, r = 4;
  const std::vector<float> W = testing::to_floats(testing::random_matrix(rng, m, n));
  WhitenReport rep;
  const Factors f = whiten_factorize(W.data(), m, n, MatD(n, n), r, &rep);
  EXPECT_TRUE(rep.fell_back);
  EXPECT_EQ(rep.lambda, 0.0);
  LR_EXPECT_CONTAINS(rep.note, "all zero");
  const Factors p = svd_factorize(W.data(), m, n, r);
  EXPECT_EQ(f.out.a, p.out.a);
  EXPECT_EQ(f.in.a, p.in.a);
}

TEST(WhitenFactorize, IndefiniteGramFallsBack) {
  // diag(10, 10, -1): even 0.1 * mean(diag) = 0.63 cannot lift the -1.
  MatD G(3, 3);
  G(0, 0) = 10;
  G(1, 1) = 10;
  G(2, 2) = -1;
  const float W[] = {1, 2, 3, 4, 5, 6};
  WhitenReport rep;
  const Factors f = whiten_factorize(W, 2, 3, G, 1, &rep);
  EXPECT_TRUE(rep.fell_back);
  LR_EXPECT_CONTAINS(rep.note, "dpotrf info=3");
  LR_EXPECT_CONTAINS(rep.note, "fell back to plain SVD");
  EXPECT_EQ(f.out.a, svd_factorize(W, 2, 3, 1).out.a);
}

TEST(WhitenFactorize, EmptyGramIsPlainSvdWithoutFallback) {
  Rng rng(650);
  const std::vector<float> W = testing::to_floats(testing::random_matrix(rng, 7, 5));
  WhitenReport rep;
  rep.fell_back = true;  // must be overwritten
  const Factors f = whiten_factorize(W.data(), 7, 5, MatD(), 3, &rep);
  EXPECT_FALSE(rep.fell_back);
  EXPECT_EQ(rep.lambda, 0.0);
  LR_EXPECT_CONTAINS(rep.note, "no gram");
  EXPECT_EQ(f.in.a, svd_factorize(W.data(), 7, 5, 3).in.a);
}

TEST(WhitenFactorize, IdentityGramEqualsPlainSvd) {
  Rng rng(660);
  const std::vector<float> W = testing::to_floats(testing::random_matrix(rng, 9, 6));
  const Factors f = whiten_factorize(W.data(), 9, 6, MatD::identity(6), 3);
  const Factors p = svd_factorize(W.data(), 9, 6, 3);
  EXPECT_LT(testing::rel_diff(testing::product(f.out, f.in), testing::product(p.out, p.in)), 1e-6);
}

// ---------------------------------------------------------------- errors

TEST(Factorize, RankOutOfRange) {
  const std::vector<float> W(8 * 5, 1.0f);
  EXPECT_EQ(error_of([&] { svd_factorize(W.data(), 8, 5, 6); }),
            "svd_factorize: rank 6 out of range [1, 5] for a [8 x 5] matrix");
  LR_EXPECT_CONTAINS(error_of([&] { svd_factorize(W.data(), 8, 5, 0); }), "rank 0 out of range");
  LR_EXPECT_CONTAINS(error_of([&] { whiten_factorize(W.data(), 8, 5, MatD(), 9); }),
                     "whiten_factorize: rank 9 out of range [1, 5]");
  LR_EXPECT_CONTAINS(error_of([&] { svd_factorize(W.data(), 0, 5, 1); }), "shape [0 x 5]");
}

TEST(Factorize, NonFiniteWeightIsNamed) {
  std::vector<float> W(8 * 5, 1.0f);
  W[2 * 5 + 3] = std::nanf("");
  EXPECT_EQ(error_of([&] { svd_factorize(W.data(), 8, 5, 2); }),
            "svd_factorize: W [8 x 5] has a non-finite value (nan) at row 2, col 3");
  EXPECT_EQ(error_of([&] { whiten_factorize(W.data(), 8, 5, MatD::identity(5), 2); }),
            "whiten_factorize: W [8 x 5] has a non-finite value (nan) at row 2, col 3");
  W[2 * 5 + 3] = -std::numeric_limits<float>::infinity();
  LR_EXPECT_CONTAINS(error_of([&] { svd_factorize(W.data(), 8, 5, 2); }), "(-inf) at row 2, col 3");
}

TEST(Factorize, BadGramIsRejected) {
  const std::vector<float> W(4 * 5, 1.0f);
  EXPECT_EQ(error_of([&] { whiten_factorize(W.data(), 4, 5, MatD::identity(3), 2); }),
            "whiten_factorize: gram is [3 x 3], expected [5 x 5] (input width of W)");
  MatD G = MatD::identity(5);
  G(4, 1) = std::numeric_limits<double>::infinity();
  LR_EXPECT_CONTAINS(error_of([&] { whiten_factorize(W.data(), 4, 5, G, 2); }),
                     "gram [5 x 5] has a non-finite value (inf) at row 4, col 1");
}

TEST(Factorize, NonFiniteFactorIsNamed) {
  // A tiny-but-valid gram makes S^{-1} ~ 1e150: the 'in' factor overflows float.
  Rng rng(700);
  const std::vector<float> W = testing::to_floats(testing::random_matrix(rng, 6, 4));
  MatD G = MatD::identity(4);
  for (double& v : G.a) v *= 1e-300;
  LR_EXPECT_CONTAINS(error_of([&] { whiten_factorize(W.data(), 6, 4, G, 2); }),
                     "whiten_factorize: factor 'in' [2 x 4] has a non-finite value");
}

// ---------------------------------------------------------------- activation_error

TEST(ActivationError, KnownValue) {
  // W = I, W' = e1 e1^T: residual diag(0, 1). X rows (1, 2), (3, 4): (W - W') X^T = [[0, 0], [2,
  // 4]].
  const float W[] = {1, 0, 0, 1};
  Factors f{MatF(2, 1), MatF(1, 2), {}};
  f.out(0, 0) = 1;
  f.in(0, 0) = 1;
  const float X[] = {1, 2, 3, 4};
  EXPECT_DOUBLE_EQ(activation_error(W, f, X, 2), std::sqrt(20.0));
  EXPECT_EQ(activation_error(W, f, X, 0), 0.0);
}

TEST(ActivationError, ManyTokensSpanChunks) {
  Rng rng(800);
  const int64_t m = 5, n = 4, tokens = 2500;
  const std::vector<float> W = testing::to_floats(testing::random_matrix(rng, m, n));
  const std::vector<float> X = testing::to_floats(testing::random_matrix(rng, tokens, n));
  const Factors f = svd_factorize(W.data(), m, n, 2);
  const MatD D = testing::sub(testing::to_double(W, m, n), testing::product(f.out, f.in));
  const double ref = frobenius(matmul(D, testing::to_double(X, tokens, n), false, true));
  EXPECT_NEAR(activation_error(W.data(), f, X.data(), tokens), ref, 1e-12 * ref);
}

TEST(ActivationError, MismatchedFactors) {
  const float W[] = {1, 0, 0, 1};
  const Factors f{MatF(2, 2), MatF(3, 2), {}};
  LR_EXPECT_CONTAINS(error_of([&] { activation_error(W, f, W, 2); }), "do not chain");
}

}  // namespace
}  // namespace lr::compress
