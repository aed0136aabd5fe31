// Hot CPU kernels (AVX2/FMA/F16C). Every kernel here has a scalar twin in
// ref_kernels.h with the same signature that tests compare against.
//
// Conventions: matrices are row-major, W is [rows, cols] (one output per row);
// weights are f32, bf16 or IEEE f16 (both uint16_t bit patterns; f16 is read
// with F16C, subnormals included); activations and accumulation are f32.
// Row ranges [r0, r1) let a caller split the work across threads.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "model/config.h"

namespace lr::cpu {

// y[r] = sum_c W[r, c] * x[c]   for r in [r0, r1)
void matvec_f32(const float* W, const float* x, float* y, int64_t cols, int64_t r0, int64_t r1);
void matvec_bf16(const uint16_t* W, const float* x, float* y, int64_t cols, int64_t r0,
                 int64_t r1);
void matvec_f16(const uint16_t* W, const float* x, float* y, int64_t cols, int64_t r0,
                int64_t r1);

// Which kernels a matrix-matrix product may use. Any: the fastest for n
// (inner products below 12 tokens). Tiles: the register tiles for every n,
// where each output's multiply-adds run in one order whatever n and the
// token's place among them, so a token's results do not depend on the
// others in the call (a server's prompt rows: batch invariance).
enum class MatmulPath : uint8_t { Any, Tiles };

// Y[t, r] = sum_c W[r, c] * X[t, c]   for t in [0, n), r in [r0, r1)
// X is [n, cols] with row stride ldx >= cols; Y is [n, ldy] (ldy >= rows of W).
void matmul_f32(const float* W, const float* X, float* Y, int64_t n, int64_t cols, int64_t ldx,
                int64_t ldy, int64_t r0, int64_t r1, MatmulPath path = MatmulPath::Any);
void matmul_bf16(const uint16_t* W, const float* X, float* Y, int64_t n, int64_t cols,
                 int64_t ldx, int64_t ldy, int64_t r0, int64_t r1, MatmulPath path = MatmulPath::Any);
void matmul_f16(const uint16_t* W, const float* X, float* Y, int64_t n, int64_t cols,
                int64_t ldx, int64_t ldy, int64_t r0, int64_t r1, MatmulPath path = MatmulPath::Any);

// Q8_0 weights (model/weights.h: int8 W [rows, cols], f16 scales [rows,
// ceil(cols/32)], one per block of 32 along a row). x is quantized the same
// way on the fly (quantize_q8_row) and every block is an integer dot
// product: y[r] = sum_b sw[r, b] * sx[b] * sum_{c in b} W[r, c] * xq[c].
void matvec_q8_0(const int8_t* W, const uint16_t* scales, const float* x, float* y, int64_t cols,
                 int64_t r0, int64_t r1);
// Y[k, r] for k < n, each row k of X (rows ldx apart; Y rows ldy apart) as
// matvec_q8_0 computes it alone, bit for bit: every input quantized once,
// each block of rows read once for four inputs.
void matvec_q8_0_n(const int8_t* W, const uint16_t* scales, const float* X, int64_t ldx, float* Y,
                   int64_t ldy, int64_t n, int64_t cols, int64_t r0, int64_t r1);
// Prompt path: rows dequantized to f32 16 at a time, then matmul_f32 (x is
// not quantized). Same arguments as matmul_f32 plus the scales.
void matmul_q8_0(const int8_t* W, const uint16_t* scales, const float* X, float* Y, int64_t n,
                 int64_t cols, int64_t ldx, int64_t ldy, int64_t r0, int64_t r1,
                 MatmulPath path = MatmulPath::Any);
// xq[c] = round(x[c] / sx[b]) with sx[b] = max |x[c in b]| / 127 (0 for an
// all-zero block), for blocks of 32 (the last may be shorter).
void quantize_q8_row(const float* x, int8_t* xq, float* sx, int64_t n);

// Weights in a GGUF block format (core/dtype.h is_block_format: Q4_0, Q4_1,
// Q5_0, Q5_1, Q2_K .. Q6_K), rows of `rb` bytes of blocks. x is quantized per
// block (quantize_acts) and every chunk of 32 weights is an integer dot
// product (kernels_blocks.cpp). cols is a multiple of the format's block.
void matvec_blocks(DType t, const uint8_t* W, uint64_t rb, const float* x, float* y, int64_t cols, int64_t r0,
                   int64_t r1);
// Y[k, r] for k < n, each row k of X (rows ldx apart; Y rows ldy apart) as
// matvec_blocks computes it alone, bit for bit: the inputs quantized once,
// each block of rows read once for all of them.
void matvec_blocks_n(DType t, const uint8_t* W, uint64_t rb, const float* X, int64_t ldx, float* Y, int64_t ldy,
                     int64_t n, int64_t cols, int64_t r0, int64_t r1);
// A row of `cols` values in block format t as f32: the scalar dequantizer's
// values (core/dtype.h dequantize), bit for bit, 8 at a time.
void dequantize_blocks(DType t, const uint8_t* row, float* y, int64_t cols);
// Y[t, r] for t in [0, n): X [n, cols] with row stride ldx, Y [n, ldy]. The
// prompt path: on AVX-512 VNNI matmul_blocks_int8 for every n, elsewhere
// matmul_blocks_f32: 32 rows at a time (kernels_simd.h kDecodedRows) decoded
// to f32, then matmul_f32 (x is not quantized), as matmul_q8_0.
void matmul_blocks(DType t, const uint8_t* W, uint64_t rb, const float* X, float* Y, int64_t n, int64_t cols,
                   int64_t ldx, int64_t ldy, int64_t r0, int64_t r1, MatmulPath path = MatmulPath::Any);
void matmul_blocks_f32(DType t, const uint8_t* W, uint64_t rb, const float* X, float* Y, int64_t n,
                       int64_t cols, int64_t ldx, int64_t ldy, int64_t r0, int64_t r1,
                       MatmulPath path = MatmulPath::Any);
// The same in 8-bit integers (AVX-512 VNNI only): every token quantized as
// matvec_blocks quantizes it, so each output is matvec_blocks' exact integer
// sums in another f32 order; each token's results are independent of n and
// of the other tokens (kernels_blocks_gemm.cpp).
void matmul_blocks_int8(DType t, const uint8_t* W, uint64_t rb, const float* X, float* Y, int64_t n,
                        int64_t cols, int64_t ldx, int64_t ldy, int64_t r0, int64_t r1);
// An input quantized for the block kernels in blocks of `block` values (32
// for Q4_0 .. Q5_1, 256 for the K-quants, so a super-block's integer sums
// need one scale), as GGML's Q8_0 and Q8_K inputs: q[c] = round-to-even(x[c]
// 127 / amax) with amax = max |x| over block b, and d[b] = amax / 127 rounded
// to f16 (blocks of 32) or 1 / (127 / amax) (blocks of 256), 0 for an
// all-zero block; s16[g] = the sum of q over the 16
// values of group g; dsum[k] = d * the sum of q over the 32 values of group k.
void quantize_acts(const float* x, int64_t n, int block, int8_t* q, float* d, int16_t* s16, float* dsum);

// y = x / sqrt(mean(x^2) + eps) * w   (y may alias x)
void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps);

float dot(const float* a, const float* b, int64_t n);
// y += a * x
void axpy(float a, const float* x, float* y, int64_t n);
// y *= a
void scale(float a, float* y, int64_t n);
// g = silu(g) * u
void silu_mul(float* g, const float* u, int64_t n);
// g = gelu(g) * u, GELU's tanh form (scalar::gelu_tanh)
void gelu_mul(float* g, const float* u, int64_t n);
// g = act(g) * u
inline void gated(Activation act, float* g, const float* u, int64_t n) {
  if (act == Activation::Silu) return silu_mul(g, u, n);
  gelu_mul(g, u, n);
}
// y += x
void add(const float* x, float* y, int64_t n);

// Convert f32 to bf16 (round to nearest even) and back.
void f32_to_bf16_row(const float* x, uint16_t* y, int64_t n);
void bf16_to_f32_row(const uint16_t* x, float* y, int64_t n);

}  // namespace lr::cpu
