#include "compress/pivot.h"

#include <algorithm>
#include <cmath>

#include "linalg/blas.h"
#include "linalg/linalg.h"
#include "core/error.h"

namespace lr::compress {

PivotedFactors pivot_factors(const MatF& out, const MatF& in, int64_t r) {
  const int64_t m = out.rows, n = in.cols;
  LR_ASSERT(r >= 1 && r < m && r <= out.cols && r <= in.rows);
  // Pivoted QR of U^T [r, m]: its column pivots are the rows of U (of W')
  // that span the most, one after another.
  MatD ut(r, m);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t k = 0; k < r; ++k) ut(k, i) = out(i, k);
  std::vector<lapack_int> jpvt(size_t(m), 0);
  std::vector<double> tau(static_cast<size_t>(r));
  lapack_int info = LAPACKE_dgeqp3(LAPACK_ROW_MAJOR, lapack_int(r), lapack_int(m), ut.data(),
                                   lapack_int(m), jpvt.data(), tau.data());
  if (info != 0) fail("dgeqp3 (pivoted QR of a {}x{} factor) failed: info {}", r, m, info);
  PivotedFactors p;
  for (int64_t k = 0; k < r; ++k) p.rows.push_back(int32_t(jpvt[size_t(k)] - 1));
  std::sort(p.rows.begin(), p.rows.end());
  std::vector<bool> pivot(size_t(m), false);
  for (int32_t i : p.rows) pivot[size_t(i)] = true;
  std::vector<int64_t> slot(size_t(m), -1);  // pivot row -> its place in p.rows
  for (int64_t k = 0; k < r; ++k) slot[size_t(p.rows[size_t(k)])] = k;
  p.coef = MatF(m - r, r);

  // U^T Pi = Q [R11 R12]: the other rows are U[others]^T = U[rows]^T R11^-1 R12
  // (an interpolative decomposition), a triangular solve, when R11 is well
  // conditioned; else C U[rows] = U[others] by least squares.
  double rmin = std::abs(ut(0, 0)), rmax = rmin;
  for (int64_t k = 1; k < r; ++k) {
    rmin = std::min(rmin, std::abs(ut(k, k)));
    rmax = std::max(rmax, std::abs(ut(k, k)));
  }
  if (rmax > 0 && rmin > 1e-10 * rmax) {
    MatD r11(r, r), t(r, m - r);
    for (int64_t k = 0; k < r; ++k) {
      for (int64_t j = k; j < r; ++j) r11(k, j) = ut(k, j);
      for (int64_t j = r; j < m; ++j) t(k, j - r) = ut(k, j);
    }
    trsm(linalg::Side::Left, linalg::Uplo::Upper, false, r11, t);  // T = R11^-1 R12 [r, m - r]
    // Column j of T: the row jpvt[r + j] over the rows jpvt[0..r).
    std::vector<int64_t> coef_row(size_t(m), -1);
    for (int64_t i = 0, o = 0; i < m; ++i)
      if (!pivot[size_t(i)]) coef_row[size_t(i)] = o++;
    for (int64_t j = 0; j < m - r; ++j) {
      const int64_t o = coef_row[size_t(jpvt[size_t(r + j)] - 1)];
      for (int64_t k = 0; k < r; ++k) p.coef(o, slot[size_t(jpvt[size_t(k)] - 1)]) = float(t(k, j));
    }
  } else {
    MatD a(r, r), b(r, m - r);  // U[rows]^T C^T = U[others]^T
    for (int64_t k = 0; k < r; ++k)
      for (int64_t j = 0; j < r; ++j) a(j, k) = out(p.rows[size_t(k)], j);
    for (int64_t i = 0, o = 0; i < m; ++i) {
      if (pivot[size_t(i)]) continue;
      for (int64_t j = 0; j < r; ++j) b(j, o) = out(i, j);
      ++o;
    }
    std::vector<double> s(static_cast<size_t>(r));
    lapack_int rank = 0;
    info =
        LAPACKE_dgelsd(LAPACK_ROW_MAJOR, lapack_int(r), lapack_int(r), lapack_int(m - r), a.data(),
                       lapack_int(r), b.data(), lapack_int(m - r), s.data(), 1e-12, &rank);
    if (info != 0) fail("dgelsd (pivot coefficients, {}x{}) did not converge: info {}", r, r, info);
    for (int64_t o = 0; o < m - r; ++o)
      for (int64_t k = 0; k < r; ++k) p.coef(o, k) = float(b(k, o));
  }

  // P = U[rows] V in double.
  MatD up(r, r), v(r, n);
  for (int64_t k = 0; k < r; ++k)
    for (int64_t j = 0; j < r; ++j) up(k, j) = out(p.rows[size_t(k)], j);
  for (int64_t k = 0; k < r; ++k)
    for (int64_t c = 0; c < n; ++c) v(k, c) = in(k, c);
  const MatD pv = matmul(up, v);
  p.pivots = MatF(r, n);
  for (size_t i = 0; i < pv.a.size(); ++i) p.pivots.a[i] = float(pv.a[i]);
  for (float v : p.coef.a)
    if (!std::isfinite(v))
      fail("pivoted storage: non-finite coefficient (a factor of {} rows, rank {})", m, r);
  return p;
}

int64_t pivoted_rank_for_keep(double keep, int64_t m, int64_t n) {
  if (!(keep > 0 && keep <= 1)) fail("keep must be in (0, 1], got {}", keep);
  if (m < 1 || n < 1) fail("matrix shape [{}, {}] is empty", m, n);
  const double budget = keep * double(m) * double(n), s = double(m + n);
  // The smaller root of r^2 - (m + n) r + budget = 0, then exact integer steps.
  const double disc = std::max(0.0, s * s - 4 * budget);
  int64_t r = int64_t(std::floor((s - std::sqrt(disc)) / 2));
  auto cost = [&](int64_t k) { return double(k) * double(m + n - k); };
  while (r > 1 && cost(r) > budget) --r;
  while (r + 1 < std::min(m, n) && cost(r + 1) <= budget) ++r;
  return std::clamp<int64_t>(r, 1, std::max<int64_t>(1, std::min(m, n) - 1));
}

}  // namespace lr::compress
