#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "linalg/linalg.h"
#include "../compress/compress_test_util.h"
#include "core/error.h"

namespace lr::linalg {
namespace {

using compress::testing::error_of;
using compress::testing::Rng;

MatD from_rows(int64_t r, int64_t c, std::initializer_list<double> v) {
  MatD A(r, c);
  A.a.assign(v);
  return A;
}

TEST(Svd, DiagonalGivesSortedValuesAndSignedUnitVectors) {
  const MatD A = from_rows(3, 3, {3, 0, 0, 0, 1, 0, 0, 0, -2});
  const Svd s = svd(A);
  ASSERT_EQ(s.s.size(), 3u);
  EXPECT_NEAR(s.s[0], 3.0, 1e-15);
  EXPECT_NEAR(s.s[1], 2.0, 1e-15);
  EXPECT_NEAR(s.s[2], 1.0, 1e-15);
  // Singular vector j pairs axis e_{p(j)} with p = (0, 2, 1); u_j * vt_j carries the sign.
  const int axis[3] = {0, 2, 1};
  const double sign[3] = {1, -1, 1};
  for (int j = 0; j < 3; ++j) {
    for (int i = 0; i < 3; ++i) {
      EXPECT_NEAR(std::fabs(s.u(i, j)), i == axis[j] ? 1.0 : 0.0, 1e-15);
      EXPECT_NEAR(std::fabs(s.vt(j, i)), i == axis[j] ? 1.0 : 0.0, 1e-15);
    }
    EXPECT_NEAR(s.u(axis[j], j) * s.vt(j, axis[j]), sign[j], 1e-15);
  }
}

TEST(Svd, KnownTwoByTwo) {
  // A^T A = [[25, 20], [20, 25]] -> eigenvalues 45, 5 -> sigma = 3 sqrt(5), sqrt(5).
  const MatD A = from_rows(2, 2, {3, 0, 4, 5});
  const Svd s = svd(A);
  EXPECT_NEAR(s.s[0], 3.0 * std::sqrt(5.0), 1e-14);
  EXPECT_NEAR(s.s[1], std::sqrt(5.0), 1e-14);
  // Right singular vectors are (1, 1)/sqrt2 and (1, -1)/sqrt2 up to sign.
  EXPECT_NEAR(std::fabs(s.vt(0, 0)), 1 / std::sqrt(2.0), 1e-14);
  EXPECT_NEAR(s.vt(0, 0) * s.vt(0, 1), 0.5, 1e-14);
  EXPECT_NEAR(s.vt(1, 0) * s.vt(1, 1), -0.5, 1e-14);
}

TEST(Svd, RectangularReconstructsAndTruncates) {
  Rng rng(1);
  for (auto [m, n] : {std::pair<int64_t, int64_t>{7, 4}, {4, 9}, {30, 30}}) {
    const MatD A = compress::testing::random_matrix(rng, m, n);
    const Svd s = svd(A);
    const int64_t p = std::min(m, n);
    ASSERT_EQ(s.u.rows, m);
    ASSERT_EQ(s.u.cols, p);
    ASSERT_EQ(s.vt.rows, p);
    ASSERT_EQ(s.vt.cols, n);
    MatD US = s.u;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < p; ++j) US(i, j) *= s.s[j];
    EXPECT_LT(compress::testing::rel_diff(matmul(US, s.vt), A), 1e-13);
    EXPECT_LT(compress::testing::rel_diff(matmul(s.u, s.u, true, false), MatD::identity(p)), 1e-13);
    EXPECT_LT(compress::testing::rel_diff(matmul(s.vt, s.vt, false, true), MatD::identity(p)), 1e-13);
    for (int64_t j = 1; j < p; ++j) EXPECT_GE(s.s[j - 1], s.s[j]);

    // Truncation keeps the leading triplets exactly.
    const Svd t = svd(A, 2);
    ASSERT_EQ(t.u.cols, 2);
    ASSERT_EQ(t.vt.rows, 2);
    ASSERT_EQ(t.s.size(), 2u);
    for (int64_t j = 0; j < 2; ++j) {
      EXPECT_EQ(t.s[j], s.s[j]);
      for (int64_t i = 0; i < m; ++i) EXPECT_EQ(t.u(i, j), s.u(i, j));
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(t.vt(j, i), s.vt(j, i));
    }
  }
}

TEST(Svd, RejectsBadRank) {
  const MatD A(3, 2);
  LR_EXPECT_CONTAINS(error_of([&] { svd(A, 3); }), "rank 3 out of range [1, 2]");
  LR_EXPECT_CONTAINS(error_of([&] { svd(A, 0); }), "rank 0 out of range");
  LR_EXPECT_CONTAINS(error_of([] { svd(MatD(0, 2)); }), "empty matrix");
}

TEST(Svd, NanInputIsAnErrorNamingTheRoutine) {
  MatD A(2, 2);
  A(1, 0) = std::nan("");
  const std::string e = error_of([&] { svd(A); });
  LR_EXPECT_CONTAINS(e, "dgesdd");
  LR_EXPECT_CONTAINS(e, "info=");
}

TEST(Eigh, DiagonalSortedDescendingWithPositiveVectors) {
  const MatD A = from_rows(3, 3, {1, 0, 0, 0, 3, 0, 0, 0, 2});
  const Eigh e = eigh(A);
  ASSERT_EQ(e.values.size(), 3u);
  EXPECT_DOUBLE_EQ(e.values[0], 3.0);
  EXPECT_DOUBLE_EQ(e.values[1], 2.0);
  EXPECT_DOUBLE_EQ(e.values[2], 1.0);
  const int axis[3] = {1, 2, 0};
  for (int j = 0; j < 3; ++j)
    for (int i = 0; i < 3; ++i) EXPECT_EQ(e.vectors(i, j), i == axis[j] ? 1.0 : 0.0) << i << j;
}

TEST(Eigh, KnownTwoByTwoWithDeterministicSign) {
  // [[5, 2], [2, 2]]: eigenvalues 6 and 1 with eigenvectors (2, 1)/sqrt5 and
  // (-1, 2)/sqrt5 once each is signed so its largest-magnitude component is positive.
  const Eigh e = eigh(from_rows(2, 2, {5, 2, 2, 2}));
  const double s5 = std::sqrt(5.0);
  EXPECT_NEAR(e.values[0], 6.0, 1e-14);
  EXPECT_NEAR(e.values[1], 1.0, 1e-14);
  EXPECT_NEAR(e.vectors(0, 0), 2 / s5, 1e-14);
  EXPECT_NEAR(e.vectors(1, 0), 1 / s5, 1e-14);
  EXPECT_NEAR(e.vectors(0, 1), -1 / s5, 1e-14);
  EXPECT_NEAR(e.vectors(1, 1), 2 / s5, 1e-14);

  // The negated matrix reverses the order; the sign convention still holds.
  const Eigh n = eigh(from_rows(2, 2, {-5, -2, -2, -2}));
  EXPECT_NEAR(n.values[0], -1.0, 1e-14);
  EXPECT_NEAR(n.values[1], -6.0, 1e-14);
  EXPECT_NEAR(n.vectors(0, 0), -1 / s5, 1e-14);
  EXPECT_NEAR(n.vectors(1, 0), 2 / s5, 1e-14);
  EXPECT_NEAR(n.vectors(0, 1), 2 / s5, 1e-14);
  EXPECT_NEAR(n.vectors(1, 1), 1 / s5, 1e-14);
}

TEST(Eigh, RandomSymmetricReconstructs) {
  Rng rng(2);
  const MatD B = compress::testing::random_matrix(rng, 12, 12);
  MatD A = B;
  for (int64_t i = 0; i < 12; ++i)
    for (int64_t j = 0; j < 12; ++j) A(i, j) = B(i, j) + B(j, i);
  const Eigh e = eigh(A);
  MatD VD = e.vectors;
  for (int64_t i = 0; i < 12; ++i)
    for (int64_t j = 0; j < 12; ++j) VD(i, j) *= e.values[j];
  EXPECT_LT(compress::testing::rel_diff(matmul(VD, e.vectors, false, true), A), 1e-13);
  for (int64_t j = 0; j < 12; ++j) {
    if (j > 0) {
      EXPECT_GE(e.values[j - 1], e.values[j]);
    }
    int64_t imax = 0;
    for (int64_t i = 1; i < 12; ++i)
      if (std::fabs(e.vectors(i, j)) > std::fabs(e.vectors(imax, j))) imax = i;
    EXPECT_GT(e.vectors(imax, j), 0.0);
  }
}

TEST(Cholesky, KnownFactor) {
  // [[4, 2], [2, 3]] = L L^T with L = [[2, 0], [1, sqrt2]].
  const MatD L = cholesky(from_rows(2, 2, {4, 2, 2, 3}));
  EXPECT_DOUBLE_EQ(L(0, 0), 2.0);
  EXPECT_EQ(L(0, 1), 0.0);
  EXPECT_DOUBLE_EQ(L(1, 0), 1.0);
  EXPECT_DOUBLE_EQ(L(1, 1), std::sqrt(2.0));
}

TEST(Cholesky, ReadsOnlyLowerTriangle) {
  const MatD L = cholesky(from_rows(2, 2, {4, 999, 2, 3}));
  EXPECT_DOUBLE_EQ(L(1, 0), 1.0);
  EXPECT_EQ(L(0, 1), 0.0);
}

TEST(Cholesky, NotPositiveDefiniteIsAnErrorNamingDpotrf) {
  const MatD A = from_rows(2, 2, {1, 2, 2, 1});
  const std::string e = error_of([&] { cholesky(A); });
  LR_EXPECT_CONTAINS(e, "dpotrf");
  LR_EXPECT_CONTAINS(e, "info=2");
  MatD L;
  EXPECT_EQ(try_cholesky(A, L), 2);
  LR_EXPECT_CONTAINS(error_of([] { cholesky(MatD(2, 3)); }), "square");
}

TEST(Cholesky, RcondOfKnownMatrices) {
  const MatD I = MatD::identity(4);
  EXPECT_DOUBLE_EQ(cholesky_rcond(cholesky(I), norm1(I)), 1.0);
  // diag(1, 1e-8): 1-norm condition number 1e8.
  const MatD D = from_rows(2, 2, {1, 0, 0, 1e-8});
  EXPECT_NEAR(cholesky_rcond(cholesky(D), norm1(D)), 1e-8, 1e-20);
}

TEST(Triangular, SolveAndMultiplyInvertEachOther) {
  Rng rng(3);
  MatD L = compress::testing::random_matrix(rng, 6, 6);
  for (int64_t i = 0; i < 6; ++i) {
    L(i, i) = 3.0 + std::fabs(L(i, i));
    for (int64_t j = i + 1; j < 6; ++j) L(i, j) = 0.0;
  }
  const MatD X = compress::testing::random_matrix(rng, 4, 6);
  // Right, no transpose: B = X L, then B L^{-1} == X.
  MatD B = matmul(X, L);
  MatD C = X;
  trmm(Side::Right, Uplo::Lower, false, L, C);
  EXPECT_LT(compress::testing::rel_diff(C, B), 1e-14);
  trsm(Side::Right, Uplo::Lower, false, L, B);
  EXPECT_LT(compress::testing::rel_diff(B, X), 1e-13);
  // Left, transposed: B = L^T Y, then L^{-T} B == Y.
  const MatD Y = compress::testing::random_matrix(rng, 6, 3);
  MatD B2 = matmul(L, Y, true, false);
  trsm(Side::Left, Uplo::Lower, true, L, B2);
  EXPECT_LT(compress::testing::rel_diff(B2, Y), 1e-13);
}

TEST(Triangular, KnownSolve) {
  // x L = b with L = [[2, 0], [1, 4]]: x = [1, 1] -> b = [3, 4].
  MatD b = from_rows(1, 2, {3, 4});
  trsm(Side::Right, Uplo::Lower, false, from_rows(2, 2, {2, 0, 1, 4}), b);
  EXPECT_DOUBLE_EQ(b(0, 0), 1.0);
  EXPECT_DOUBLE_EQ(b(0, 1), 1.0);
}

TEST(Matmul, KnownProducts) {
  const MatD A = from_rows(2, 3, {1, 2, 3, 4, 5, 6});
  const MatD AAt = matmul(A, A, false, true);
  EXPECT_EQ(AAt.a, (std::vector<double>{14, 32, 32, 77}));
  const MatD AtA = matmul(A, A, true, false);
  EXPECT_EQ(AtA.a, (std::vector<double>{17, 22, 27, 22, 29, 36, 27, 36, 45}));
  EXPECT_DOUBLE_EQ(frobenius(A), std::sqrt(91.0));
  EXPECT_DOUBLE_EQ(norm1(A), 9.0);
}

}  // namespace
}  // namespace lr::linalg
