#include "backend/cpu/kernels/quant_scores.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "backend/cpu/kernels/kernels_simd.h"
#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/half.h"

namespace lr::cpu {

namespace {

constexpr int kMaxBlocks = 8;  // head_dim up to 256

inline float scale_of(const void* block) {
  uint16_t h;
  std::memcpy(&h, block, 2);
  return f16_to_f32(h);
}

// Code i (0-31) of a block as the signed value it stands for: q8_0's code,
// q4_0's nibble minus 8.
inline int code_at(const Q8Block& b, int i) {
  return b.qs[i];
}
inline int code_at(const Q4Block& b, int i) {
  return int((i < 16 ? b.qs[i] : b.qs[i - 16] >> 4) & 15) - 8;
}

// A key block's 32 codes as bytes in column order: q8_0's as stored, q4_0's
// nibbles unpacked (0-15).
inline __m256i codes32(const Q8Block& b) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs));
}
inline __m256i codes32(const Q4Block& b) {
  const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs));
  const __m128i m = _mm_set1_epi8(15);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(x, 4), m), _mm_and_si128(x, m));
}
// The f16 scales (bits) of block blk of N keys, stride blocks apart.
template <typename B, int N>
inline void block_scales(const B* K, int64_t stride, int blk, uint16_t (&h)[N]) {
  for (int i = 0; i < N; ++i) std::memcpy(&h[i], &K[i * stride + blk], 2);
}

inline __m256i lo32(__m256i a, __m256i b) {
  return _mm256_unpacklo_epi32(a, b);
}
inline __m256i hi32(__m256i a, __m256i b) {
  return _mm256_unpackhi_epi32(a, b);
}
inline __m256i lo64(__m256i a, __m256i b) {
  return _mm256_unpacklo_epi64(a, b);
}
inline __m256i hi64(__m256i a, __m256i b) {
  return _mm256_unpackhi_epi64(a, b);
}
#define LR_QT_VEC __m256i
#include "backend/cpu/kernels/quant_transpose_isa.h"
#undef LR_QT_VEC

// Keys [b0, nb) one at a time: the definition (quant_scores.h).
template <typename B>
void scalar_scores(const QuantQuery* rows, int R, int d, const B* K, int64_t stride, int b0, int nb,
                   float scale, float* s, int64_t lds) {
  for (int r = 0; r < R; ++r)
    for (int b = b0; b < nb; ++b) {
      const B* key = K + b * stride;
      float tot = 0.f;
      for (int blk = 0; blk < d / 32; ++blk) {
        int32_t isum = 0;
        for (int i = 0; i < 32; ++i)
          isum += int32_t(rows[r].q[32 * blk + i]) * code_at(key[blk], i);
        tot = std::fma(float(isum), rows[r].d[blk] * scale_of(&key[blk]), tot);
      }
      s[r * lds + b] = tot * scale;
    }
}

inline int32_t load32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// 8 keys at a time (AVX2): the group's codes transposed once (kt[8 blk + j]:
// the 8 keys' codes of columns 4j .. 4j + 3 of block blk; q8_0's also as
// |k|), then each row's sums by maddubs (|k| times q with k's sign, or the
// nibbles times q: no int16 overflow) and madd into int32.
template <typename B>
void scores8(const QuantQuery* rows, int R, int d, const B* K, int64_t stride, int b0, float scale,
             float* s, int64_t lds) {
  constexpr bool kQ8 = std::is_same_v<B, Q8Block>;
  const int nblk = d / 32;
  const B* k0 = K + b0 * stride;
  __m256i kt[8 * kMaxBlocks], ka[8 * kMaxBlocks];
  __m256 dk[kMaxBlocks];
  for (int blk = 0; blk < nblk; ++blk) {
    uint16_t h[8];
    block_scales(k0, stride, blk, h);
    dk[blk] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h)));
    __m256i r[8];
    for (int i = 0; i < 8; ++i) r[i] = codes32(k0[i * stride + blk]);
    transpose8(r);
    for (int e = 0; e < 4; ++e) {  // r[e]: element e | e + 4 of keys 0-3; r[4 + e]: keys 4-7
      kt[8 * blk + e] = _mm256_permute2x128_si256(r[e], r[4 + e], 0x20);
      kt[8 * blk + e + 4] = _mm256_permute2x128_si256(r[e], r[4 + e], 0x31);
    }
    if constexpr (kQ8)
      for (int j = 0; j < 8; ++j) ka[8 * blk + j] = _mm256_abs_epi8(kt[8 * blk + j]);
  }
  const __m256i ones = _mm256_set1_epi16(1);
  for (int r = 0; r < R; ++r) {
    __m256 tot = _mm256_setzero_ps();
    for (int blk = 0; blk < nblk; ++blk) {
      __m256i acc = _mm256_setzero_si256();
      for (int j = 0; j < 8; ++j) {
        const __m256i qb = _mm256_set1_epi32(load32(rows[r].q + 32 * blk + 4 * j));
        const __m256i p =
            kQ8 ? _mm256_maddubs_epi16(ka[8 * blk + j], _mm256_sign_epi8(qb, kt[8 * blk + j]))
                : _mm256_maddubs_epi16(kt[8 * blk + j], qb);
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, ones));
      }
      if constexpr (!kQ8) acc = _mm256_sub_epi32(acc, _mm256_set1_epi32(8 * rows[r].sum[blk]));
      tot = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc),
                            _mm256_mul_ps(_mm256_set1_ps(rows[r].d[blk]), dk[blk]), tot);
    }
    _mm256_storeu_ps(s + r * lds + b0, _mm256_mul_ps(tot, _mm256_set1_ps(scale)));
  }
}

