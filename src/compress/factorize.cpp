#include "compress/factorize.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <string_view>

#include "linalg/blas.h"
#include "core/error.h"

namespace lr::compress {

namespace {

// Below this reciprocal condition number (1-norm estimate) a Cholesky factor
// is treated as failed: the triangular solve with it would keep fewer than
// ~4 of double's ~16 significant digits.
constexpr double kMinRcond = 1e-12;

// Ridge strengths tried, in units of mean(diag(gram)).
constexpr std::array<double, 7> kLambdas = {0.0, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1};

void check_keep(double keep) {
  if (!(keep > 0.0 && keep <= 1.0)) lr::fail("keep must be in (0, 1], got {}", keep);
}

void check_dims(std::string_view fn, int64_t m, int64_t n) {
  if (m < 1 || n < 1) lr::fail("{}: matrix shape [{} x {}] must be at least [1 x 1]", fn, m, n);
}

// Appends W [m, n] (float) to D starting at row `row0`, rejecting non-finite values.
void load_rows(std::string_view fn, std::string_view name, const float* W, int64_t m, int64_t n,
               MatD& D, int64_t row0) {
  LR_ASSERT(W != nullptr);
  for (int64_t i = 0; i < m; ++i) {
    const float* src = W + i * n;
    double* dst = &D(row0 + i, 0);
    for (int64_t j = 0; j < n; ++j) {
      if (!std::isfinite(src[j]))
        lr::fail("{}: {} [{} x {}] has a non-finite value ({}) at row {}, col {}", fn, name, m, n,
                 src[j], i, j);
      dst[j] = src[j];
    }
  }
}

// Copies rows [row0, row0 + rows) of D into a float matrix, rejecting values
// that are not finite in float (NaN, Inf, or beyond float's range).
MatF to_float(std::string_view fn, std::string_view name, const MatD& D, int64_t row0,
              int64_t rows) {
  MatF F(rows, D.cols);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < D.cols; ++j) {
      const float v = static_cast<float>(D(row0 + i, j));
      if (!std::isfinite(v))
        lr::fail("{}: factor '{}' [{} x {}] has a non-finite value ({}) at row {}, col {}", fn,
                 name, rows, D.cols, D(row0 + i, j), i, j);
      F(i, j) = v;
    }
  return F;
}

// The whitening factor S of a Gram (S S^T = gram, or gram + ridge): lower
// triangular (Cholesky), or Q diag(sqrt(lambda)) from the eigendecomposition.
// Empty when no whitening is applied (empty gram, or fallback).
struct Whitener {
  MatD lower;                 // Cholesky: S
  MatD q;                     // eigen: S = q diag(root)
  std::vector<double> root;   // eigen: sqrt of the (floored) eigenvalues
  bool empty() const { return lower.empty() && q.empty(); }
  // D := D S
  void apply(MatD& D) const {
    if (!lower.empty()) return trmm(linalg::Side::Right, linalg::Uplo::Lower, false, lower, D);
    if (q.empty()) return;
    D = matmul(D, q);
    for (int64_t i = 0; i < D.rows; ++i)
      for (int64_t j = 0; j < D.cols; ++j) D(i, j) *= root[size_t(j)];
  }
  // B := B S^{-1}
  void unapply(MatD& B) const {
    if (!lower.empty()) return trsm(linalg::Side::Right, linalg::Uplo::Lower, false, lower, B);
    if (q.empty()) return;
    for (int64_t i = 0; i < B.rows; ++i)
      for (int64_t j = 0; j < B.cols; ++j) B(i, j) /= root[size_t(j)];
    B = matmul(B, q, false, true);
  }
};

// Eigenvalues of the Gram below this fraction of the largest are raised to
// it: S = Q diag(sqrt(lambda)) then has a condition number of at most 1e5,
// and directions the calibration never excited keep a small weight instead
// of an unbounded one in S^{-1}.
constexpr double kEigenFloor = 1e-10;

Whitener eigen_whitener(const MatD& gram, int64_t n, WhitenReport& rep) {
  Eigh e = eigh(gram);
  const double top = e.values.empty() ? 0.0 : e.values[0];
  Whitener w;
  if (!(top > 0.0)) {
    rep.fell_back = true;
    rep.note = fmt::format("gram has no positive eigenvalue (largest {}): fell back to plain SVD", top);
    return w;
  }
  const double floor = kEigenFloor * top;
  int raised = 0;
  w.root.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) {
    double v = e.values[size_t(i)];
    if (v < floor) v = floor, ++raised;
    w.root[size_t(i)] = std::sqrt(v);
  }
  if (raised > 0)
    rep.note = fmt::format("{} of {} gram eigenvalues below {:g} x the largest were raised to it",
                           raised, n, kEigenFloor);
  w.q = std::move(e.vectors);
  return w;
}

