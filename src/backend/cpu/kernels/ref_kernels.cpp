#include "backend/cpu/kernels/ref_kernels.h"

#include <array>
#include <cmath>
#include <limits>
#include <vector>
#include <algorithm>

#include "core/dtype.h"
#include "core/half.h"
#include "model/scalar_ops.h"

namespace lr::cpu::ref {

void matvec_f32(const float* W, const float* x, float* y, int64_t cols, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    double s = 0;
    for (int64_t c = 0; c < cols; ++c) s += double(W[r * cols + c]) * double(x[c]);
    y[r] = float(s);
  }
}

void matvec_bf16(const uint16_t* W, const float* x, float* y, int64_t cols, int64_t r0,
                 int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    double s = 0;
    for (int64_t c = 0; c < cols; ++c) s += double(bf16_to_f32(W[r * cols + c])) * double(x[c]);
    y[r] = float(s);
  }
}

namespace {

// The value of an IEEE binary16 bit pattern, straight from the definition
// (independent of lr::f16_to_f32 and of F16C): (-1)^s * m * 2^-24 for
// exponent field 0 (subnormals), (-1)^s * (1024 + m) * 2^(e - 25) otherwise.
double f16_value(uint16_t h) {
  static const std::array<double, 32> pow2 = [] {
    std::array<double, 32> p{};
    for (int e = 0; e < 32; ++e) p[size_t(e)] = std::ldexp(1.0, (e == 0 ? 1 : e) - 25);
    return p;
  }();
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  const double sign = 1.0 - 2.0 * double(h >> 15);
  if (e == 31)
    return m ? std::numeric_limits<double>::quiet_NaN()
             : sign * std::numeric_limits<double>::infinity();
  // Arithmetic rather than branches on e == 0 and on the sign: with random
  // subnormals in the tests those branches mispredict and dominate run time.
  const uint32_t lead = uint32_t(e != 0) << 10;
  return sign * double(m + lead) * pow2[e];
}

}  // namespace

void matvec_f16(const uint16_t* W, const float* x, float* y, int64_t cols, int64_t r0,
                int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    double s = 0;
    for (int64_t c = 0; c < cols; ++c) s += f16_value(W[r * cols + c]) * double(x[c]);
    y[r] = float(s);
  }
}

void matmul_f32(const float* W, const float* X, float* Y, int64_t n, int64_t cols, int64_t ldx,
                int64_t ldy, int64_t r0, int64_t r1) {
  for (int64_t t = 0; t < n; ++t) matvec_f32(W, X + t * ldx, Y + t * ldy, cols, r0, r1);
}

void matmul_bf16(const uint16_t* W, const float* X, float* Y, int64_t n, int64_t cols,
                 int64_t ldx, int64_t ldy, int64_t r0, int64_t r1) {
  for (int64_t t = 0; t < n; ++t) matvec_bf16(W, X + t * ldx, Y + t * ldy, cols, r0, r1);
}

void matmul_f16(const uint16_t* W, const float* X, float* Y, int64_t n, int64_t cols,
                int64_t ldx, int64_t ldy, int64_t r0, int64_t r1) {
  for (int64_t t = 0; t < n; ++t) matvec_f16(W, X + t * ldx, Y + t * ldy, cols, r0, r1);
}

void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps) {
  scalar::rms_norm(x, w, y, n, eps);
}

float dot(const float* a, const float* b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += double(a[i]) * double(b[i]);
  return float(s);
}

void axpy(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = float(double(y[i]) + double(a) * double(x[i]));
}

void scale(float a, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a * y[i];
}

void silu_mul(float* g, const float* u, int64_t n) { scalar::silu_mul(g, u, n); }
void gelu_mul(float* g, const float* u, int64_t n) {
  scalar::gelu_mul(g, u, n);
}

void add(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = y[i] + x[i];
}

void f32_to_bf16_row(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = f32_to_bf16(x[i]);
}

void bf16_to_f32_row(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_f32(x[i]);
}