template <typename B>
void scores_avx2(const QuantQuery* rows, int R, int d, const B* K, int64_t stride, int nb,
                 float scale, float* s, int64_t lds) {
  int b = 0;
  for (; b + 8 <= nb; b += 8) scores8(rows, R, d, K, stride, b, scale, s, lds);
  scalar_scores(rows, R, d, K, stride, b, nb, scale, s, lds);
}

}  // namespace

LR_BEGIN_AVX512VNNI
namespace avx512 {
namespace {

// (The masked forms throughout: GCC 12 warns of the undefined source the
// unmasked ones pass.)
constexpr __mmask16 kAll = 0xffff;
constexpr __mmask8 kAll64 = 0xff;
inline __m512i lo32(__m512i a, __m512i b) {
  return _mm512_maskz_unpacklo_epi32(kAll, a, b);
}
inline __m512i hi32(__m512i a, __m512i b) {
  return _mm512_maskz_unpackhi_epi32(kAll, a, b);
}
inline __m512i lo64(__m512i a, __m512i b) {
  return _mm512_maskz_unpacklo_epi64(kAll64, a, b);
}
inline __m512i hi64(__m512i a, __m512i b) {
  return _mm512_maskz_unpackhi_epi64(kAll64, a, b);
}
#define LR_QT_VEC __m512i
#include "backend/cpu/kernels/quant_transpose_isa.h"
#undef LR_QT_VEC
// [lo | hi]
inline __m512i join(__m256i lo, __m256i hi) {
  const __m512i l = _mm512_castsi256_si512(lo);
  return _mm512_mask_inserti64x4(l, kAll64, l, hi, 1);
}

// RC rows side by side (independent chains) against 16 keys' codes
// (scores16: q8_0's offset by 128 into unsigned bytes, q4_0's nibbles as
// they are): vpdpbusd against each row's 4 codes broadcast, the offset taken
// back with the row's block sums: sum (k + 128) q - 128 sum q, sum c q - 8
// sum q.
template <typename B, int RC>
void rows_scores(const QuantQuery* rows, int nblk, const __m512i* kt, const __m512* dk, float scale,
                 float* s, int64_t lds) {
  constexpr int kOffset = std::is_same_v<B, Q8Block> ? 128 : 8;
  __m512 tot[RC];
  for (int r = 0; r < RC; ++r) tot[r] = _mm512_setzero_ps();
  for (int blk = 0; blk < nblk; ++blk) {
    __m512i acc[RC];
    for (int r = 0; r < RC; ++r) acc[r] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j)
      for (int r = 0; r < RC; ++r)
        acc[r] = _mm512_dpbusd_epi32(acc[r], kt[8 * blk + j],
                                     _mm512_set1_epi32(load32(rows[r].q + 32 * blk + 4 * j)));
    for (int r = 0; r < RC; ++r) {
      const __m512i isum = _mm512_sub_epi32(acc[r], _mm512_set1_epi32(kOffset * rows[r].sum[blk]));
      tot[r] = _mm512_fmadd_ps(_mm512_maskz_cvtepi32_ps(kAll, isum),
                               _mm512_mul_ps(_mm512_set1_ps(rows[r].d[blk]), dk[blk]), tot[r]);
    }
  }
  for (int r = 0; r < RC; ++r)
    _mm512_storeu_ps(s + r * lds, _mm512_mul_ps(tot[r], _mm512_set1_ps(scale)));
}

template <typename B>
void scores16(const QuantQuery* rows, int R, int d, const B* K, int64_t stride, int b0, float scale,
              float* s, int64_t lds) {
  const int nblk = d / 32;
  const B* k0 = K + b0 * stride;
  __m512i kt[8 * kMaxBlocks];
  __m512 dk[kMaxBlocks];
  for (int blk = 0; blk < nblk; ++blk) {
    uint16_t h[16];
    block_scales(k0, stride, blk, h);
    dk[blk] = _mm512_maskz_cvtph_ps(kAll, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(h)));
    // Register i < 4: keys i and i + 4; 4 + i: keys 8 + i and 12 + i. After
    // the transpose r[e] holds element e (lanes 0, 2) and e + 4 (lanes 1, 3)
    // of keys 0-3 and 4-7, r[4 + e] of keys 8-11 and 12-15.
    __m512i r[8];
    for (int i = 0; i < 4; ++i) {
      r[i] = join(codes32(k0[i * stride + blk]), codes32(k0[(i + 4) * stride + blk]));
      r[4 + i] = join(codes32(k0[(8 + i) * stride + blk]), codes32(k0[(12 + i) * stride + blk]));
    }
    transpose8(r);
    for (int e = 0; e < 4; ++e) {
      // lanes 0 and 2 of each: element e; lanes 1 and 3: element e + 4
      __m512i lo = _mm512_maskz_shuffle_i32x4(kAll, r[e], r[4 + e], 0x88);
      __m512i hi = _mm512_maskz_shuffle_i32x4(kAll, r[e], r[4 + e], 0xDD);
      if constexpr (std::is_same_v<B, Q8Block>) {  // k + 128 as unsigned bytes
        lo = _mm512_xor_si512(lo, _mm512_set1_epi8(char(0x80)));
        hi = _mm512_xor_si512(hi, _mm512_set1_epi8(char(0x80)));
      }
      kt[8 * blk + e] = lo;
      kt[8 * blk + e + 4] = hi;
    }
  }
  int r = 0;
  for (; r + 4 <= R; r += 4)
    rows_scores<B, 4>(rows + r, nblk, kt, dk, scale, s + r * lds + b0, lds);
  for (; r + 2 <= R; r += 2)
    rows_scores<B, 2>(rows + r, nblk, kt, dk, scale, s + r * lds + b0, lds);
  for (; r < R; ++r) rows_scores<B, 1>(rows + r, nblk, kt, dk, scale, s + r * lds + b0, lds);
}

