#include "compress/factorize.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <string_view>

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

// Chooses the whitening factor S (lower, S S^T = gram + ridge) for gram [n, n].
// Returns an empty matrix when no whitening is to be applied (empty gram, or
// fallback); rep says which.
MatD whitening_factor(std::string_view fn, const MatD& gram, int64_t n, WhitenReport& rep) {
  rep = WhitenReport{};
  if (gram.rows == 0 && gram.cols == 0) {
    rep.note = "no gram given: plain (unwhitened) SVD";
    return {};
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
    return {};
  }

  std::string why_not;  // why the unregularised gram was rejected
  MatD G, L;
  for (double lambda : kLambdas) {
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
        return L;
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

// Rank-k whitened factorization of D [M, n] (overwritten). S empty = plain SVD.
// out_d [M, k] = U_k sqrt(Sigma_k); in_d [k, n] = sqrt(Sigma_k) Vt_k S^{-1}.
void lowrank(MatD& D, const MatD& S, int64_t k, MatD& out_d, MatD& in_d) {
  if (!S.empty()) trmm(Side::Right, Uplo::Lower, false, S, D);  // D := W S
  Svd sv = svd(D, k);
  D = MatD();  // release before the factors are formed
  out_d = std::move(sv.u);
  in_d = std::move(sv.vt);
  for (int64_t j = 0; j < k; ++j) {
    const double r = std::sqrt(sv.s[static_cast<size_t>(j)]);
    for (int64_t i = 0; i < out_d.rows; ++i) out_d(i, j) *= r;
    for (int64_t c = 0; c < in_d.cols; ++c) in_d(j, c) *= r;
  }
  if (!S.empty()) trsm(Side::Right, Uplo::Lower, false, S, in_d);  // in := in S^{-1}
}

void check_rank(std::string_view fn, int64_t r, int64_t limit, int64_t rows, int64_t n) {
  if (r < 1 || r > limit)
    lr::fail("{}: rank {} out of range [1, {}] for a [{} x {}] matrix", fn, r, limit, rows, n);
}

Factors factorize_one(std::string_view fn, const float* W, int64_t m, int64_t n, const MatD* gram,
                      int64_t r, WhitenReport* rep) {
  check_dims(fn, m, n);
  check_rank(fn, r, std::min(m, n), m, n);
  MatD D(m, n);
  load_rows(fn, "W", W, m, n, D, 0);
  MatD S;
  if (gram != nullptr) {
    WhitenReport local;
    S = whitening_factor(fn, *gram, n, local);
    if (rep != nullptr) *rep = std::move(local);
  }
  MatD out_d, in_d;
  lowrank(D, S, r, out_d, in_d);
  Factors f;
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
  return factorize_one("svd_factorize", W, m, n, nullptr, r, nullptr);
}

Factors whiten_factorize(const float* W, int64_t m, int64_t n, const MatD& gram, int64_t r,
                         WhitenReport* rep) {
  return factorize_one("whiten_factorize", W, m, n, &gram, r, rep);
}

SharedFactors shared_factorize(const std::vector<const float*>& Ws, const std::vector<int64_t>& ms,
                               int64_t n, const MatD& gram, int64_t k, WhitenReport* rep) {
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
  WhitenReport local;
  const MatD S = whitening_factor(fn, gram, n, local);
  if (rep != nullptr) *rep = std::move(local);

  MatD out_d, in_d;
  lowrank(D, S, k, out_d, in_d);
  SharedFactors sf;
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

}  // namespace lr::compress
