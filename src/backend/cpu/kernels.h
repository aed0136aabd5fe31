// Hot CPU kernels (AVX2/FMA/F16C). Every kernel here has a scalar twin in
// ref_kernels.h with the same signature that tests compare against.
//
// Conventions: matrices are row-major, W is [rows, cols] (one output per row);
// weights are f32, bf16 or IEEE f16 (both uint16_t bit patterns; f16 is read
// with F16C, subnormals included); activations and accumulation are f32.
// Row ranges [r0, r1) let a caller split the work across threads.
#pragma once

#include <cstdint>

namespace lr::cpu {

// y[r] = sum_c W[r, c] * x[c]   for r in [r0, r1)
void matvec_f32(const float* W, const float* x, float* y, int64_t cols, int64_t r0, int64_t r1);
void matvec_bf16(const uint16_t* W, const float* x, float* y, int64_t cols, int64_t r0,
                 int64_t r1);
void matvec_f16(const uint16_t* W, const float* x, float* y, int64_t cols, int64_t r0,
                int64_t r1);

// Y[t, r] = sum_c W[r, c] * X[t, c]   for t in [0, n), r in [r0, r1)
// X is [n, cols] with row stride ldx >= cols; Y is [n, ldy] (ldy >= rows of W).
void matmul_f32(const float* W, const float* X, float* Y, int64_t n, int64_t cols, int64_t ldx,
                int64_t ldy, int64_t r0, int64_t r1);
void matmul_bf16(const uint16_t* W, const float* X, float* Y, int64_t n, int64_t cols,
                 int64_t ldx, int64_t ldy, int64_t r0, int64_t r1);
void matmul_f16(const uint16_t* W, const float* X, float* Y, int64_t n, int64_t cols,
                int64_t ldx, int64_t ldy, int64_t r0, int64_t r1);

// Q8_0 weights (model/weights.h: int8 W [rows, cols], f32 scales [rows,
// ceil(cols/32)], one per block of 32 along a row). x is quantized the same
// way on the fly (quantize_q8_row) and every block is an integer dot
// product: y[r] = sum_b sw[r, b] * sx[b] * sum_{c in b} W[r, c] * xq[c].
void matvec_q8_0(const int8_t* W, const float* scales, const float* x, float* y, int64_t cols,
                 int64_t r0, int64_t r1);
// Prompt path: rows dequantized to f32 16 at a time, then matmul_f32 (x is
// not quantized). Same arguments as matmul_f32 plus the scales.
void matmul_q8_0(const int8_t* W, const float* scales, const float* X, float* Y, int64_t n,
                 int64_t cols, int64_t ldx, int64_t ldy, int64_t r0, int64_t r1);
// xq[c] = round(x[c] / sx[b]) with sx[b] = max |x[c in b]| / 127 (0 for an
// all-zero block), for blocks of 32 (the last may be shorter).
void quantize_q8_row(const float* x, int8_t* xq, float* sx, int64_t n);

// y = x / sqrt(mean(x^2) + eps) * w   (y may alias x)
void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps);

float dot(const float* a, const float* b, int64_t n);
// y += a * x
void axpy(float a, const float* x, float* y, int64_t n);
// y *= a
void scale(float a, float* y, int64_t n);
// g = silu(g) * u
void silu_mul(float* g, const float* u, int64_t n);
// y += x
void add(const float* x, float* y, int64_t n);

// Convert f32 to bf16 (round to nearest even) and back.
void f32_to_bf16_row(const float* x, uint16_t* y, int64_t n);
void bf16_to_f32_row(const uint16_t* x, float* y, int64_t n);

}  // namespace lr::cpu