Whitener cholesky_whitener(const MatD& gram, int64_t n, double mean_diag, WhitenReport& rep,
                           bool ridge = true) {
  std::string why_not;  // why the unregularised gram was rejected
  MatD G, L;
  for (double lambda : kLambdas) {
    if (lambda > 0 && !ridge) break;
    G = gram;
    for (int64_t i = 0; i < n; ++i) G(i, i) += lambda * mean_diag;
    const int info = try_cholesky(G, L);
    std::string reason;
    if (info != 0) {
      reason = fmt::format("dpotrf info={}", info);
    } else {
      const double rcond = cholesky_rcond(L, norm1(G));
      if (rcond >= kMinRcond) {
        rep.lambda = lambda;
        if (lambda > 0.0)
          rep.note = fmt::format(
              "gram not numerically positive definite ({}); added {:g} * mean(diag) * I", why_not,
              lambda);
        Whitener w;
        w.lower = std::move(L);
        return w;
      }
      reason = fmt::format("rcond={:.3g} < {:g}", rcond, kMinRcond);
    }
    if (lambda == 0.0) why_not = reason;
  }
  rep.fell_back = true;
  rep.note = fmt::format(
      "gram not positive definite ({}) even with {:g} * mean(diag) * I added: fell back to plain "
      "SVD",
      why_not, kLambdas.back());
  return {};
}

// Checks gram [n, n]: its mean diagonal, or 0 where no whitening can be
// applied (empty, all zero: rep says so); a wrong shape or a non-finite
// entry is an error.
double usable_gram(std::string_view fn, const MatD& gram, int64_t n, WhitenReport& rep) {
  rep = WhitenReport{};
  if (gram.rows == 0 && gram.cols == 0) {
    rep.note = "no gram given: plain (unwhitened) SVD";
    return 0;
  }
  if (gram.rows != n || gram.cols != n)
    lr::fail("{}: gram is [{} x {}], expected [{} x {}] (input width of W)", fn, gram.rows,
             gram.cols, n, n);
  LR_ASSERT(static_cast<int64_t>(gram.a.size()) == n * n);
  double trace = 0.0;
  bool all_zero = true;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const double v = gram(i, j);
      if (!std::isfinite(v))
        lr::fail("{}: gram [{} x {}] has a non-finite value ({}) at row {}, col {}", fn, n, n, v, i,
                 j);
      all_zero = all_zero && v == 0.0;
      if (i == j) trace += v;
    }
  const double mean_diag = trace / static_cast<double>(n);
  if (all_zero || !(mean_diag > 0.0)) {
    rep.fell_back = true;
    rep.note = all_zero ? "gram is all zero (no calibration signal): fell back to plain SVD"
                        : fmt::format(
                              "gram has mean diagonal {} <= 0 (not a Gram matrix): fell "
                              "back to plain SVD",
                              mean_diag);
    return 0;
  }
  return mean_diag;
}

