// The closed-form refit of sequential calibration (compress/sequential.h):
// U minimises |W X - Q X' - U V X'| over the tokens, checked against the
// loss itself (no step in any direction lowers it) and against the exact
// answer where one is known.
#include <gtest/gtest.h>

#include "compress/sequential.h"
#include "compress_test_util.h"

namespace lr::compress {
namespace {

using testing::Rng;

// sum_t |W x_t - Q x'_t - U V x'_t|^2 in double; X, X' [t, n] rows.
double loss(const MatD& W, const MatD* Q, const MatD& U, const MatD& V, const MatD& X,
            const MatD& Xc) {
  const MatD y = matmul(X, W, false, true);                               // [t, m]
  const MatD z = matmul(matmul(Xc, V, false, true), U, false, true);      // [t, m]
  const MatD q = Q ? matmul(Xc, *Q, false, true) : MatD(y.rows, y.cols);  // [t, m]
  double s = 0;
  for (size_t i = 0; i < y.a.size(); ++i)
    s += (y.a[i] - q.a[i] - z.a[i]) * (y.a[i] - q.a[i] - z.a[i]);
  return s;
}

MatF to_float(const MatD& d) {
  MatF f(d.rows, d.cols);
  for (size_t i = 0; i < d.a.size(); ++i) f.a[i] = float(d.a[i]);
  return f;
}

TEST(Refit, MinimisesTheOutputErrorOnTheCompressedInputs) {
  Rng rng(3);
  const int64_t m = 24, n = 16, r = 5, t = 200;
  const MatD W = testing::random_matrix(rng, m, n), V = testing::random_matrix(rng, r, n);
  const MatD X = testing::random_matrix(rng, t, n);
  MatD Xc = X;  // the compressed stream: the same inputs, perturbed
  for (double& v : Xc.a) v += 0.3 * rng.normal();
  const MatD gram = matmul(Xc, Xc, true, false), cross = matmul(X, Xc, true, false);
  for (bool residual : {false, true}) {
    const MatD Q = testing::random_matrix(rng, m, n);
    const std::vector<float> w = testing::to_floats(W), q = testing::to_floats(Q);
    const MatF u =
        refit_out(w.data(), residual ? q.data() : nullptr, m, n, to_float(V), r, gram, cross);
    ASSERT_EQ(u.rows, m);
    ASSERT_EQ(u.cols, r);
    const MatD U = testing::to_double(u);
    const double best = loss(W, residual ? &Q : nullptr, U, V, X, Xc);
    // A minimum: every step along a random direction raises the loss.
    for (int k = 0; k < 8; ++k) {
      MatD step = testing::random_matrix(rng, m, r), up = U, down = U;
      for (size_t i = 0; i < up.a.size(); ++i) {
        up.a[i] += 1e-3 * step.a[i];
        down.a[i] -= 1e-3 * step.a[i];
      }
      EXPECT_GT(loss(W, residual ? &Q : nullptr, up, V, X, Xc), best * (1 - 1e-9)) << residual;
      EXPECT_GT(loss(W, residual ? &Q : nullptr, down, V, X, Xc), best * (1 - 1e-9)) << residual;
    }
  }
}

TEST(Refit, ExactWhenTheInputsAgreeAndWFactorsThroughV) {
  // W = U0 V and x' = x: the refit recovers U0 (zero loss).
  Rng rng(9);
  const int64_t m = 12, n = 10, r = 4, t = 50;
  const MatD U0 = testing::random_matrix(rng, m, r), V = testing::random_matrix(rng, r, n);
  const MatD W = matmul(U0, V), X = testing::random_matrix(rng, t, n);
  const MatD gram = matmul(X, X, true, false);
  const std::vector<float> w = testing::to_floats(W);
  const MatF u = refit_out(w.data(), nullptr, m, n, to_float(V), r, gram, gram);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t k = 0; k < r; ++k) EXPECT_NEAR(u(i, k), U0(i, k), 1e-4) << i << "," << k;
}

}  // namespace
}  // namespace lr::compress
