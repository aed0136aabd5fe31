// Thin double-precision wrappers over LAPACKE / CBLAS for the compressor.
//
// Every matrix here is a dense row-major MatD. Wrappers take their inputs by
// value or const reference and return fresh results, so callers never see
// LAPACK's in-place conventions. A LAPACK routine that reports failure
// (info != 0) becomes an lr::Error naming the routine and its info code.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace lr::linalg {

// Dense row-major matrix: element (i, j) is a[i * cols + j]. MatD (double)
// is what LAPACK works in; MatF (float) holds the factors handed to the model.
template <typename T>
struct DenseMat {
  int64_t rows = 0, cols = 0;
  std::vector<T> a;

  DenseMat() = default;
  DenseMat(int64_t r, int64_t c) : rows(r), cols(c), a(static_cast<size_t>(r * c), T(0)) {}

  T& operator()(int64_t i, int64_t j) { return a[static_cast<size_t>(i * cols + j)]; }
  T operator()(int64_t i, int64_t j) const { return a[static_cast<size_t>(i * cols + j)]; }
  T* data() { return a.data(); }
  const T* data() const { return a.data(); }
  bool empty() const { return rows == 0 || cols == 0; }

  static DenseMat identity(int64_t n) {
    DenseMat m(n, n);
    for (int64_t i = 0; i < n; ++i) m(i, i) = T(1);
    return m;
  }
};
using MatD = DenseMat<double>;
using MatF = DenseMat<float>;

// Truncated SVD A ~= U diag(s) Vt with the k largest singular values.
struct Svd {
  MatD u;                 // [m, k], orthonormal columns
  std::vector<double> s;  // [k], descending, >= 0
  MatD vt;                // [k, n], orthonormal rows
};

// Thin SVD of A [m, n] (dgesdd, falling back to dgesvd if dgesdd does not
// converge), truncated to the first k triplets. k in [1, min(m, n)];
// k = -1 means min(m, n). Signs of singular vectors are LAPACK's (arbitrary).
Svd svd(const MatD& A, int64_t k = -1);

// Symmetric eigendecomposition A = V diag(values) V^T (dsyevd). Only the lower
// triangle of A is read. Eigenvalues are sorted descending; column j of
// `vectors` is the eigenvector of values[j], with its sign chosen so that its
// largest-magnitude component (the first one on exact ties) is positive.
struct Eigh {
  std::vector<double> values;  // [n], descending
  MatD vectors;                // [n, n], column j = eigenvector j
};
Eigh eigh(const MatD& A);

// Cholesky factor L (lower, strict upper part zeroed) with A = L L^T, reading
// only the lower triangle of A (dpotrf). Throws lr::Error if A is not
// positive definite.
MatD cholesky(const MatD& A);

// Non-throwing Cholesky for callers that want to retry: on success L holds the
// factor and the function returns 0; otherwise it returns dpotrf's info (> 0:
// the leading minor of that order is not positive definite) and L is garbage.
int try_cholesky(const MatD& A, MatD& L);

// Reciprocal 1-norm condition number estimate of the SPD matrix A given its
// Cholesky factor L (dpocon). anorm1 must be ||A||_1.
double cholesky_rcond(const MatD& L, double anorm1);

// ||A||_1: maximum absolute column sum.
double norm1(const MatD& A);

enum class Side { Left, Right };
enum class Uplo { Lower, Upper };

// Triangular solve in place (dtrsm), T square, non-unit diagonal:
//   Side::Left:  B := op(T)^{-1} B      Side::Right: B := B op(T)^{-1}
// with op(T) = T^T when `transpose`. Only the `uplo` triangle of T is read.
void trsm(Side side, Uplo uplo, bool transpose, const MatD& T, MatD& B);

// Triangular multiply in place (dtrmm): Left: B := op(T) B; Right: B := B op(T).
void trmm(Side side, Uplo uplo, bool transpose, const MatD& T, MatD& B);

// C = op(A) op(B) (dgemm), op(X) = X^T when the flag is set.
MatD matmul(const MatD& A, const MatD& B, bool transpose_a = false, bool transpose_b = false);

// Frobenius norm.
double frobenius(const MatD& A);

}  // namespace lr::linalg
