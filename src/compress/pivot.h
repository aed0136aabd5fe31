// Pivoted storage of low-rank factors (PIFA, arXiv 2501.19090): a rank-r
// product W' = U V [m, n] is exactly r of its own rows P = W'[rows] plus,
// for every other row, its coefficients over them: W'[others] = C P. That
// is r (m + n - r) values instead of r (m + n), so at equal bytes the rank
// is higher (model/weights.h Pivots is how the runtime stores it).
#pragma once

#include <cstdint>
#include <vector>

#include "linalg/linalg.h"

namespace lr::compress {
using namespace linalg;  // MatD and the LAPACK wrappers (src/linalg)

struct PivotedFactors {
  std::vector<int32_t> rows;  // [r] ascending: the rows of W' kept whole
  MatF pivots;                // [r, n] P = W'[rows]
  MatF coef;                  // [m - r, r] C, the other rows (ascending) over P
};

// The pivoted form of the leading r columns of `out` [m, >= r] times the
// leading r rows of `in` [>= r, n], 1 <= r < m. The rows are those pivoted
// QR (dgeqp3) of U^T picks, so C stays bounded: with U^T Pi = Q [R11 R12],
// C = (R11^-1 R12)^T (an interpolative decomposition). When R11 is near
// singular (U of rank below r: an exact rank-k matrix at rank r > k) C solves
// C U[rows] = U[others] by least squares (dgelsd) instead, which still
// reproduces U V.
PivotedFactors pivot_factors(const MatF& out, const MatF& in, int64_t r);

// The rank pivoted storage affords at `keep` of the parameters of an
// [m, n] matrix: the largest r in [1, min(m, n) - 1] with
// r (m + n - r) <= keep m n (1 when none is). keep outside (0, 1] -> lr::Error.
int64_t pivoted_rank_for_keep(double keep, int64_t m, int64_t n);

}  // namespace lr::compress
