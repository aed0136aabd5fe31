// Pivoted storage of low-rank factors (compress/pivot.h): the kept rows are
// the product's own rows, the others their combinations, the whole equal to
// U V within f32 rounding; rank-deficient factors too; and the rank a keep
// affords.
#include <gtest/gtest.h>

#include <set>

#include "compress/pivot.h"
#include "compress_test_util.h"

namespace lr::compress {
namespace {

using testing::product;
using testing::Rng;

MatF to_float(const MatD& d) {
  MatF f(d.rows, d.cols);
  for (size_t i = 0; i < d.a.size(); ++i) f.a[i] = float(d.a[i]);
  return f;
}

// max |W'(i, j) - rebuilt(i, j)| / max |W'(i, j)|, W' = out[:, :r] in[:r, :].
double rebuild_error(const MatF& out, const MatF& in, int64_t r, const PivotedFactors& p) {
  MatF u(out.rows, r), v(r, in.cols);
  for (int64_t i = 0; i < out.rows; ++i)
    for (int64_t k = 0; k < r; ++k) u(i, k) = out(i, k);
  for (int64_t k = 0; k < r; ++k)
    for (int64_t j = 0; j < in.cols; ++j) v(k, j) = in(k, j);
  const MatD w = product(u, v), others = product(p.coef, p.pivots);
  double err = 0, scale = 0;
  size_t next = 0, k = 0;
  for (int64_t i = 0; i < w.rows; ++i) {
    const bool pivot = k < p.rows.size() && p.rows[k] == i;
    for (int64_t j = 0; j < w.cols; ++j) {
      const double got = pivot ? double(p.pivots(int64_t(k), j)) : others(int64_t(next), j);
      err = std::max(err, std::abs(got - w(i, j)));
      scale = std::max(scale, std::abs(w(i, j)));
    }
    pivot ? ++k : ++next;
  }
  return err / scale;
}

TEST(Pivot, RebuildsTheProductWithinFloatRounding) {
  Rng rng(11);
  for (auto [m, n, r] : {std::tuple{96, 64, 20}, {64, 96, 40}, {40, 200, 39}, {300, 50, 8}}) {
    const MatF out = to_float(testing::random_matrix(rng, m, r + 5));
    const MatF in = to_float(testing::random_matrix(rng, r + 5, n));
    const PivotedFactors p = pivot_factors(out, in, r);  // leading r of r + 5
    ASSERT_EQ(p.rows.size(), size_t(r));
    EXPECT_TRUE(std::is_sorted(p.rows.begin(), p.rows.end()));
    EXPECT_EQ(std::set<int32_t>(p.rows.begin(), p.rows.end()).size(), size_t(r));
    EXPECT_GE(p.rows.front(), 0);
    EXPECT_LT(p.rows.back(), m);
    EXPECT_EQ(p.pivots.rows, r);
    EXPECT_EQ(p.pivots.cols, n);
    EXPECT_EQ(p.coef.rows, m - r);
    EXPECT_EQ(p.coef.cols, r);
    EXPECT_LT(rebuild_error(out, in, r, p), 1e-5) << m << "x" << n << " rank " << r;
    // Pivoting keeps the coefficients bounded (each row of U over the best-spanning rows).
    double cmax = 0;
    for (float c : p.coef.a) cmax = std::max(cmax, double(std::abs(c)));
    EXPECT_LT(cmax, 50.0);
  }
}

TEST(Pivot, RankDeficientFactorsAreStillExact) {
  // U [m, r] of rank k < r (an exact rank-k matrix compressed at rank r):
  // U[rows] is singular, the least-squares coefficients still rebuild W'.
  Rng rng(5);
  const int64_t m = 80, n = 60, k = 6, r = 16;
  const MatD a = testing::random_matrix(rng, m, k), b = testing::random_matrix(rng, k, r);
  const MatF out = to_float(matmul(a, b));  // rank k
  const MatF in = to_float(testing::random_matrix(rng, r, n));
  const PivotedFactors p = pivot_factors(out, in, r);
  EXPECT_LT(rebuild_error(out, in, r, p), 1e-5);
}

TEST(Pivot, RankForKeep) {
  // r (m + n - r) <= keep m n: 576 x 576 at 0.8 affords 318 (plain factors: 230).
  EXPECT_EQ(pivoted_rank_for_keep(0.8, 576, 576), 318);
  EXPECT_EQ(rank_for_keep(0.8, 576, 576), 230);
  for (auto [keep, m, n] :
       {std::tuple{0.6, 576, 1536}, {0.3, 64, 96}, {0.05, 1536, 8960}, {0.999, 32, 64}}) {
    const int64_t r = pivoted_rank_for_keep(keep, m, n);
    int64_t best = 1;
    for (int64_t x = 1; x < std::min(m, n); ++x)
      if (double(x) * double(m + n - x) <= keep * double(m) * double(n)) best = x;
    EXPECT_EQ(r, best) << keep << " " << m << "x" << n;
  }
  EXPECT_EQ(pivoted_rank_for_keep(1.0, 64, 64), 63);  // never full rank: that is the dense matrix
  EXPECT_EQ(pivoted_rank_for_keep(1e-6, 64, 64), 1);
  LR_EXPECT_CONTAINS(testing::error_of([] { pivoted_rank_for_keep(0.0, 8, 8); }),
                     "keep must be in (0, 1]");
  LR_EXPECT_CONTAINS(testing::error_of([] { pivoted_rank_for_keep(1.5, 8, 8); }),
                     "keep must be in (0, 1]");
}

}  // namespace
}  // namespace lr::compress
