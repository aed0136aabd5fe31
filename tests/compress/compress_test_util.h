// Shared helpers for the compressor tests: a portable deterministic Gaussian
// generator and small dense-matrix utilities in double.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "../error_of.h"
#include "compress/factorize.h"
#include "linalg/linalg.h"
#include "core/error.h"

// EXPECT that the string `text` contains `part`, printing both otherwise.
#define LR_EXPECT_CONTAINS(text, part)                                      \
  do {                                                                      \
    const std::string lr_text_ = (text);                                    \
    EXPECT_NE(lr_text_.find(part), std::string::npos)                       \
        << "expected to contain: " << (part) << "\n  actual: " << lr_text_; \
  } while (0)

namespace lr::compress::testing {
using namespace lr::linalg;

using lr::test::error_of;  // the shared helper: a test failure when nothing throws

// splitmix64 + Box-Muller: identical streams on every platform and library.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; }  // (0, 1)
  double normal() {
    const double u1 = uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  uint64_t s_;
};

inline MatD random_matrix(Rng& rng, int64_t rows, int64_t cols) {
  MatD A(rows, cols);
  for (double& v : A.a) v = rng.normal();
  return A;
}

inline std::vector<float> to_floats(const MatD& A) {
  return {A.a.begin(), A.a.end()};
}

inline MatD to_double(const MatF& F) {
  MatD D(F.rows, F.cols);
  for (size_t i = 0; i < F.a.size(); ++i) D.a[i] = F.a[i];
  return D;
}

inline MatD to_double(const std::vector<float>& v, int64_t rows, int64_t cols) {
  MatD D(rows, cols);
  for (size_t i = 0; i < v.size(); ++i) D.a[i] = v[i];
  return D;
}

inline MatD sub(const MatD& A, const MatD& B) {
  MatD C = A;
  for (size_t i = 0; i < C.a.size(); ++i) C.a[i] -= B.a[i];
  return C;
}

// out * in, in double.
inline MatD product(const MatF& out, const MatF& in) {
  return matmul(to_double(out), to_double(in));
}

// ||A - B||_F / ||B||_F
inline double rel_diff(const MatD& A, const MatD& B) {
  return frobenius(sub(A, B)) / frobenius(B);
}

// A random SPD matrix with eigenvalues spread over [1, cond]-ish: Q diag Q^T.
inline MatD random_spd(Rng& rng, int64_t n, double cond) {
  const Svd q = svd(random_matrix(rng, n, n));
  MatD D(n, n);
  for (int64_t i = 0; i < n; ++i)
    D(i, i) =
        std::pow(cond, -static_cast<double>(i) / static_cast<double>(std::max<int64_t>(n - 1, 1)));
  return matmul(matmul(q.u, D), q.u, false, true);
}

}  // namespace lr::compress::testing
