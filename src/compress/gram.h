// Calibration statistics for activation-aware (whitened) SVD: the input Gram
// matrix G = sum_t x_t x_t^T of one linear layer, accumulated in double.
#pragma once

#include <cstdint>
#include <vector>

#include "linalg/linalg.h"

namespace lr::compress {
using namespace linalg;  // MatD and the LAPACK wrappers (src/linalg)

class GramAccumulator {
 public:
  // Tokens converted to double per dsyrk call; add() splits larger batches.
  static constexpr int64_t kChunkTokens = 256;

  // n = input width of the layer (columns of X); must be >= 1.
  explicit GramAccumulator(int64_t n);

  // Adds sum_t x_t x_t^T for X [tokens, n] row-major floats. Throws lr::Error
  // on a negative token count or a non-finite value in X (naming its position).
  void add(const float* X, int64_t tokens);

  // Adds another accumulator's Gram and token count (same n, else lr::Error).
  void merge(const GramAccumulator& other);

  int64_t n() const { return n_; }
  int64_t count() const { return count_; }
  // Full symmetric [n, n] matrix (both triangles filled). add() and merge()
  // update the lower triangle only; the upper one is filled here, once (so
  // not from two threads at a time).
  const MatD& gram() const;

 private:
  void symmetrize() const;

  int64_t n_;
  int64_t count_ = 0;
  mutable MatD gram_;
  mutable bool symmetric_ = true;
  std::vector<double> chunk_;  // [kChunkTokens, n] conversion buffer
};

}  // namespace lr::compress