// Chooses the whitening factor for gram [n, n]; rep says what was done.
Whitener whitening_factor(std::string_view fn, const MatD& gram, int64_t n, Whitening how,
                          WhitenReport& rep) {
  const double mean_diag = usable_gram(fn, gram, n, rep);
  if (mean_diag == 0) return {};
  if (how == Whitening::Auto) {  // Cholesky where it holds without a ridge, else eigen
    Whitener w = cholesky_whitener(gram, n, mean_diag, rep, false);
    if (!w.empty()) return w;
    const std::string why = rep.note.substr(0, rep.note.find(')') + 1);
    rep = WhitenReport{};
    w = eigen_whitener(gram, n, rep);
    rep.note = "Cholesky " + why.substr(why.find('(')) + ": eigen whitening" +
               (rep.note.empty() ? "" : "; " + rep.note);
    return w;
  }
  return how == Whitening::Eigen ? eigen_whitener(gram, n, rep)
                                 : cholesky_whitener(gram, n, mean_diag, rep);
}

// Rank-k whitened factorization of D [M, n] (overwritten). S empty = plain SVD.
// out_d [M, k] = U_k sqrt(Sigma_k); in_d [k, n] = sqrt(Sigma_k) Vt_k S^{-1};
// sigma = every singular value of D S.
void lowrank(MatD& D, const Whitener& S, int64_t k, MatD& out_d, MatD& in_d,
             std::vector<double>& sigma) {
  S.apply(D);  // D := W S
  Svd sv = svd(D);
  D = MatD();  // release before the factors are formed
  sigma = sv.s;
  out_d = MatD(sv.u.rows, k);
  for (int64_t i = 0; i < sv.u.rows; ++i)
    std::copy_n(&sv.u(i, 0), k, &out_d(i, 0));
  sv.u = MatD();
  in_d = MatD(k, sv.vt.cols);
  std::copy_n(sv.vt.a.begin(), k * sv.vt.cols, in_d.a.begin());
  sv.vt = MatD();
  for (int64_t j = 0; j < k; ++j) {
    const double r = std::sqrt(sv.s[static_cast<size_t>(j)]);
    for (int64_t i = 0; i < out_d.rows; ++i) out_d(i, j) *= r;
    for (int64_t c = 0; c < in_d.cols; ++c) in_d(j, c) *= r;
  }
  S.unapply(in_d);  // in := in S^{-1}
}

// The whitened truncation through the outputs' covariance: for any S with
// S S^T = G, [D S]_k S^{-1} = U_k U_k^T D, where U_k holds the k leading
// eigenvectors of C = D G D^T [M, M], whose eigenvalues are the squared
// singular values of D S. No factor of G is formed, so nothing is floored
// or regularised. Factors balanced as lowrank()'s: out_d = U_k sqrt(Sigma_k),
// in_d = sqrt(Sigma_k)^{-1} U_k^T D (a direction of no output energy keeps
// U_k and U_k^T D as they are).
void project(const MatD& D, const MatD& gram, int64_t k, MatD& out_d, MatD& in_d,
             std::vector<double>& sigma) {
  const int64_t M = D.rows;
  Eigh e = eigh(matmul(matmul(D, gram), D, false, true));
  sigma.resize(size_t(M));
  for (int64_t j = 0; j < M; ++j) sigma[size_t(j)] = std::sqrt(std::max(e.values[size_t(j)], 0.0));
  out_d = MatD(M, k);
  for (int64_t i = 0; i < M; ++i) std::copy_n(&e.vectors(i, 0), k, &out_d(i, 0));
  e.vectors = MatD();
  in_d = matmul(out_d, D, true, false);
  for (int64_t j = 0; j < k; ++j) {
    const double sj = sigma[size_t(j)];
    if (!(sj > 1e-12 * sigma[0])) continue;
    const double r = std::sqrt(sj);
    for (int64_t i = 0; i < M; ++i) out_d(i, j) *= r;
    for (int64_t c = 0; c < in_d.cols; ++c) in_d(j, c) /= r;
  }
}