template <typename B>
void scores(const QuantQuery* rows, int R, int d, const B* K, int64_t stride, int nb, float scale,
            float* s, int64_t lds) {
  int b = 0;
  for (; b + 16 <= nb; b += 16) scores16(rows, R, d, K, stride, b, scale, s, lds);
  scalar_scores(rows, R, d, K, stride, b, nb, scale, s, lds);
}

}  // namespace
}  // namespace avx512
LR_END_AVX512VNNI

namespace {

template <typename B>
void dispatch(const QuantQuery* rows, int R, int d, const B* K, int64_t stride, int nb, float scale,
              float* s, int64_t lds) {
  LR_ASSERT(d % 32 == 0 && d / 32 <= kMaxBlocks && stride * int64_t(sizeof(B)) * 16 < (1LL << 31));
  if (kernel_isa() == Isa::Avx512Vnni)
    avx512::scores(rows, R, d, K, stride, nb, scale, s, lds);
  else
    scores_avx2(rows, R, d, K, stride, nb, scale, s, lds);
}

}  // namespace

void QuantQueries::reset(int n, int d) {
  LR_ASSERT(d % 32 == 0 && d / 32 <= kMaxBlocks);
  d_ = d;
  q_.resize(size_t(n) * size_t(d));
  sum_.resize(size_t(n) * size_t(d / 32));
  dq_.resize(sum_.size());
  rows_.resize(size_t(n));
  for (int r = 0; r < n; ++r) {
    const size_t c = size_t(r) * size_t(d), b = c / 32;
    rows_[size_t(r)] = {&q_[c], &dq_[b], &sum_[b]};
  }
}

void QuantQueries::quantize(int r, const float* x) {
  const size_t c = size_t(r) * size_t(d_);
  quantize_q8_blocks(x, &q_[c], &dq_[c / 32], d_);
  for (int blk = 0; blk < d_ / 32; ++blk) {
    int32_t t = 0;
    for (int i = 0; i < 32; ++i) t += q_[c + size_t(32 * blk + i)];
    sum_[c / 32 + size_t(blk)] = t;
  }
}

void quant_scores(const QuantQuery* rows, int R, int d, const Q8Block* K, int64_t stride, int nb,
                  float scale, float* s, int64_t lds) {
  dispatch(rows, R, d, K, stride, nb, scale, s, lds);
}
void quant_scores(const QuantQuery* rows, int R, int d, const Q4Block* K, int64_t stride, int nb,
                  float scale, float* s, int64_t lds) {
  dispatch(rows, R, d, K, stride, nb, scale, s, lds);
}

namespace ref {
void quant_scores(const QuantQuery* rows, int R, int d, const Q8Block* K, int64_t stride, int nb,
                  float scale, float* s, int64_t lds) {
  scalar_scores(rows, R, d, K, stride, 0, nb, scale, s, lds);
}
void quant_scores(const QuantQuery* rows, int R, int d, const Q4Block* K, int64_t stride, int nb,
                  float scale, float* s, int64_t lds) {
  scalar_scores(rows, R, d, K, stride, 0, nb, scale, s, lds);
}
}  // namespace ref

}  // namespace lr::cpu
