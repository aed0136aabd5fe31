// The Q8_0 decode dot products (kernels_q8.cpp), written once and compiled
// once per instruction set: kernels_q8.cpp includes this file inside
// namespace avx2 and again inside namespace avx512vnni under a target pragma,
// with LR_Q8_VNNI 0 or 1 (the reasons are kernels_blocks_isa.h's: internal
// linkage only, no includes). vpdpbusd sums the same int8 products as
// maddubs + madd (which never saturate here), so both paths give the same
// bits.

namespace {

// 32 int8 products summed in 8 int32 lanes, as f32.
inline __m256 dot32(__m256i w, __m256i x) {
  const __m256i aw = _mm256_sign_epi8(w, w);  // |w| (w >= -127, so it fits)
  const __m256i sx = _mm256_sign_epi8(x, w);  // x * sign(w)
#if LR_Q8_VNNI
  return _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(_mm256_setzero_si256(), aw, sx));
#else
  const __m256i p16 = _mm256_maddubs_epi16(aw, sx);  // |p| <= 2 * 127 * 127 < 2^15
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
#endif
}

// A weight block's f16 scale as f32 (exact).
inline float scale_of(uint16_t h) {
  return _cvtsh_ss(h);
}

inline __m256i load32(const int8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// The last cols - c0 (< 32) values of a row, zero-padded to 32.
inline __m256i load_tail(const int8_t* p, int64_t n) {
  alignas(32) int8_t buf[32] = {};
  std::memcpy(buf, p, size_t(n));
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(buf));
}

// sum_b s[b] * sx[b] * dot(w block b, xq block b) for one row, as 8 lanes,
// for T inputs (xq[t], sx[t]) at once: the row is loaded, and on AVX-512 its
// signs taken, once for all of them; each input's lanes get the operations
// they would get alone. The tail block (cols % 32 values) is read with a full
// 32-byte load when `tail_over` allows reading past the row end (enough later
// rows of the same call follow); the bytes past the row meet xq's zero
// padding.
template <int T>
inline void row_dot(const int8_t* w, const uint16_t* s, const int8_t* const* xq,
                    const float* const* sx, int64_t full, int64_t tail, bool tail_over,
                    __m256* out) {
  __m256 a[T], b2[T];
  for (int t = 0; t < T; ++t) a[t] = b2[t] = _mm256_setzero_ps();
  int64_t b = 0;
#if LR_Q8_VNNI
  // Blocks b and b + 1 in the halves of 512-bit registers: the low half's
  // lanes are a's, the high half's b2's, with the same operations.
  __m512 ab[T];
  for (int t = 0; t < T; ++t) ab[t] = _mm512_setzero_ps();
  const __m512i half = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  for (; b + 2 <= full; b += 2) {
    const __m512i w2 = _mm512_loadu_si512(w + b * 32), aw = _mm512_abs_epi8(w2);
    const __mmask64 neg = _mm512_movepi8_mask(w2);
    // (an unaligned 4-byte load: the scales are 2-byte aligned)
    const __m128 sw = _mm_cvtph_ps(_mm_loadu_si32(s + b));
    for (int t = 0; t < T; ++t) {
      // x * sign(w) (AVX-512 has no vpsignb; where w is 0 the product is 0 either way)
      const __m512i x2 = _mm512_loadu_si512(xq[t] + b * 32);
      const __m512i sx2 = _mm512_mask_sub_epi8(x2, neg, _mm512_setzero_si512(), x2);
      const __m512 d =
          _mm512_maskz_cvtepi32_ps(  // (zero-masked forms: see kernels_blocks_isa.h both_halves)
              __mmask16(0xffff), _mm512_dpbusd_epi32(_mm512_setzero_si512(), aw, sx2));
      // s[b] sx[b] and s[b + 1] sx[b + 1] (one f32 product each), spread over the halves
      const __m128 prod = _mm_mul_ps(sw, _mm_castsi128_ps(_mm_loadu_si64(sx[t] + b)));
      ab[t] = _mm512_fmadd_ps(
          d, _mm512_maskz_permutexvar_ps(__mmask16(0xffff), half, _mm512_zextps128_ps512(prod)), ab[t]);
    }
  }
  for (int t = 0; t < T; ++t) {
    a[t] = _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(__mmask8(0xf), _mm512_castps_pd(ab[t]), 0));
    b2[t] = _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(__mmask8(0xf), _mm512_castps_pd(ab[t]), 1));
  }
#endif
  for (; b + 2 <= full; b += 2) {
    const __m256i w0 = load32(w + b * 32), w1 = load32(w + b * 32 + 32);
    for (int t = 0; t < T; ++t) {
      a[t] = _mm256_fmadd_ps(dot32(w0, load32(xq[t] + b * 32)),
                             _mm256_set1_ps(scale_of(s[b]) * sx[t][b]), a[t]);
      b2[t] = _mm256_fmadd_ps(dot32(w1, load32(xq[t] + b * 32 + 32)),
                              _mm256_set1_ps(scale_of(s[b + 1]) * sx[t][b + 1]), b2[t]);
    }
  }
  if (b < full) {
    const __m256i w0 = load32(w + b * 32);
    for (int t = 0; t < T; ++t)
      a[t] = _mm256_fmadd_ps(dot32(w0, load32(xq[t] + b * 32)),
                             _mm256_set1_ps(scale_of(s[b]) * sx[t][b]), a[t]);
  }
  if (tail) {
    const __m256i wt = tail_over ? load32(w + full * 32) : load_tail(w + full * 32, tail);
    for (int t = 0; t < T; ++t)
      b2[t] = _mm256_fmadd_ps(dot32(wt, load32(xq[t] + full * 32)),
                              _mm256_set1_ps(scale_of(s[full]) * sx[t][full]), b2[t]);
  }
  for (int t = 0; t < T; ++t) out[t] = _mm256_add_ps(a[t], b2[t]);
}

// y[t][r] for r in [r0, r1) and T inputs quantized to xq[t], sx[t]
// (zero-padded to whole blocks).
template <int T>
void matvec_rows(const int8_t* W, const uint16_t* scales, const int8_t* const* xq,
                 const float* const* sx, float* const* y, int64_t cols, int64_t r0, int64_t r1) {
  const int64_t nb = q8_blocks_of(cols), full = cols / 32, tail = cols - full * 32;
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) {
    const int8_t* w = W + r * cols;
    const uint16_t* s = scales + r * nb;
    // The 4 rows four groups ahead into L2 (as kernels_blocks_isa.h).
    for (int64_t c = 0; c < 4 * cols; c += 64)
      _mm_prefetch(reinterpret_cast<const char*>(w + 16 * cols + c), _MM_HINT_T1);
    // Row r + k may over-read when the rows after it hold the 32 - tail bytes.
    auto over = [&](int64_t k) { return (r1 - r - k - 1) * cols >= 32 - tail; };
    __m256 d[4][T];
    for (int k = 0; k < 4; ++k) row_dot<T>(w + k * cols, s + k * nb, xq, sx, full, tail, over(k), d[k]);
    for (int t = 0; t < T; ++t) _mm_storeu_ps(y[t] + r, hsum4(d[0][t], d[1][t], d[2][t], d[3][t]));
  }
  for (; r < r1; ++r) {
    __m256 d[T];
    row_dot<T>(W + r * cols, scales + r * nb, xq, sx, full, tail, (r1 - r - 1) * cols >= 32 - tail, d);
    for (int t = 0; t < T; ++t) y[t][r] = hsum_as4(d[t]);
  }
}

}  // namespace