// Rank-k factors of D [M, n] (overwritten) against gram (null: plain SVD).
// Auto with M <= n takes the outputs' covariance (project: M^3 + M n^2
// instead of a factor of the n x n gram, the SVD of D S and triangular
// products); otherwise the whitening factor `how` chooses.
void whitened_lowrank(std::string_view fn, MatD& D, const MatD* gram, Whitening how, int64_t k,
                      WhitenReport* rep, MatD& out_d, MatD& in_d, std::vector<double>& sigma) {
  WhitenReport local;
  Whitener S;
  if (gram != nullptr && how == Whitening::Auto && D.rows <= D.cols) {
    if (usable_gram(fn, *gram, D.cols, local) > 0) {
      project(D, *gram, k, out_d, in_d, sigma);
      if (rep != nullptr) *rep = std::move(local);
      return;
    }
  } else if (gram != nullptr) {
    S = whitening_factor(fn, *gram, D.cols, how, local);
  }
  if (rep != nullptr && gram != nullptr) *rep = std::move(local);
  lowrank(D, S, k, out_d, in_d, sigma);
}

void check_rank(std::string_view fn, int64_t r, int64_t limit, int64_t rows, int64_t n) {
  if (r < 1 || r > limit)
    lr::fail("{}: rank {} out of range [1, {}] for a [{} x {}] matrix", fn, r, limit, rows, n);
}

Factors factorize_one(std::string_view fn, const float* W, int64_t m, int64_t n, const MatD* gram,
                      int64_t r, Whitening how, WhitenReport* rep) {
  check_dims(fn, m, n);
  check_rank(fn, r, std::min(m, n), m, n);
  MatD D(m, n);
  load_rows(fn, "W", W, m, n, D, 0);
  MatD out_d, in_d;
  Factors f;
  whitened_lowrank(fn, D, gram, how, r, rep, out_d, in_d, f.sigma);
  f.out = to_float(fn, "out", out_d, 0, m);
  f.in = to_float(fn, "in", in_d, 0, r);
  return f;
}

}  // namespace

int64_t rank_for_keep(double keep, int64_t m, int64_t n) {
  check_keep(keep);
  check_dims("rank_for_keep", m, n);
  const double r = std::floor(static_cast<double>(m) * static_cast<double>(n) * keep /
                              static_cast<double>(m + n));
  return std::clamp(static_cast<int64_t>(r), int64_t{1}, std::min(m, n));
}

int64_t shared_rank_for_keep(double keep, int64_t m, int64_t n, int g) {
  check_keep(keep);
  check_dims("shared_rank_for_keep", m, n);
  if (g < 1) lr::fail("shared_rank_for_keep: group size must be >= 1, got {}", g);
  const double gm = static_cast<double>(g) * static_cast<double>(m);
  const double k = std::floor(static_cast<double>(n) * gm * keep / (static_cast<double>(n) + gm));
  return std::clamp(static_cast<int64_t>(k), int64_t{1}, std::min<int64_t>(n, g * m));
}

Factors svd_factorize(const float* W, int64_t m, int64_t n, int64_t r) {
  return factorize_one("svd_factorize", W, m, n, nullptr, r, Whitening::Cholesky, nullptr);
}

Factors whiten_factorize(const float* W, int64_t m, int64_t n, const MatD& gram, int64_t r,
                         WhitenReport* rep, Whitening how) {
  return factorize_one("whiten_factorize", W, m, n, &gram, r, how, rep);
}

