#include "compress/gram.h"

#include "linalg/blas.h"

#include <algorithm>
#include <climits>
#include <cmath>

#include "core/error.h"

namespace lr::compress {

GramAccumulator::GramAccumulator(int64_t n) : n_(n) {
  if (n < 1 || n > INT_MAX)
    lr::fail("GramAccumulator: width n={} out of range [1, {}]", n, INT_MAX);
  gram_ = MatD(n, n);
}

void GramAccumulator::add(const float* X, int64_t tokens) {
  if (tokens < 0) lr::fail("GramAccumulator::add: negative token count {}", tokens);
  if (tokens == 0) return;
  LR_ASSERT(X != nullptr);
  // Validate everything first so a bad batch leaves the accumulator untouched.
  for (int64_t i = 0; i < tokens * n_; ++i)
    if (!std::isfinite(X[i]))
      lr::fail(
          "GramAccumulator::add: X [{} x {}] has a non-finite value ({}) at token {}, column {}",
          tokens, n_, X[i], i / n_, i % n_);
  if (chunk_.empty()) chunk_.resize(static_cast<size_t>(kChunkTokens * n_));
  const int n = static_cast<int>(n_);
  for (int64_t t0 = 0; t0 < tokens; t0 += kChunkTokens) {
    const int64_t t = std::min(kChunkTokens, tokens - t0);
    std::copy(X + t0 * n_, X + (t0 + t) * n_, chunk_.begin());
    // G(lower) += C^T C with C = chunk [t, n] row-major.
    cblas_dsyrk(CblasRowMajor, CblasLower, CblasTrans, n, static_cast<int>(t), 1.0, chunk_.data(),
                n, 1.0, gram_.data(), n);
  }
  count_ += tokens;
  symmetric_ = false;
}

void GramAccumulator::merge(const GramAccumulator& other) {
  if (other.n_ != n_) lr::fail("GramAccumulator::merge: width mismatch ({} vs {})", n_, other.n_);
  // The lower triangles are exact in both; the sum's upper one is refilled.
  for (size_t i = 0; i < gram_.a.size(); ++i) gram_.a[i] += other.gram_.a[i];
  count_ += other.count_;
  symmetric_ = false;
}

const MatD& GramAccumulator::gram() const {
  if (!symmetric_) symmetrize();
  return gram_;
}

void GramAccumulator::symmetrize() const {
  // Copy the lower triangle (the one dsyrk updates) onto the upper one, in
  // square tiles so both the reads and the writes stay cache friendly.
  constexpr int64_t kTile = 64;
  for (int64_t i0 = 0; i0 < n_; i0 += kTile)
    for (int64_t j0 = 0; j0 <= i0; j0 += kTile)
      for (int64_t i = i0; i < std::min(i0 + kTile, n_); ++i)
        for (int64_t j = j0; j < std::min({j0 + kTile, n_, i}); ++j) gram_(j, i) = gram_(i, j);
  symmetric_ = true;
}

}  // namespace lr::compress
