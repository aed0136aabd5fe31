// Kernels for weights in GGUF block formats (core/quants.h has the layouts),
// computed in their blocks. Each chunk of 32 weights is unpacked to unsigned
// integers u with an integer scale per 16 (sc), a base D and a subtracted
// term, w = D sc u - m, so a dot product with an int8-quantized input x = dx q
// is integer work: one maddubs (u8 x s8) and one madd with the scales per
// 32 weights.
//  - Q4_0 .. Q5_1 (blocks of 32): the input has a scale per 32, and each
//    block adds dx D sum(u q) - m dx sum(q) (one multiply-add in f32).
//  - K-quants (super-blocks of 256): the input has one scale per 256, so the
//    super-block's scaled integer sums add up in int32 and meet the f32
//    scales once: dx (D sum_16 sc sum(u q) - Dm sum_16 mn sum(q)).
// One format is one small traits struct; the dot products are written once
// (kernels_blocks_isa.h) and compiled for AVX2 and for AVX-512 VNNI (where
// the K-quants take two chunks per 512-bit register); the path is chosen at
// run time (core/cpu_features.h kernel_isa()).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/kernels/block_input.h"
#include "backend/cpu/kernels/kernels.h"
#include "backend/cpu/kernels/kernels_simd.h"
#include "core/cpu_features.h"
#include "core/error.h"
#include "core/quants.h"

namespace lr::cpu {

using namespace detail;

namespace avx2 {
#define LR_BLOCKS_VNNI 0
#include "backend/cpu/kernels/block_formats_isa.h"
#include "backend/cpu/kernels/kernels_blocks_isa.h"
#undef LR_BLOCKS_VNNI
}  // namespace avx2

LR_BEGIN_AVX512VNNI
namespace avx512vnni {
#define LR_BLOCKS_VNNI 1
#include "backend/cpu/kernels/block_formats_isa.h"
#include "backend/cpu/kernels/kernels_blocks_isa.h"
#undef LR_BLOCKS_VNNI
}  // namespace avx512vnni
LR_END_AVX512VNNI

const std::vector<Acts>& detail::quantize_block_inputs(const float* x, int64_t cols, int64_t n, int64_t ldx,
                                                      int block) {
  thread_local std::vector<Acts> out;
  const int64_t nd = cols / block, n32 = cols / 32;
  auto* q = reinterpret_cast<int8_t*>(scratch(3, (n * cols + 3) / 4));
  float* f = scratch(4, n * (nd + n32));
  auto* s = reinterpret_cast<int16_t*>(scratch(5, (n * (cols / 16 + cols / 32) + 1) / 2));
  out.resize(size_t(n));
  for (int64_t t = 0; t < n; ++t) {
    Acts& a = out[size_t(t)];
    int8_t* qt = q + t * cols;
    float* d = f + t * (nd + n32);
    int16_t* s16 = s + t * (cols / 16 + cols / 32);
    int16_t* s32 = s16 + cols / 16;
    a = {qt, d, s16, s32, d + nd};
    quantize_acts(x + t * ldx, cols, block, qt, d, s16, d + nd);
    for (int64_t k = 0; k < cols / 32; ++k) s32[k] = int16_t(s16[2 * k] + s16[2 * k + 1]);
  }
  return out;
}

void quantize_acts(const float* x, int64_t n, int block, int8_t* q, float* d, int16_t* s16, float* dsum) {
  LR_ASSERT((block == 32 || block == 256) && n % block == 0);
  if (block == 32) {
    quantize_q8_row(x, q, d, n);
    // The scale as GGML's Q8_0 input blocks keep it (f16), so products match
    // llama.cpp's as closely as the arithmetic allows.
    for (int64_t b = 0; b < n / 32; ++b) d[b] = _cvtsh_ss(_cvtss_sh(d[b], _MM_FROUND_TO_NEAREST_INT));
  } else {
    for (int64_t b = 0; b < n / 256; ++b) {  // one scale per 256, GGML's Q8_K: q = round(x 127 / amax), d = 1 / (127 / amax)
      const float* v = x + 256 * b;
      __m256 mx = _mm256_setzero_ps();
      for (int j = 0; j < 256; j += 8) mx = _mm256_max_ps(mx, _mm256_andnot_ps(_mm256_set1_ps(-0.f), _mm256_loadu_ps(v + j)));
      const float amax = hmax(mx);
      const float inv_s = amax > 0 ? 127.f / amax : 0.f;
      d[b] = amax > 0 ? 1.f / inv_s : 0.f;
      const __m256 inv = _mm256_set1_ps(inv_s);
      for (int j = 0; j < 256; j += 32) {
        __m256i i4[4];
        for (int k = 0; k < 4; ++k) i4[k] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(v + j + 8 * k), inv));
        __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i4[0], i4[1]), _mm256_packs_epi32(i4[2], i4[3]));
        p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 256 * b + j), p);
      }
    }
  }
  for (int64_t g = 0; g < n / 16; ++g) {
    int s = 0;
    for (int j = 0; j < 16; ++j) s += q[16 * g + j];
    s16[g] = int16_t(s);
  }
  for (int64_t k = 0; k < n / 32; ++k) dsum[k] = d[k * 32 / block] * float(s16[2 * k] + s16[2 * k + 1]);
}

