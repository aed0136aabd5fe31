#include "linalg/linalg.h"

#include "linalg/blas.h"

#include <algorithm>
#include <climits>
#include <cmath>

#include "core/error.h"

namespace lr::linalg {

namespace {

// LAPACK / BLAS take 32-bit dimensions.
lapack_int dim(int64_t v, const char* routine) {
  if (v < 0 || v > INT_MAX)
    lr::fail("{}: matrix dimension {} out of range [0, {}]", routine, v, INT_MAX);
  return static_cast<lapack_int>(v);
}

void check_shape(const MatD& A) {
  LR_ASSERT(A.rows >= 0 && A.cols >= 0);
  LR_ASSERT(static_cast<int64_t>(A.a.size()) == A.rows * A.cols);
}

void check_square(const MatD& A, const char* routine) {
  check_shape(A);
  if (A.rows != A.cols || A.rows == 0)
    lr::fail("{}: expected a non-empty square matrix, got [{} x {}]", routine, A.rows, A.cols);
}

[[noreturn]] void lapack_failed(const char* routine, lapack_int info, const char* meaning) {
  lr::fail("LAPACK {} failed: info={} ({})", routine, info, meaning);
}

// LAPACKE reports bad arguments (including NaN inputs, which it checks for)
// as info < 0 and numerical failure as info > 0.
const char* info_meaning(lapack_int info, const char* positive) {
  return info < 0 ? "illegal argument or NaN in the input" : positive;
}

CBLAS_SIDE cblas_side(Side s) {
  return s == Side::Left ? CblasLeft : CblasRight;
}
CBLAS_UPLO cblas_uplo(Uplo u) {
  return u == Uplo::Lower ? CblasLower : CblasUpper;
}

}  // namespace

Svd svd(const MatD& A, int64_t k) {
  check_shape(A);
  const int64_t m = A.rows, n = A.cols;
  if (m == 0 || n == 0) lr::fail("svd: empty matrix [{} x {}]", m, n);
  const int64_t p = std::min(m, n);
  if (k == -1) k = p;
  if (k < 1 || k > p)
    lr::fail("svd: rank {} out of range [1, {}] for a [{} x {}] matrix", k, p, m, n);

  // The row-major buffer of A [m, n] is the column-major buffer of A^T [n, m].
  // Decomposing A^T = V S U^T column-major gives, read back row-major, the
  // "U" output [n, p] col-major == Vt [p, n] row-major, and the "VT" output
  // [p, m] col-major == U [m, p] row-major: no transposition copies needed.
  const lapack_int ln = dim(n, "dgesdd"), lm = dim(m, "dgesdd"), lp = dim(p, "dgesdd");
  std::vector<double> s(static_cast<size_t>(p));
  MatD vt_full(p, n), u_full(m, p);
  std::vector<double> work = A.a;
  lapack_int info = LAPACKE_dgesdd(LAPACK_COL_MAJOR, 'S', ln, lm, work.data(), ln, s.data(),
                                   vt_full.data(), ln, u_full.data(), lp);
  if (info > 0) {
    // dgesdd's divide and conquer did not converge: retry with QR iteration.
    work = A.a;
    std::vector<double> superb(static_cast<size_t>(std::max<int64_t>(p - 1, 1)));
    info = LAPACKE_dgesvd(LAPACK_COL_MAJOR, 'S', 'S', ln, lm, work.data(), ln, s.data(),
                          vt_full.data(), ln, u_full.data(), lp, superb.data());
    if (info != 0)
      lapack_failed("dgesvd", info, info_meaning(info, "QR iteration did not converge"));
  } else if (info < 0) {
    lapack_failed("dgesdd", info, info_meaning(info, ""));
  }

  Svd r;
  r.s.assign(s.begin(), s.begin() + k);
  r.vt = std::move(vt_full);
  r.vt.rows = k;
  r.vt.a.resize(static_cast<size_t>(k * n));
  if (k == p) {
    r.u = std::move(u_full);
  } else {
    r.u = MatD(m, k);
    for (int64_t i = 0; i < m; ++i) std::copy_n(&u_full(i, 0), k, &r.u(i, 0));
  }
  return r;
}

Eigh eigh(const MatD& A) {
  check_square(A, "eigh");
  const int64_t n = A.rows;
  const lapack_int ln = dim(n, "dsyevd");
  MatD v = A;
  std::vector<double> w(static_cast<size_t>(n));
  const lapack_int info = LAPACKE_dsyevd(LAPACK_ROW_MAJOR, 'V', 'L', ln, v.data(), ln, w.data());
  if (info != 0)
    lapack_failed("dsyevd", info, info_meaning(info, "eigenvalue algorithm did not converge"));

  // dsyevd returns ascending eigenvalues with eigenvectors in the columns.
  Eigh r;
  r.values.resize(static_cast<size_t>(n));
  r.vectors = MatD(n, n);
  for (int64_t j = 0; j < n; ++j) {
    const int64_t src = n - 1 - j;
    r.values[static_cast<size_t>(j)] = w[static_cast<size_t>(src)];
    int64_t imax = 0;
    for (int64_t i = 1; i < n; ++i)
      if (std::fabs(v(i, src)) > std::fabs(v(imax, src))) imax = i;
    const double sign = v(imax, src) < 0 ? -1.0 : 1.0;
    for (int64_t i = 0; i < n; ++i) r.vectors(i, j) = sign * v(i, src);
  }
  return r;
}

int try_cholesky(const MatD& A, MatD& L) {
  check_square(A, "cholesky");
  const int64_t n = A.rows;
  const lapack_int ln = dim(n, "dpotrf");
  L = A;
  const lapack_int info = LAPACKE_dpotrf(LAPACK_ROW_MAJOR, 'L', ln, L.data(), ln);
  if (info != 0) return info;
  for (int64_t i = 0; i < n; ++i) std::fill(&L(i, 0) + i + 1, &L(i, 0) + n, 0.0);
  return 0;
}

MatD cholesky(const MatD& A) {
  MatD L;
  const int info = try_cholesky(A, L);
  if (info != 0)
    lapack_failed(
        "dpotrf", info,
        info_meaning(info, "the matrix is not positive definite: a leading minor is not > 0"));
  return L;
}

double cholesky_rcond(const MatD& L, double anorm1) {
  check_square(L, "cholesky_rcond");
  const lapack_int ln = dim(L.rows, "dpocon");
  double rcond = 0.0;
  const lapack_int info = LAPACKE_dpocon(LAPACK_ROW_MAJOR, 'L', ln, L.data(), ln, anorm1, &rcond);
  if (info != 0) lapack_failed("dpocon", info, info_meaning(info, "unexpected"));
  return rcond;
}

double norm1(const MatD& A) {
  check_shape(A);
  std::vector<double> col(static_cast<size_t>(A.cols), 0.0);
  for (int64_t i = 0; i < A.rows; ++i)
    for (int64_t j = 0; j < A.cols; ++j) col[static_cast<size_t>(j)] += std::fabs(A(i, j));
  double best = 0.0;
  for (double c : col) best = std::max(best, c);
  return best;
}

void trsm(Side side, Uplo uplo, bool transpose, const MatD& T, MatD& B) {
  check_square(T, "trsm");
  check_shape(B);
  LR_ASSERT(T.rows == (side == Side::Left ? B.rows : B.cols));
  if (B.empty()) return;
  cblas_dtrsm(CblasRowMajor, cblas_side(side), cblas_uplo(uplo),
              transpose ? CblasTrans : CblasNoTrans, CblasNonUnit, dim(B.rows, "dtrsm"),
              dim(B.cols, "dtrsm"), 1.0, T.data(), dim(T.cols, "dtrsm"), B.data(),
              dim(B.cols, "dtrsm"));
}

void trmm(Side side, Uplo uplo, bool transpose, const MatD& T, MatD& B) {
  check_square(T, "trmm");
  check_shape(B);
  LR_ASSERT(T.rows == (side == Side::Left ? B.rows : B.cols));
  if (B.empty()) return;
  cblas_dtrmm(CblasRowMajor, cblas_side(side), cblas_uplo(uplo),
              transpose ? CblasTrans : CblasNoTrans, CblasNonUnit, dim(B.rows, "dtrmm"),
              dim(B.cols, "dtrmm"), 1.0, T.data(), dim(T.cols, "dtrmm"), B.data(),
              dim(B.cols, "dtrmm"));
}

MatD matmul(const MatD& A, const MatD& B, bool transpose_a, bool transpose_b) {
  check_shape(A);
  check_shape(B);
  const int64_t m = transpose_a ? A.cols : A.rows;
  const int64_t k = transpose_a ? A.rows : A.cols;
  const int64_t kb = transpose_b ? B.cols : B.rows;
  const int64_t n = transpose_b ? B.rows : B.cols;
  LR_ASSERT(k == kb);
  MatD C(m, n);
  if (m == 0 || n == 0 || k == 0) return C;
  cblas_dgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans,
              transpose_b ? CblasTrans : CblasNoTrans, dim(m, "dgemm"), dim(n, "dgemm"),
              dim(k, "dgemm"), 1.0, A.data(), dim(A.cols, "dgemm"), B.data(), dim(B.cols, "dgemm"),
              0.0, C.data(), dim(n, "dgemm"));
  return C;
}

double frobenius(const MatD& A) {
  check_shape(A);
  double ssq = 0.0;
  for (double x : A.a) ssq += x * x;
  return std::sqrt(ssq);
}

}  // namespace lr::linalg
