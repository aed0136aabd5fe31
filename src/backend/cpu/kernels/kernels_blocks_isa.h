// The block-format dot products (kernels_blocks.cpp) over the formats of
// block_formats_isa.h, written once and compiled once per instruction set:
// kernels_blocks.cpp includes both files inside namespace avx2 and again
// inside namespace avx512vnni under a target pragma, with LR_BLOCKS_VNNI 0
// or 1. No #pragma once, no includes: every
// function here has internal linkage, so the two copies never meet at link
// time (an inline function compiled for AVX-512 could otherwise be picked
// for an AVX2-only CPU). The two paths compute the same integer sums (maddubs
// never saturates here: |u| <= 63, |q| <= 127) and the same f32 arithmetic,
// so their results are bit-identical.

namespace {

// Sums of 4 adjacent u8 x s8 products in each int32 lane.
inline __m256i dot_u8s8(__m256i u, __m256i s) {
#if LR_BLOCKS_VNNI
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}
// acc + the sums of adjacent int16 products a b.
inline __m256i add_madd16(__m256i acc, __m256i a, __m256i b) {
#if LR_BLOCKS_VNNI
  return _mm256_dpwssd_epi32(acc, a, b);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
#endif
}
// K-quant rows side by side, on both paths (four rows on AVX-512 streamed
// 25-34% slower from DRAM than two, kernel benchmark *_cold, AMD EPYC).
constexpr int kRowsK = 2;
// How far ahead the decode kernels prefetch, and into which cache, as
// measured on each path's host (kernel benchmark *_cold and decode, 3
// interleaved rounds): on a Zen 4 with AVX-512, four groups into L2; on a
// Zen 3 with AVX2 only, eight groups with the T0 hint (Q5_0 7.5 -> 10.4 GB/s
// and Q4_K 10.0 -> 12.1 GB/s from DRAM on 2 threads; Qwen2.5-Coder-0.5B
// decode +8%, the 1.5B +3%).
#if LR_BLOCKS_VNNI
constexpr int kAhead = 4;
constexpr auto kPrefetchHint = _MM_HINT_T1;
#else
constexpr int kAhead = 8;
constexpr auto kPrefetchHint = _MM_HINT_T0;
#endif
// Rows longer than kLongRow bytes (Q6_K, Q4_K and Q5_0 rows of 4864 and
// 8960 values, the ffn_down of both Qwen models) also prefetch within the
// row, kRowAhead bytes ahead of each block: the group prefetch alone brings
// a group of 8960-value Q6_K rows (15 KB) in one burst. Three interleaved
// rounds of BM_matvec_blocks_cold/*/2 (Zen 4): Q6_K 896x4864 15-16.5 ->
// 17.4-18.7 GB/s, 1536x8960 14.8-16.2 -> 16.6-17.0, Q5_0 896x4864 13.3-13.9
// -> 14.0-15.4, Q4_K 896x4864 level; the in-row prefetch alone lost 20% on
// Q4_K there, and rows of 1-2 KB (Q5_0's 616 bytes) lost 40% without the
// group one.
constexpr uint64_t kLongRow = 2048;
constexpr int kRowAhead = 2048;

#if LR_BLOCKS_VNNI
// The halves' int32 lanes added.
inline __m256i add_halves(__m512i v) {
  return _mm256_add_epi32(_mm512_maskz_extracti64x4_epi64(__mmask8(0xf), v, 0),
                          _mm512_maskz_extracti64x4_epi64(__mmask8(0xf), v, 1));
}
#endif

// Chunk c's int16 scales as 16 lanes (elements 0-15 and 16-31 of the chunk)
// out of a super-block's scales in registers, with one byte shuffle: per 16,
// groups 2c and 2c + 1 (lo holds groups 0-7, hi 8-15); per 32, scale c of lo.
struct ScaleMasks {
  alignas(32) uint8_t m[8][32];
};
constexpr ScaleMasks scale_masks(bool per16) {
  ScaleMasks t{};
  for (int c = 0; c < 8; ++c)
    for (int j = 0; j < 32; ++j)
      t.m[c][j] = uint8_t(per16 ? 4 * (c % 4) + (j < 16 ? 0 : 2) + (j & 1) : 2 * c + (j & 1));
  return t;
}
template <bool kPer16>
inline __m256i chunk_scales(const Large& k, int c) {
  static constexpr ScaleMasks kMasks = scale_masks(kPer16);
  const __m128i src = kPer16 && c >= 4 ? k.hi : k.lo;
  return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(src),
                             _mm256_load_si256(reinterpret_cast<const __m256i*>(kMasks.m[c])));
}