void matvec_blocks(DType t, const uint8_t* W, uint64_t rb, const float* x, float* y, int64_t cols, int64_t r0,
                   int64_t r1) {
  if (r1 <= r0) return;
  const Acts& a = quantize_block_inputs(x, cols, 1, cols, int(dtype_info(t).block_elems))[0];
  if (kernel_isa() == Isa::Avx512Vnni)
    avx512vnni::matvec(t, W, rb, a, y, cols, r0, r1);
  else
    avx2::matvec(t, W, rb, a, y, cols, r0, r1);
}

void matvec_blocks_n(DType t, const uint8_t* W, uint64_t rb, const float* X, int64_t ldx, float* Y, int64_t ldy,
                     int64_t n, int64_t cols, int64_t r0, int64_t r1) {
  if (r1 <= r0 || n <= 0) return;
  const std::vector<Acts>& a = quantize_block_inputs(X, cols, n, ldx, int(dtype_info(t).block_elems));
  // 64 rows at a time, so every pass over the inputs finds them in L2 (64
  // rows of 8960 Q4_K columns are 315 KB).
  constexpr int64_t kBlockRows = 64;
  for (int64_t r = r0; r < r1; r += kBlockRows) {
    const int64_t e = std::min(r1, r + kBlockRows);
    if (kernel_isa() == Isa::Avx512Vnni)
      avx512vnni::matvec_n(t, W, rb, a.data(), n, Y, ldy, cols, r, e);
    else
      avx2::matvec_n(t, W, rb, a.data(), n, Y, ldy, cols, r, e);
  }
}

void dequantize_blocks(DType t, const uint8_t* row, float* y, int64_t cols) {
  if (kernel_isa() == Isa::Avx512Vnni)
    avx512vnni::dequantize_row(t, row, y, cols);
  else
    avx2::dequantize_row(t, row, y, cols);
}

// Prompts on AVX-512 VNNI: in 8-bit integers (kernels_blocks_gemm.cpp).
void matmul_blocks(DType t, const uint8_t* W, uint64_t rb, const float* X, float* Y, int64_t n, int64_t cols,
                   int64_t ldx, int64_t ldy, int64_t r0, int64_t r1, MatmulPath path) {
  if (kernel_isa() == Isa::Avx512Vnni) return matmul_blocks_int8(t, W, rb, X, Y, n, cols, ldx, ldy, r0, r1);
  matmul_blocks_f32(t, W, rb, X, Y, n, cols, ldx, ldy, r0, r1, path);
}

// Elsewhere kDecodedRows rows at a time decoded to f32 (the exact stored
// values, the scalar dequantizer's bits) into a panel that matmul_f32
// multiplies with every token; the input is not quantized. Over a prompt the
// decoding is a small share of the work and the f32 kernel's register tiling
// does the rest.
void matmul_blocks_f32(DType t, const uint8_t* W, uint64_t rb, const float* X, float* Y, int64_t n,
                       int64_t cols, int64_t ldx, int64_t ldy, int64_t r0, int64_t r1, MatmulPath path) {
  if (r1 <= r0 || n <= 0) return;
  float* panel = scratch(2, kDecodedRows * cols);  // matmul_f32 uses slots 0 and 1
  for (int64_t r = r0; r < r1; r += kDecodedRows) {
    const int64_t nr = std::min(kDecodedRows, r1 - r);
    for (int64_t i = 0; i < nr; ++i) dequantize_blocks(t, W + uint64_t(r + i) * rb, panel + i * cols, cols);
    matmul_f32(panel, X, Y + r, n, cols, ldx, ldy, 0, nr, path);
  }
}

}  // namespace lr::cpu
