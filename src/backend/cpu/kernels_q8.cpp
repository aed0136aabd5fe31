// Q8_0 kernels: int8 weights with a scale per block of 32 along each row
// (model/weights.h). Decode quantizes x to int8 the same way and does integer
// dot products (sign trick + maddubs + madd, as llama.cpp's Q8_0 x Q8_0);
// prompts dequantize 16 rows at a time into f32 and reuse matmul_f32.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/kernels.h"
#include "backend/cpu/kernels_simd.h"

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

namespace {

// 32 int8 products summed in 8 int32 lanes, as f32.
inline __m256 dot32(__m256i w, __m256i x) {
  const __m256i aw = _mm256_sign_epi8(w, w);  // |w| (w >= -127, so it fits)
  const __m256i sx = _mm256_sign_epi8(x, w);  // x * sign(w)
  const __m256i p16 = _mm256_maddubs_epi16(aw, sx);  // |p| <= 2 * 127 * 127 < 2^15
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
}

inline __m256i load32(const int8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// The last cols - c0 (< 32) values of a row, zero-padded to 32.
inline __m256i load_tail(const int8_t* p, int64_t n) {
  alignas(32) int8_t buf[32] = {};
  std::memcpy(buf, p, size_t(n));
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(buf));
}

}  // namespace

namespace {

// sum_b s[b] * sx[b] * dot(w block b, xq block b) for one row, as 8 lanes.
// The tail block (cols % 32 values) is read with a full 32-byte load when
// `tail_over` allows reading past the row end (enough later rows of the
// same call follow); the bytes past the row meet xq's zero padding.
inline __m256 row_dot(const int8_t* w, const float* s, const int8_t* xq, const float* sx,
                      int64_t full, int64_t tail, bool tail_over) {
  __m256 a = _mm256_setzero_ps(), b2 = _mm256_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= full; b += 2) {
    a = _mm256_fmadd_ps(dot32(load32(w + b * 32), load32(xq + b * 32)), _mm256_set1_ps(s[b] * sx[b]), a);
    b2 = _mm256_fmadd_ps(dot32(load32(w + b * 32 + 32), load32(xq + b * 32 + 32)),
                         _mm256_set1_ps(s[b + 1] * sx[b + 1]), b2);
  }
  if (b < full) a = _mm256_fmadd_ps(dot32(load32(w + b * 32), load32(xq + b * 32)), _mm256_set1_ps(s[b] * sx[b]), a);
  if (tail) {
    const __m256i wt = tail_over ? load32(w + full * 32) : load_tail(w + full * 32, tail);
    b2 = _mm256_fmadd_ps(dot32(wt, load32(xq + full * 32)), _mm256_set1_ps(s[full] * sx[full]), b2);
  }
  return _mm256_add_ps(a, b2);
}

}  // namespace

void matvec_q8_0(const int8_t* W, const float* scales, const float* x, float* y, int64_t cols,
                 int64_t r0, int64_t r1) {
  if (r1 <= r0) return;
  const int64_t nb = q8_blocks_of(cols), full = cols / 32, tail = cols - full * 32;
  // x as int8 blocks, zero-padded to whole blocks: weights beyond a row's
  // end then contribute nothing.
  int8_t* xq = reinterpret_cast<int8_t*>(scratch(0, (nb * 32 + 3) / 4));
  float* sx = scratch(1, nb);
  std::memset(xq + full * 32, 0, size_t(nb * 32 - full * 32));
  quantize_q8_row(x, xq, sx, cols);
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) {
    const int8_t* w = W + r * cols;
    const float* s = scales + r * nb;
    // The next 4 rows, a cache line per 32 bytes of this row's blocks.
    for (int64_t c = 0; c < 4 * cols; c += 64) _mm_prefetch(reinterpret_cast<const char*>(w + 4 * cols + c), _MM_HINT_T0);
    // Row r + k may over-read when the rows after it hold the 32 - tail bytes.
    auto over = [&](int64_t k) { return (r1 - r - k - 1) * cols >= 32 - tail; };
    const __m256 d0 = row_dot(w, s, xq, sx, full, tail, over(0));
    const __m256 d1 = row_dot(w + cols, s + nb, xq, sx, full, tail, over(1));
    const __m256 d2 = row_dot(w + 2 * cols, s + 2 * nb, xq, sx, full, tail, over(2));
    const __m256 d3 = row_dot(w + 3 * cols, s + 3 * nb, xq, sx, full, tail, over(3));
    _mm_storeu_ps(y + r, hsum4(d0, d1, d2, d3));
  }
  for (; r < r1; ++r)
    y[r] = hsum(row_dot(W + r * cols, scales + r * nb, xq, sx, full, tail, (r1 - r - 1) * cols >= 32 - tail));
}

void matmul_q8_0(const int8_t* W, const float* scales, const float* X, float* Y, int64_t n,
                 int64_t cols, int64_t ldx, int64_t ldy, int64_t r0, int64_t r1) {
  const int64_t nb = q8_blocks_of(cols);
  float* panel = scratch(2, 16 * cols);  // matmul_f32 uses slots 0 and 1
  for (int64_t r = r0; r < r1; r += 16) {
    const int64_t nr = std::min<int64_t>(16, r1 - r);
    for (int64_t i = 0; i < nr; ++i) {
      const int8_t* q = W + (r + i) * cols;
      const float* s = scales + (r + i) * nb;
      for (int64_t c = 0; c < cols; ++c) panel[i * cols + c] = s[c / 32] * float(q[c]);
    }
    // Y[t, r + i] = panel[i] . X[t]: the panel is a [nr, cols] f32 matrix.
    matmul_f32(panel, X, Y + r, n, cols, ldx, ldy, 0, nr);
  }
}

}  // namespace lr::cpu
