#include "compress/factor_parts.h"

#include <algorithm>

#include "compress/quantize.h"
#include "compress/quantize_model.h"
#include "core/error.h"

namespace lr::compress {

// The first r rows of f ([r, cols]) / the first r columns of f ([rows, r]).
Matrix leading_rows(const MatF& f, int64_t r) {
  LR_ASSERT(r <= f.rows);
  Matrix m = Matrix::allocate(DType::F32, r, f.cols);
  std::copy(f.a.begin(), f.a.begin() + r * f.cols, m.f32_mut());
  return m;
}
// W as f32 values: the matrix's own when it is F32, else decoded into buf.
const float* as_f32(const Matrix& w, std::vector<float>& buf) {
  if (w.dtype == DType::F32) return w.f32();
  buf.resize(size_t(w.rows * w.cols));
  for (int64_t r = 0; r < w.rows; ++r) w.row_to_f32(r, buf.data() + r * w.cols);
  return buf.data();
}

Matrix leading_cols(const MatF& f, int64_t r) {
  LR_ASSERT(r <= f.cols);
  Matrix m = Matrix::allocate(DType::F32, f.rows, r);
  for (int64_t i = 0; i < f.rows; ++i)
    std::copy_n(f.a.begin() + i * f.cols, r, m.f32_mut() + i * r);
  return m;
}

// sum_{j >= r} sigma_j^2 / energy (energy 0: sum_j sigma_j^2).
double truncation_loss(const std::vector<double>& sigma, int64_t r, double energy) {
  double all = 0, tail = 0;
  for (size_t j = 0; j < sigma.size(); ++j) {
    all += sigma[j] * sigma[j];
    if (int64_t(j) >= r) tail += sigma[j] * sigma[j];
  }
  if (energy > 0) all = energy;
  return all > 0 ? tail / all : 0.0;
}

// W [rows, cols] quantized row by row to `type` (or the type llama.cpp
// substitutes when its blocks do not fit a row; `note` says so), weighted by
// `importance` [cols] when it is not empty, on `threads` threads.
Matrix quantize_matrix(DType type, const float* W, int64_t rows, int64_t cols,
                       const std::vector<float>& importance, int threads, std::string& note) {
  if (!row_bytes(type, uint64_t(cols))) {
    const DType fb = fallback_type(type);
    if (!row_bytes(fb, uint64_t(cols)))
      fail("rows of {} values fit neither {} nor {}", cols, dtype_name(type), dtype_name(fb));
    note = fmt::format("rows of {} are not whole {} blocks: quantized as {}", cols,
                       dtype_name(type), dtype_name(fb));
    type = fb;
  }
  Matrix q = Matrix::allocate(type, rows, cols);
  compress::quantize_rows(
      type, rows, cols, [&](int64_t r, float* row) { std::copy_n(W + r * cols, cols, row); },
      importance.empty() ? nullptr : importance.data(), q.data.get(), threads);
  return q;
}

// W - Q(W) into buf (which may hold W itself): what the correction fits.
const float* quantization_error(const Matrix& q, const float* W, std::vector<float>& buf) {
  std::vector<float> row(static_cast<size_t>(q.cols));
  std::vector<float> e(static_cast<size_t>(q.rows * q.cols));
  for (int64_t r = 0; r < q.rows; ++r) {
    q.row_to_f32(r, row.data());
    for (int64_t c = 0; c < q.cols; ++c)
      e[size_t(r * q.cols + c)] = W[r * q.cols + c] - row[size_t(c)];
  }
  buf = std::move(e);
  return buf.data();
}

// A[m, n] -= out[m, r] in[r, n].
void subtract_product(const MatF& out, const MatF& in, float* A) {
  const int64_t m = out.rows, r = out.cols, n = in.cols;
  LR_ASSERT(in.rows == r);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t k = 0; k < r; ++k) {
      const float a = out(i, k);
      const float* v = &in.a[size_t(k * n)];
      float* row = A + i * n;
      for (int64_t c = 0; c < n; ++c) row[c] -= a * v[c];
    }
}

}  // namespace lr::compress
