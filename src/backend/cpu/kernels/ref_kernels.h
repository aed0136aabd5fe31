// Scalar reference twins of the kernels in kernels.h: same signatures and
// semantics, plain loops, double accumulation. Tests compare the AVX2 kernels
// against these; they are not meant to be fast.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace lr::cpu::ref {

void matvec_f32(const float* W, const float* x, float* y, int64_t cols, int64_t r0, int64_t r1);
void matvec_bf16(const uint16_t* W, const float* x, float* y, int64_t cols, int64_t r0,
                 int64_t r1);
void matvec_f16(const uint16_t* W, const float* x, float* y, int64_t cols, int64_t r0,
                int64_t r1);

void matmul_f32(const float* W, const float* X, float* Y, int64_t n, int64_t cols, int64_t ldx,
                int64_t ldy, int64_t r0, int64_t r1);
void matmul_bf16(const uint16_t* W, const float* X, float* Y, int64_t n, int64_t cols,
                 int64_t ldx, int64_t ldy, int64_t r0, int64_t r1);
void matmul_f16(const uint16_t* W, const float* X, float* Y, int64_t n, int64_t cols,
                int64_t ldx, int64_t ldy, int64_t r0, int64_t r1);

void matvec_q8_0(const int8_t* W, const uint16_t* scales, const float* x, float* y, int64_t cols,
                 int64_t r0, int64_t r1);
void quantize_q8_row(const float* x, int8_t* xq, float* sx, int64_t n);
void matvec_blocks(DType t, const uint8_t* W, uint64_t rb, const float* x, float* y, int64_t cols, int64_t r0,
                   int64_t r1);

void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps);

float dot(const float* a, const float* b, int64_t n);
void axpy(float a, const float* x, float* y, int64_t n);
void scale(float a, float* y, int64_t n);
void silu_mul(float* g, const float* u, int64_t n);
void gelu_mul(float* g, const float* u, int64_t n);
void add(const float* x, float* y, int64_t n);

void f32_to_bf16_row(const float* x, uint16_t* y, int64_t n);
void bf16_to_f32_row(const uint16_t* x, float* y, int64_t n);

// Twins of attention_kernels.h: two passes in double (max, then sums).
void attend_partial(const float* q, int g, int d, const float* K, const float* V, int64_t stride,
                    int64_t j0, int64_t j1, float scale, float* m, float* l, float* acc);
void attend_merge(int n, const float* m, const float* l, int64_t ml_stride, const float* acc,
                  int64_t acc_stride, int d, float* out);

}  // namespace lr::cpu::ref
