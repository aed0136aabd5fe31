// Low-rank factorization of linear-layer weights.
//
// A linear layer is y = W x with W [m = out, n = in] row-major float. Its
// rank-r replacement is W ~= out * in with in [r, n] applied first and
// out [m, r] second; both factors carry sqrt of the singular values.
//
// Methods:
//  * svd_factorize     plain truncated SVD (minimizes ||W - W'||_F);
//  * whiten_factorize  SVD-LLM v1 "whitening": minimizes ||(W - W') X^T||_F
//                      over calibration inputs X, given G = X^T X (sum of x x^T);
//  * shared_factorize  Basis Sharing: g matrices with the same input share one
//                      in-basis [k, n]; each keeps a private out factor [m_i, k].
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "linalg/linalg.h"

namespace lr::compress {
using namespace linalg;  // MatD and the LAPACK wrappers (src/linalg)


// Rank that makes a rank-r pair cost keep * (dense parameter count):
// r * (m + n) <= keep * m * n, i.e. r = floor(keep * m * n / (m + n)) computed
// in double in the order m * n * keep / (m + n) (SVD-LLM's formula), clamped
// to [1, min(m, n)]. Note keep = 1.0 means "as many parameters as the dense
// matrix", r = m n / (m + n), which is NOT full rank (576 x 576 -> 288).
// keep outside (0, 1] (or NaN), m < 1 or n < 1 -> lr::Error.
int64_t rank_for_keep(double keep, int64_t m, int64_t n);

// Basis Sharing rank for g matrices [m, n] sharing one in-basis [k, n] plus g
// private out factors [m, k]: the largest k with k * n + g * m * k <= keep * g * m * n,
// k = floor(n * m * g * keep / (n + g * m)), clamped to [1, min(n, g * m)].
// g = 1 gives rank_for_keep. Same errors as rank_for_keep, plus g < 1.
int64_t shared_rank_for_keep(double keep, int64_t m, int64_t n, int g);

struct Factors {
  MatF out;  // [m, r] = U_r sqrt(S_r)
  MatF in;   // [r, n] = sqrt(S_r) Vt_r (times S^{-1} when whitened)
  std::vector<double> sigma;  // [min(m, n)] every singular value of W S (W when plain), descending
};

// How whiten_factorize obtains S with S S^T = gram:
//  * Eigen     gram = Q diag(lambda) Q^T (dsyevd, double), S = Q diag(sqrt(lambda))
//              (SVD-LLM v2). Never fails on a positive semi-definite gram:
//              eigenvalues below 1e-10 x the largest are raised to it (noted).
//  * Cholesky  S = chol(gram) (SVD-LLM v1), with the ridge retries below.
//  * Auto      for W with no more rows than columns (out <= in), no factor
//              of gram at all: out in = U_r U_r^T W with U_r the leading
//              eigenvectors of the outputs' covariance W gram W^T [m, m] (the
//              optimum every S gives, exact on a singular gram too, and
//              cheaper: m^3 + m n^2 against n^3 and the SVD of W S); for
//              other W Cholesky where it holds without a ridge (its 1-norm
//              condition estimate at least 1e-12), else Eigen: the
//              eigendecomposition costs ~10x a Cholesky (minutes for an
//              8960-wide Gram).
// All give the same optimum on a well-conditioned gram.
enum class Whitening { Eigen, Cholesky, Auto };

// How the whitening matrix was obtained.
struct WhitenReport {
  double lambda = 0.0;     // ridge added: lambda * mean(diag(gram)) * I; 0 = none
  bool fell_back = false;  // true: whitening was impossible, plain SVD was used
  std::string note;        // human-readable account (empty when gram was used as is)
};

// Plain truncated SVD of W [m, n] at rank r in [1, min(m, n)].
// Errors (lr::Error): bad shape or rank, non-finite value in W (named with its
// position), non-finite factors.
Factors svd_factorize(const float* W, int64_t m, int64_t n, int64_t r);

// SVD-LLM v1 closed form. gram [n, n] = sum over calibration tokens of x x^T
// (symmetric; only its lower triangle is read). With S = chol(gram) (lower):
// W S = U Sigma Vt, out = U_r sqrt(Sigma_r), in = sqrt(Sigma_r) Vt_r S^{-1}
// (a triangular solve). This minimizes ||(W - out in) X^T||_F over rank r.
//
// If gram is not numerically positive definite (dpotrf fails, or its 1-norm
// reciprocal condition estimate is below 1e-12), lambda * mean(diag(gram)) * I
// is added with lambda = 1e-6, 1e-5, ..., 1e-1 until it is. If that never
// works, or gram is all zero, it falls back to plain SVD (rep->fell_back).
// An empty (0 x 0) gram means "no calibration data": plain SVD, not a fallback.
// gram of the wrong shape or with a non-finite entry -> lr::Error.
Factors whiten_factorize(const float* W, int64_t m, int64_t n, const MatD& gram, int64_t r,
                         WhitenReport* rep = nullptr, Whitening how = Whitening::Cholesky);

struct SharedFactors {
  MatF basis;              // [k, n], shared by every matrix of the group
  std::vector<MatF> outs;  // outs[i] = [ms[i], k]; W_i ~= outs[i] * basis
  std::vector<double> sigma;  // every singular value of the whitened stack
};

// Basis Sharing joint decomposition of g = Ws.size() matrices W_i [ms[i], n]
// that read the same input. The stack [W_1; ...; W_g] ([sum m_i, n]) is
// whitened with S = chol(gram), where gram is the sum of the group's input
// Grams (the caller sums them): W_cat S = U Sigma Vt, basis = sqrt(Sigma_k) Vt_k S^{-1},
// outs[i] = the rows of U_k sqrt(Sigma_k) that belong to W_i.
// k in [1, min(n, sum m_i)]. Regularisation, fallback and the empty-gram case
// are as in whiten_factorize (empty gram = plain joint SVD).
SharedFactors shared_factorize(const std::vector<const float*>& Ws, const std::vector<int64_t>& ms,
                               int64_t n, const MatD& gram, int64_t k, WhitenReport* rep = nullptr,
                               Whitening how = Whitening::Cholesky);

// ||(W - f.out * f.in) X^T||_F for W [m, n] (m = f.out.rows, n = f.in.cols)
// and X [tokens, n] row-major, computed in double. Factor shapes that do not
// chain -> lr::Error.
double activation_error(const float* W, const Factors& f, const float* X, int64_t tokens);

// ||W S||_F^2 = trace(W G W^T) for W [m, n] row-major and the Gram G [n, n]
// of the inputs (G = X^T X = S S^T): the energy of W's outputs over the
// calibration inputs, in double. G's shape other than [n, n] -> assert.
double output_energy(const float* W, int64_t m, int64_t n, const MatD& G);

}  // namespace lr::compress