#if LR_BLOCKS_VNNI
// Chunks c and c + 1 (c even) at once: their masks are adjacent.
template <bool kPer16>
inline __m512i chunk_scales2(const Large& k, int c) {
  static constexpr ScaleMasks kMasks = scale_masks(kPer16);
  const __m128i src = kPer16 && c >= 4 ? k.hi : k.lo;
  return _mm512_shuffle_epi8(_mm512_maskz_broadcast_i32x4(__mmask16(0xffff), src),
                             _mm512_loadu_si512(kMasks.m[c]));
}
#endif

// --- the dot products, once ------------------------------------------------------

// R rows (row0 + i rb) of nb blocks each against T inputs, side by side:
// each input is loaded once for all R rows and each row's weights are
// unpacked once for all T inputs; every (row, input) sum is independent and
// its arithmetic is the same for any R and T (explicit multiply-adds), so a
// batch of inputs gets the bits each would get alone. out[t * ldo + i].
template <class F, int R, int T>
inline void rows_dot(const uint8_t* row0, uint64_t rb, int64_t nb, const Acts* x, float* out, int64_t ldo,
                     bool in_row_prefetch) {
  __m256 acc[T][R];
  float corr[T][R];
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < R; ++i) acc[t][i] = _mm256_setzero_ps(), corr[t][i] = 0;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk[R];
    for (int i = 0; i < R; ++i) blk[i] = row0 + uint64_t(i) * rb + uint64_t(b) * F::kBytes;
    if (in_row_prefetch)
      for (int i = 0; i < R; ++i)
        for (int o = 0; o < F::kBytes; o += 64)
          _mm_prefetch(reinterpret_cast<const char*>(blk[i] + kRowAhead + o), kPrefetchHint);
    if constexpr (F::kElems == 32) {
      for (int i = 0; i < R; ++i) {
        const Small s = F::setup(blk[i]);
        const __m256i w = F::values(blk[i], 0);
        for (int t = 0; t < T; ++t) {
          const __m256i v = dot_u8s8(w, load256(reinterpret_cast<const uint8_t*>(x[t].q + 32 * b)));
          acc[t][i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), _mm256_set1_ps(s.d * x[t].d[b]), acc[t][i]);
          corr[t][i] = std::fma(s.m, x[t].dsum[b], corr[t][i]);
        }
      }
    } else {
      for (int i = 0; i < R; ++i) {
#if LR_BLOCKS_VNNI
        // Two chunks per 512-bit step; the halves' int32 sums added give
        // the AVX2 path's eight sums exactly.
        __m512i w[4];
#pragma GCC unroll 4
        for (int c = 0; c < 8; c += 2) w[c / 2] = F::values2(blk[i], c);
#else
        __m256i w[8];
#pragma GCC unroll 8
        for (int c = 0; c < 8; ++c) w[c] = F::values(blk[i], c);
#endif
        for (int t = 0; t < T; ++t) {
          const int8_t* xq = x[t].q + 256 * b;
          const float xd = x[t].d[b];
          const Large k = F::setup(blk[i], x[t].s16 + 16 * b, x[t].s32 + 8 * b);
#if LR_BLOCKS_VNNI
          __m512i sum2 = _mm512_setzero_si512();
#pragma GCC unroll 4
          for (int c = 0; c < 8; c += 2) {
            const __m512i p = _mm512_maddubs_epi16(w[c / 2], _mm512_loadu_si512(xq + 32 * c));
            sum2 = _mm512_dpwssd_epi32(sum2, p, chunk_scales2<F::kPer16>(k, c));
          }
          const __m256i sum = add_halves(sum2);
#else
          __m256i sum = _mm256_setzero_si256();
#pragma GCC unroll 8
          for (int c = 0; c < 8; ++c) {
            const __m256i p = _mm256_maddubs_epi16(w[c], load256(reinterpret_cast<const uint8_t*>(xq + 32 * c)));
            sum = add_madd16(sum, p, chunk_scales<F::kPer16>(k, c));
          }
#endif
          acc[t][i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_set1_ps(k.d * xd), acc[t][i]);
          corr[t][i] = std::fma(k.dm * xd, float(k.mins), corr[t][i]);
        }
      }
    }
  }
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < R; ++i) out[t * ldo + i] = hsum(acc[t][i]) - corr[t][i];
}