SharedFactors shared_factorize(const std::vector<const float*>& Ws, const std::vector<int64_t>& ms,
                               int64_t n, const MatD& gram, int64_t k, WhitenReport* rep,
                               Whitening how) {
  constexpr std::string_view fn = "shared_factorize";
  if (Ws.empty()) lr::fail("{}: empty group", fn);
  if (Ws.size() != ms.size())
    lr::fail("{}: {} matrices but {} row counts", fn, Ws.size(), ms.size());
  int64_t total = 0;
  for (size_t i = 0; i < ms.size(); ++i) {
    if (ms[i] < 1 || n < 1)
      lr::fail("{}: Ws[{}] shape [{} x {}] must be at least [1 x 1]", fn, i, ms[i], n);
    total += ms[i];
  }
  check_rank(fn, k, std::min(n, total), total, n);

  MatD D(total, n);
  int64_t row = 0;
  for (size_t i = 0; i < Ws.size(); ++i) {
    load_rows(fn, fmt::format("Ws[{}]", i), Ws[i], ms[i], n, D, row);
    row += ms[i];
  }
  MatD out_d, in_d;
  SharedFactors sf;
  whitened_lowrank(fn, D, &gram, how, k, rep, out_d, in_d, sf.sigma);
  sf.basis = to_float(fn, "basis", in_d, 0, k);
  sf.outs.reserve(Ws.size());
  row = 0;
  for (size_t i = 0; i < Ws.size(); ++i) {
    sf.outs.push_back(to_float(fn, fmt::format("outs[{}]", i), out_d, row, ms[i]));
    row += ms[i];
  }
  return sf;
}

double activation_error(const float* W, const Factors& f, const float* X, int64_t tokens) {
  const int64_t m = f.out.rows, r = f.out.cols, n = f.in.cols;
  if (f.in.rows != r || static_cast<int64_t>(f.out.a.size()) != m * r ||
      static_cast<int64_t>(f.in.a.size()) != r * n)
    lr::fail("activation_error: factors out [{} x {}] and in [{} x {}] do not chain", m, r,
             f.in.rows, n);
  if (tokens < 0) lr::fail("activation_error: negative token count {}", tokens);
  LR_ASSERT(W != nullptr && (X != nullptr || tokens == 0));

  MatD out_d(m, r), in_d(r, n);
  std::copy(f.out.a.begin(), f.out.a.end(), out_d.a.begin());
  std::copy(f.in.a.begin(), f.in.a.end(), in_d.a.begin());
  MatD D = matmul(out_d, in_d);  // W' [m, n]
  for (int64_t i = 0; i < m * n; ++i)
    D.a[static_cast<size_t>(i)] = W[i] - D.a[static_cast<size_t>(i)];

  constexpr int64_t kChunk = 1024;
  double ssq = 0.0;
  for (int64_t t0 = 0; t0 < tokens; t0 += kChunk) {
    const int64_t t = std::min(kChunk, tokens - t0);
    MatD Xc(t, n);
    std::copy(X + t0 * n, X + (t0 + t) * n, Xc.a.begin());
    const MatD E = matmul(D, Xc, false, true);  // [m, t]
    const double e = frobenius(E);
    ssq += e * e;
  }
  return std::sqrt(ssq);
}

// Rows in blocks of 256 against G (BLAS), so the product never holds all of W G.
double output_energy(const float* W, int64_t rows, int64_t cols, const MatD& G) {
  LR_ASSERT(G.rows == cols && G.cols == cols);
  const int64_t block = 256;
  MatD w(std::min(block, rows), cols), wg(std::min(block, rows), cols);
  double total = 0;
  for (int64_t r0 = 0; r0 < rows; r0 += block) {
    const int64_t n = std::min(block, rows - r0);
    for (int64_t i = 0; i < n * cols; ++i) w.a[size_t(i)] = W[r0 * cols + i];
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(n), int(cols), int(cols), 1.0,
                w.a.data(), int(cols), G.a.data(), int(cols), 0.0, wg.a.data(), int(cols));
    for (int64_t i = 0; i < n * cols; ++i) total += w.a[size_t(i)] * wg.a[size_t(i)];
  }
  return total;
}

}  // namespace lr::compress
