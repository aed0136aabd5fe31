// Q8_0 kernels: int8 weights with a scale per block of 32 along each row
// (model/weights.h). Decode quantizes x to int8 the same way and does integer
// dot products (sign trick + maddubs + madd, as llama.cpp's Q8_0 x Q8_0);
// prompts dequantize kDecodedRows rows at a time into f32 and reuse matmul_f32.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/kernels/kernels.h"
#include "backend/cpu/kernels/kernels_simd.h"
#include "core/cpu_features.h"

namespace lr::cpu {

using namespace detail;

void quantize_q8_row(const float* x, int8_t* xq, float* sx, int64_t n) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b * 32 < n; ++b) {
    const int64_t c0 = b * 32, len = std::min<int64_t>(32, n - c0);
    if (len < 32) {  // short last block: the plain loop
      float amax = 0;
      for (int64_t c = 0; c < len; ++c) amax = std::max(amax, std::fabs(x[c0 + c]));
      sx[b] = amax / 127.f;
      const float inv = amax > 0 ? 127.f / amax : 0.f;
      for (int64_t c = 0; c < len; ++c) xq[c0 + c] = int8_t(std::nearbyint(x[c0 + c] * inv));
      continue;
    }
    __m256 v[4];
    __m256 mx = _mm256_setzero_ps();
    for (int k = 0; k < 4; ++k) {
      v[k] = _mm256_loadu_ps(x + c0 + 8 * k);
      mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, v[k]));
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    sx[b] = amax / 127.f;
    const __m256 inv = _mm256_set1_ps(amax > 0 ? 127.f / amax : 0.f);
    // cvtps rounds to nearest even (the default rounding mode), like nearbyint.
    __m256i i[4];
    for (int k = 0; k < 4; ++k) i[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], inv));
    const __m256i p01 = _mm256_packs_epi32(i[0], i[1]), p23 = _mm256_packs_epi32(i[2], i[3]);
    __m256i p = _mm256_packs_epi16(p01, p23);  // lanes interleaved: fix the order
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(xq + c0), p);
  }
}

namespace avx2 {
#define LR_Q8_VNNI 0
#include "backend/cpu/kernels/kernels_q8_isa.h"
#undef LR_Q8_VNNI
}  // namespace avx2

LR_BEGIN_AVX512VNNI
namespace avx512vnni {
#define LR_Q8_VNNI 1
#include "backend/cpu/kernels/kernels_q8_isa.h"
#undef LR_Q8_VNNI
}  // namespace avx512vnni
LR_END_AVX512VNNI

void matvec_q8_0(const int8_t* W, const uint16_t* scales, const float* x, float* y, int64_t cols,
                 int64_t r0, int64_t r1) {
  if (r1 <= r0) return;
  const int64_t nb = q8_blocks_of(cols), full = cols / 32;
  // x as int8 blocks, zero-padded to whole blocks: weights beyond a row's
  // end then contribute nothing.
  int8_t* xq = reinterpret_cast<int8_t*>(scratch(0, (nb * 32 + 3) / 4));
  float* sx = scratch(1, nb);
  std::memset(xq + full * 32, 0, size_t(nb * 32 - full * 32));
  quantize_q8_row(x, xq, sx, cols);
  const int8_t* xqs[1] = {xq};
  const float* sxs[1] = {sx};
  if (kernel_isa() == Isa::Avx512Vnni)
    avx512vnni::matvec_rows<1>(W, scales, xqs, sxs, &y, cols, r0, r1);
  else
    avx2::matvec_rows<1>(W, scales, xqs, sxs, &y, cols, r0, r1);
}

void matvec_q8_0_n(const int8_t* W, const uint16_t* scales, const float* X, int64_t ldx, float* Y,
                   int64_t ldy, int64_t n, int64_t cols, int64_t r0, int64_t r1) {
  if (r1 <= r0 || n <= 0) return;
  const int64_t nb = q8_blocks_of(cols), full = cols / 32;
  int8_t* q = reinterpret_cast<int8_t*>(scratch(0, (n * nb * 32 + 3) / 4));
  float* s = scratch(1, n * nb);
  thread_local std::vector<const int8_t*> xq;
  thread_local std::vector<const float*> sx;
  thread_local std::vector<float*> y;
  xq.resize(size_t(n)), sx.resize(size_t(n)), y.resize(size_t(n));
  for (int64_t t = 0; t < n; ++t) {  // each input as matvec_q8_0 quantizes it
    int8_t* qt = q + t * nb * 32;
    std::memset(qt + full * 32, 0, size_t(nb * 32 - full * 32));
    quantize_q8_row(X + t * ldx, qt, s + t * nb, cols);
    xq[size_t(t)] = qt, sx[size_t(t)] = s + t * nb, y[size_t(t)] = Y + t * ldy;
  }
  // 64 rows at a time (in L2) against 4 inputs at a time, then one.
  constexpr int64_t kBlockRows = 64;
  const bool vnni = kernel_isa() == Isa::Avx512Vnni;
  for (int64_t r = r0; r < r1; r += kBlockRows) {
    const int64_t e = std::min(r1, r + kBlockRows);
    int64_t t = 0;
    for (; t + 4 <= n; t += 4)
      (vnni ? avx512vnni::matvec_rows<4> : avx2::matvec_rows<4>)(W, scales, &xq[size_t(t)], &sx[size_t(t)],
                                                                 &y[size_t(t)], cols, r, e);
    for (; t < n; ++t)
      (vnni ? avx512vnni::matvec_rows<1> : avx2::matvec_rows<1>)(W, scales, &xq[size_t(t)], &sx[size_t(t)],
                                                                 &y[size_t(t)], cols, r, e);
  }
}

void matmul_q8_0(const int8_t* W, const uint16_t* scales, const float* X, float* Y, int64_t n,
                 int64_t cols, int64_t ldx, int64_t ldy, int64_t r0, int64_t r1, MatmulPath path) {
  if (r1 <= r0 || n <= 0) return;
  const int64_t nb = q8_blocks_of(cols);
  float* panel = scratch(2, kDecodedRows * cols);  // matmul_f32 uses slots 0 and 1
  for (int64_t r = r0; r < r1; r += kDecodedRows) {
    const int64_t nr = std::min(kDecodedRows, r1 - r);
    for (int64_t i = 0; i < nr; ++i) {
      const int8_t* q = W + (r + i) * cols;
      const uint16_t* s = scales + (r + i) * nb;
      for (int64_t b = 0; b < nb; ++b) {
        const float sb = _cvtsh_ss(s[b]);
        for (int64_t c = b * 32; c < std::min(cols, b * 32 + 32); ++c)
          panel[i * cols + c] = sb * float(q[c]);
      }
    }
    // Y[t, r + i] = panel[i] . X[t]: the panel is a [nr, cols] f32 matrix.
    matmul_f32(panel, X, Y + r, n, cols, ldx, ldy, 0, nr, path);
  }
}

}  // namespace lr::cpu