// The twin of the AVX2 quantizer is the plain one of the weight layout.
void quantize_q8_row(const float* x, int8_t* xq, float* sx, int64_t n) { quantize_q8_blocks(x, xq, sx, n); }

void matvec_q8_0(const int8_t* W, const uint16_t* scales, const float* x, float* y, int64_t cols,
                 int64_t r0, int64_t r1) {
  const int64_t nb = (cols + 31) / 32;
  std::vector<int8_t> xq(static_cast<size_t>(cols));
  std::vector<float> sx(static_cast<size_t>(nb));
  quantize_q8_row(x, xq.data(), sx.data(), cols);
  for (int64_t r = r0; r < r1; ++r) {
    double s = 0;
    for (int64_t b = 0; b < nb; ++b) {
      int64_t dot = 0;
      for (int64_t c = b * 32; c < std::min(cols, b * 32 + 32); ++c) dot += int64_t(W[r * cols + c]) * xq[size_t(c)];
      s += double(f16_to_f32(scales[r * nb + b])) * double(sx[size_t(b)]) * double(dot);
    }
    y[r] = float(s);
  }
}

// The weights dequantized by the format's scalar decoder (core/quants.cpp,
// bit-exact with the gguf package), the input quantized as the kernel does
// and decoded again: the exact value the kernel's integer arithmetic stands
// for, summed in double.
void matvec_blocks(DType t, const uint8_t* W, uint64_t rb, const float* x, float* y, int64_t cols, int64_t r0,
                   int64_t r1) {
  // The input in blocks of the format's block (32, or 256 for the K-quants).
  const int64_t block = dtype_info(t).block_elems;
  std::vector<int8_t> xq(static_cast<size_t>(cols));
  std::vector<float> sx(static_cast<size_t>(cols / block)), w(static_cast<size_t>(cols));
  for (int64_t b = 0; b < cols / block; ++b) {
    float amax = 0;
    for (int64_t c = b * block; c < (b + 1) * block; ++c) amax = std::max(amax, std::fabs(x[c]));
    const float inv = amax > 0 ? 127.f / amax : 0.f;
    // The input scale as GGML keeps it: f16 for blocks of 32 (Q8_0), 1 / inv for 256 (Q8_K).
    sx[size_t(b)] = block == 32 ? f16_to_f32(f32_to_f16(amax / 127.f)) : amax > 0 ? 1.f / inv : 0.f;
    for (int64_t c = b * block; c < (b + 1) * block; ++c) xq[size_t(c)] = int8_t(std::nearbyint(x[c] * inv));
  }
  for (int64_t r = r0; r < r1; ++r) {
    dequantize(t, W + uint64_t(r) * rb, w.data(), cols);
    double s = 0;
    for (int64_t c = 0; c < cols; ++c) s += double(w[size_t(c)]) * (double(sx[size_t(c / block)]) * xq[size_t(c)]);
    y[r] = float(s);
  }
}

void attend_partial(const float* q, int g, int d, const float* K, const float* V, int64_t stride,
                    int64_t j0, int64_t j1, float scale, float* m, float* l, float* acc) {
  scalar::attend_partial(q, g, d, K, V, stride, j0, j1, scale, m, l, acc);
}

void attend_merge(int n, const float* m, const float* l, int64_t ml_stride, const float* acc,
                  int64_t acc_stride, int d, float* out) {
  double mx = -std::numeric_limits<double>::infinity();
  for (int p = 0; p < n; ++p)
    if (l[p * ml_stride] > 0) mx = std::max(mx, double(m[p * ml_stride]));
  double total = 0;
  std::vector<double> o(size_t(d), 0.0);
  for (int p = 0; p < n; ++p) {
    if (!(l[p * ml_stride] > 0)) continue;
    const double w = std::exp(double(m[p * ml_stride]) - mx);
    total += w * l[p * ml_stride];
    for (int i = 0; i < d; ++i) o[size_t(i)] += w * double(acc[p * acc_stride + i]);
  }
  for (int i = 0; i < d; ++i) out[i] = total > 0 ? float(o[size_t(i)] / total) : 0.f;
}

}  // namespace lr::cpu::ref