// Rows [r0, r1) of W against T inputs: y[t * ldy + r].
template <class F, int T>
void matvec_t(const uint8_t* W, uint64_t rb, const Acts* x, float* y, int64_t ldy, int64_t cols, int64_t r0,
              int64_t r1) {
  const int64_t nb = cols / F::kElems;
  constexpr int R = F::kElems == 32 ? 4 : kRowsK;  // rows side by side (the K-quants' bodies are larger)
  const bool long_rows = rb > kLongRow;
  int64_t r = r0;
  for (; r + R <= r1; r += R) {
    const uint8_t* row = W + uint64_t(r) * rb;
    // The rows kAhead groups ahead: a decode step streams its weights from
    // DRAM once, and one group ahead into L1 left the kernels at half their
    // in-cache speed there (BM_matvec_blocks_cold).
    for (uint64_t o = 0; o < R * rb; o += 64)
        _mm_prefetch(reinterpret_cast<const char*>(row + kAhead * R * rb + o), kPrefetchHint);
    rows_dot<F, R, T>(row, rb, nb, x, y + r, ldy, long_rows);
  }
  for (; r < r1; ++r) rows_dot<F, 1, T>(W + uint64_t(r) * rb, 0, nb, x, y + r, ldy, long_rows);
}


// One block of F as f32: each format's w = a float(u - kOff) (+ m), with a
// and m per 16 values, in the scalar dequantizer's f32 operations and order
// (core/quants.cpp; this file is compiled with -ffp-contract=off), so the
// values are the same bits, 8 at a time.
template <class F>
void dequantize_t(const uint8_t* b, float* y) {
  float a[F::kElems / 16], m[F::kElems / 16];
  F::affine(b, a, m);
  for (int c = 0; c < F::kElems / 32; ++c) {
    const __m256i u = F::values(b, c);
    for (int k = 0; k < 4; ++k) {
      const __m128i h = k < 2 ? _mm256_castsi256_si128(u) : _mm256_extracti128_si256(u, 1);
      const __m256i v = _mm256_sub_epi32(_mm256_cvtepu8_epi32(k % 2 ? _mm_srli_si128(h, 8) : h),
                                         _mm256_set1_epi32(F::kOff));
      const int g = (32 * c + 8 * k) / 16;
      __m256 w = _mm256_mul_ps(_mm256_set1_ps(a[g]), _mm256_cvtepi32_ps(v));
      if constexpr (F::kMin) w = _mm256_add_ps(w, _mm256_set1_ps(m[g]));
      _mm256_storeu_ps(y + 32 * c + 8 * k, w);
    }
  }
}

// A row of `cols` values of format t as f32.
void dequantize_row(DType t, const uint8_t* row, float* y, int64_t cols) {
  dispatch(t, [&](auto f) {
    using F = decltype(f);
    for (int64_t b = 0; b < cols / F::kElems; ++b)
      dequantize_t<F>(row + b * F::kBytes, y + b * F::kElems);
  });
}

// y[r] for r in [r0, r1): rows of format t against the quantized input.
void matvec(DType t, const uint8_t* W, uint64_t rb, const Acts& x, float* y, int64_t cols,
            int64_t r0, int64_t r1) {
  dispatch(t, [&](auto f) { matvec_t<decltype(f), 1>(W, rb, &x, y, 0, cols, r0, r1); });
}

// The same for n inputs, Y[k * ldy + r]: a few inputs at a time share each
// row's unpacked weights (the 32-value formats' rows are cheaper to unpack,
// so they take more rows per pass, and on AVX2, with 16 registers, fewer
// inputs: 2 there; 4 on AVX-512, where Q5_0 at 8 inputs went from 29 to 43
// G multiply-adds/s on a Zen 4, BM_matvec_blocks_n/6/4864/896/8). The inputs
// left over go one at a time (for the 32-value formats two at a time first;
// that body for the K-quants measured their 4-input pass 25% slower).
void matvec_n(DType t, const uint8_t* W, uint64_t rb, const Acts* x, int64_t n, float* Y, int64_t ldy,
              int64_t cols, int64_t r0, int64_t r1) {
  dispatch(t, [&](auto f) {
    using F = decltype(f);
    constexpr int T = F::kElems == 32 && !LR_BLOCKS_VNNI ? 2 : 4;
    int64_t k = 0;
    for (; k + T <= n; k += T) matvec_t<F, T>(W, rb, x + k, Y + k * ldy, ldy, cols, r0, r1);
    if constexpr (F::kElems == 32)
      for (; k + 2 <= n; k += 2) matvec_t<F, 2>(W, rb, x + k, Y + k * ldy, ldy, cols, r0, r1);
    for (; k < n; ++k) matvec_t<F, 1>(W, rb, x + k, Y + k * ldy, ldy, cols, r0, r1);
  });
}

}  // namespace
