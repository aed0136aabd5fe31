// The block-format dot products (kernels_blocks.cpp), written once and
// compiled once per instruction set: kernels_blocks.cpp includes this file
// inside namespace avx2 and again inside namespace avx512vnni under a target
// pragma, with LR_BLOCKS_VNNI 0 or 1. No #pragma once, no includes: every
// function here has internal linkage, so the two copies never meet at link
// time (an inline function compiled for AVX-512 could otherwise be picked
// for an AVX2-only CPU). The two paths compute the same integer sums (maddubs
// never saturates here: |u| <= 63, |q| <= 127) and the same f32 arithmetic,
// so their results are bit-identical.

namespace {

namespace q = lr::quants;

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

inline float f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);  // F16C: exact, like f16_to_f32
}
inline __m256i load256(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
// Shifts of 16-bit lanes; n is a constant once the chunk loops are unrolled,
// so these become immediate shifts (none for 0).
inline __m256i srl16(__m256i v, int n) {
  return n ? _mm256_srli_epi16(v, n) : v;
}
inline __m256i sll16(__m256i v, int n) {
  return n ? _mm256_slli_epi16(v, n) : v;
}
inline __m256i bytes_of(int v) {
  return _mm256_set1_epi8(char(v));
}

#if LR_BLOCKS_VNNI
// Two chunks at once in 512-bit registers (the K-quants on AVX-512): the low
// half holds chunk c, the high half chunk c + 1. (The zero-masked forms of
// broadcast and extract: GCC 12's plain ones warn of an uninitialized value
// in its own header.)
inline __m512i both_halves(const uint8_t* p) {
  return _mm512_maskz_broadcast_i64x4(__mmask8(0xff), load256(p));
}
inline __m512i bytes512(int v) {
  return _mm512_set1_epi8(char(v));
}
// The 16-bit lanes selected by m shifted right by n (left for negative n).
inline __m512i shift_lanes(__m512i v, __mmask32 m, int n) {
  if (n > 0) return _mm512_mask_srli_epi16(v, m, v, unsigned(n));
  if (n < 0) return _mm512_mask_slli_epi16(v, m, v, unsigned(-n));
  return v;
}
// 16-bit lanes of the low half shifted right by a, of the high half by b
// (constants once the loops are unrolled).
inline __m512i shift_halves(__m512i v, int a, int b) {
  return shift_lanes(shift_lanes(v, __mmask32(0x0000ffff), a), __mmask32(0xffff0000), b);
}
// The halves' int32 lanes added.
inline __m256i add_halves(__m512i v) {
  return _mm256_add_epi32(_mm512_maskz_extracti64x4_epi64(__mmask8(0xf), v, 0),
                          _mm512_maskz_extracti64x4_epi64(__mmask8(0xf), v, 1));
}
#endif

// 16 bytes of nibbles -> 32 values: element j < 16 the low nibble of byte j, j >= 16 the high one
// (the bytes in both halves, the upper half shifted right by 4, then masked).
inline __m256i split_nibbles(const uint8_t* qs) {
  const __m256i v =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
  return _mm256_and_si256(_mm256_srlv_epi32(v, _mm256_set_epi32(4, 4, 4, 4, 0, 0, 0, 0)),
                          bytes_of(15));
}
// Bit j of the 32-bit qh as 0x10 in byte j.
inline __m256i high_bits(const uint8_t* qh_at) {
  uint32_t qh;
  std::memcpy(&qh, qh_at, 4);
#if LR_BLOCKS_VNNI
  return _mm256_maskz_mov_epi8(__mmask32(qh),
                               bytes_of(0x10));  // AVX-512 BW+VL: the bits are a byte mask
#else
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(int(qh)),
      _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0));
  const __m256i bit = _mm256_set1_epi64x(int64_t(0x8040201008040201));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), bytes_of(0x10));
#endif
}

// --- the formats ---------------------------------------------------------------
// Blocks of 32 (kElems 32): setup gives d and m (w = d u - m).
// Super-blocks (kElems 256): setup gives the base d, the min base dm, the
// integer scales per 16 or per 32 (kPer16) and the integer sum of the
// subtracted multiples times the input (w = d sc u - dm mn).
// values(b, c): chunk c's 32 unsigned values.

struct Small {
  float d, m;
};

struct Q4_0 {
  static constexpr int kElems = 32, kBytes = q::Q4_0::kBytes, kOff = 8;
  static constexpr bool kMin = false;
  static void affine(const uint8_t* b, float* a, float*) { a[0] = a[1] = f16_at(b); }
  static Small setup(const uint8_t* b) {
    const float d = f16_at(b);
    return {d, 8 * d};
  }
  static __m256i values(const uint8_t* b, int) { return split_nibbles(b + q::Q4_0::kQs); }
};
struct Q4_1 {
  static constexpr int kElems = 32, kBytes = q::Q4_1::kBytes, kOff = 0;
  static constexpr bool kMin = true;
  static void affine(const uint8_t* b, float* a, float* m) {
    a[0] = a[1] = f16_at(b), m[0] = m[1] = f16_at(b + 2);
  }
  static Small setup(const uint8_t* b) { return {f16_at(b), -f16_at(b + 2)}; }
  static __m256i values(const uint8_t* b, int) { return split_nibbles(b + q::Q4_1::kQs); }
};
struct Q5_0 {
  static constexpr int kElems = 32, kBytes = q::Q5_0::kBytes, kOff = 16;
  static constexpr bool kMin = false;
  static void affine(const uint8_t* b, float* a, float*) { a[0] = a[1] = f16_at(b); }
  static Small setup(const uint8_t* b) {
    const float d = f16_at(b);
    return {d, 16 * d};
  }
  static __m256i values(const uint8_t* b, int) {
    return _mm256_or_si256(split_nibbles(b + q::Q5_0::kQs), high_bits(b + q::Q5_0::kQh));
  }
};
struct Q5_1 {
  static constexpr int kElems = 32, kBytes = q::Q5_1::kBytes, kOff = 0;
  static constexpr bool kMin = true;
  static void affine(const uint8_t* b, float* a, float* m) {
    a[0] = a[1] = f16_at(b), m[0] = m[1] = f16_at(b + 2);
  }
  static Small setup(const uint8_t* b) { return {f16_at(b), -f16_at(b + 2)}; }
  static __m256i values(const uint8_t* b, int) {
    return _mm256_or_si256(split_nibbles(b + q::Q5_1::kQs), high_bits(b + q::Q5_1::kQh));
  }
};
inline uint32_t word(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline __m128i load128(const void* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}
// 8 int16 lanes of s16 (16-value sums) or s32 times 8 int16 scales, summed.
inline int32_t dot8_i16(__m128i a, const int16_t* b) {
  __m128i v = _mm_madd_epi16(a, load128(b));
  v = _mm_add_epi32(v, _mm_shuffle_epi32(v, 0x4e));
  v = _mm_add_epi32(v, _mm_shuffle_epi32(v, 0xb1));
  return _mm_cvtsi128_si32(v);
}
// The same over 16 groups (lo: 0-7, hi: 8-15).
inline int32_t dot16_i16(__m128i lo, __m128i hi, const int16_t* s16) {
  return dot8_i16(lo, s16) + dot8_i16(hi, s16 + 8);
}

// A super-block's scales kept in registers (no round trip through memory):
// per16: lo holds the int16 scales of groups 0-7, hi of 8-15; otherwise lo
// holds one per 32-chunk. mins = sum over groups of the subtracted integer
// multiple times the input's sum there, one integer per super-block. (Summed
// instead as four int32 lanes in f32, as llama.cpp does, the kernels ran 5-8%
// faster in cache, but Qwen2.5-Coder-1.5B decoded no faster and the 0.5B's
// greedy text matched llama.cpp's on 14 of 20 prompts instead of 18.)
struct Large {
  float d, dm;
  __m128i lo, hi;
  int32_t mins;
};

struct Q2_K {
  static constexpr int kElems = 256, kBytes = q::Q2_K::kBytes, kOff = 0;
  static constexpr bool kPer16 = true, kMin = true;
  static void affine(const uint8_t* b, float* a, float* m) {
    const float d = f16_at(b + q::Q2_K::kD), dmin = f16_at(b + q::Q2_K::kDmin);
    for (int g = 0; g < 16; ++g) {
      const uint8_t sc = b[q::Q2_K::kScales + g];
      a[g] = d * float(sc & 15), m[g] = -(dmin * float(sc >> 4));
    }
  }
  static Large setup(const uint8_t* b, const int16_t* s16, const int16_t*) {
    const __m128i raw = load128(b + q::Q2_K::kScales), m4 = _mm_set1_epi8(15);
    const __m128i sc = _mm_and_si128(raw, m4), mn = _mm_and_si128(_mm_srli_epi16(raw, 4), m4);
    const __m128i mlo = _mm_cvtepu8_epi16(mn), mhi = _mm_cvtepu8_epi16(_mm_srli_si128(mn, 8));
    return {f16_at(b + q::Q2_K::kD), f16_at(b + q::Q2_K::kDmin), _mm_cvtepu8_epi16(sc),
            _mm_cvtepu8_epi16(_mm_srli_si128(sc, 8)), dot16_i16(mlo, mhi, s16)};
  }
  static __m256i values(const uint8_t* b, int c) {
    return _mm256_and_si256(srl16(load256(b + q::Q2_K::kQs + 32 * (c / 4)), 2 * (c % 4)),
                            bytes_of(3));
  }
#if LR_BLOCKS_VNNI
  static __m512i values2(const uint8_t* b, int c) {  // chunks c, c + 1 (c even)
    const int at = 2 * (c % 4);
    return _mm512_and_si512(shift_halves(both_halves(b + q::Q2_K::kQs + 32 * (c / 4)), at, at + 2),
                            bytes512(3));
  }
#endif
};
struct Q3_K {
  static constexpr int kElems = 256, kBytes = q::Q3_K::kBytes, kOff = 4;
  static constexpr bool kPer16 = true, kMin = false;
  static void affine(const uint8_t* b, float* a, float*) {
    const float d = f16_at(b + q::Q3_K::kD);
    int8_t sc[16];
    q::k3_scales(b + q::Q3_K::kScales, sc);
    for (int g = 0; g < 16; ++g) a[g] = d * float(sc[g]);
  }
  // u = the 2 low bits | the hmask bit << 2, so w = d sc (u - 4). The scales
  // unpacked as quants.h k3_scales does, four at a time in 32-bit words.
  static Large setup(const uint8_t* b, const int16_t* s16, const int16_t*) {
    const uint8_t* p = b + q::Q3_K::kScales;
    const uint32_t a0 = word(p), a1 = word(p + 4), a2 = word(p + 8), m4 = 0x0f0f0f0f,
                   m2 = 0x03030303;
    const __m128i sc = _mm_sub_epi8(
        _mm_setr_epi32(int((a0 & m4) | (a2 & m2) << 4), int((a1 & m4) | ((a2 >> 2) & m2) << 4),
                       int(((a0 >> 4) & m4) | ((a2 >> 4) & m2) << 4),
                       int(((a1 >> 4) & m4) | ((a2 >> 6) & m2) << 4)),
        _mm_set1_epi8(32));
    const __m128i lo = _mm_cvtepi8_epi16(sc), hi = _mm_cvtepi8_epi16(_mm_srli_si128(sc, 8));
    const float d = f16_at(b + q::Q3_K::kD);
    return {d, d, lo, hi, 4 * dot16_i16(lo, hi, s16)};
  }
  static __m256i values(const uint8_t* b, int c) {
    const __m256i lo =
        _mm256_and_si256(srl16(load256(b + q::Q3_K::kQs + 32 * (c / 4)), 2 * (c % 4)), bytes_of(3));
    const __m256i hi = _mm256_and_si256(srl16(load256(b + q::Q3_K::kHmask), c), bytes_of(1));
    return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 2));
  }
#if LR_BLOCKS_VNNI
  static __m512i values2(const uint8_t* b, int c) {
    const int at = 2 * (c % 4);
    const __m512i lo = _mm512_and_si512(
        shift_halves(both_halves(b + q::Q3_K::kQs + 32 * (c / 4)), at, at + 2), bytes512(3));
    const __m512i hi =
        _mm512_and_si512(shift_halves(both_halves(b + q::Q3_K::kHmask), c, c + 1), bytes512(1));
    return _mm512_or_si512(lo, _mm512_slli_epi16(hi, 2));
  }
#endif
};
template <class L, bool kFive>
struct Q45_K {
  static constexpr int kElems = 256, kBytes = L::kBytes, kOff = 0;
  static constexpr bool kPer16 = false, kMin = true;
  static void affine(const uint8_t* b, float* a, float* m) {
    const float d = f16_at(b + L::kD), dmin = f16_at(b + L::kDmin);
    uint8_t sc[8], mn[8];
    q::k4_scales(b + L::kScales, sc, mn);
    for (int g = 0; g < 16; ++g) a[g] = d * float(sc[g / 2]), m[g] = -(dmin * float(mn[g / 2]));
  }
  // The 6-bit scales and mins unpacked as quants.h k4_scales does, four at a time.
  static Large setup(const uint8_t* b, const int16_t*, const int16_t* s32) {
    const uint8_t* p = b + L::kScales;
    const uint32_t a0 = word(p), a1 = word(p + 4), a2 = word(p + 8), m6 = 0x3f3f3f3f,
                   m4 = 0x0f0f0f0f, m2 = 0x03030303;
    const __m128i sc = _mm_cvtepu8_epi16(
        _mm_setr_epi32(int(a0 & m6), int((a2 & m4) | ((a0 >> 6) & m2) << 4), 0, 0));
    const __m128i mn = _mm_cvtepu8_epi16(
        _mm_setr_epi32(int(a1 & m6), int(((a2 >> 4) & m4) | ((a1 >> 6) & m2) << 4), 0, 0));
    return {f16_at(b + L::kD), f16_at(b + L::kDmin), sc, sc, dot8_i16(mn, s32)};
  }
  static __m256i values(const uint8_t* b, int c) {
    __m256i u =
        _mm256_and_si256(srl16(load256(b + L::kQs + 32 * (c / 2)), 4 * (c % 2)), bytes_of(15));
    if constexpr (kFive) {
      const __m256i hi = _mm256_and_si256(srl16(load256(b + q::Q5_K::kQh), c), bytes_of(1));
      u = _mm256_or_si256(u, _mm256_slli_epi16(hi, 4));
    }
    return u;
  }
#if LR_BLOCKS_VNNI
  static __m512i values2(const uint8_t* b, int c) {  // low and high nibbles of the same bytes
    __m512i u =
        _mm512_and_si512(shift_halves(both_halves(b + L::kQs + 32 * (c / 2)), 0, 4), bytes512(15));
    if constexpr (kFive) {
      const __m512i hi =
          _mm512_and_si512(shift_halves(both_halves(b + q::Q5_K::kQh), c, c + 1), bytes512(1));
      u = _mm512_or_si512(u, _mm512_slli_epi16(hi, 4));
    }
    return u;
  }
#endif
};
using Q4_K = Q45_K<q::Q4_K, false>;
using Q5_K = Q45_K<q::Q5_K, true>;
struct Q6_K {
  static constexpr int kElems = 256, kBytes = q::Q6_K::kBytes, kOff = 32;
  static constexpr bool kPer16 = true, kMin = false;
  static void affine(const uint8_t* b, float* a, float*) {
    const float d = f16_at(b + q::Q6_K::kD);
    for (int g = 0; g < 16; ++g) a[g] = d * float(int8_t(b[q::Q6_K::kScales + g]));
  }
  // u = q + 32 in 0..63, so w = d sc (u - 32).
  static Large setup(const uint8_t* b, const int16_t* s16, const int16_t*) {
    const __m128i sc = load128(b + q::Q6_K::kScales);
    const __m128i lo = _mm_cvtepi8_epi16(sc), hi = _mm_cvtepi8_epi16(_mm_srli_si128(sc, 8));
    const float d = f16_at(b + q::Q6_K::kD);
    return {d, d, lo, hi, 32 * dot16_i16(lo, hi, s16)};
  }
  static __m256i values(const uint8_t* b, int c) {
    const __m256i lo = _mm256_and_si256(
        srl16(load256(b + q::Q6_K::kQl + 64 * (c / 4) + 32 * (c % 2)), 4 * ((c % 4) / 2)),
        bytes_of(15));
    // The two high bits of chunk c (bits 2 (c % 4) of qh) moved to bits 4-5 in one shift.
    const __m256i qh = load256(b + q::Q6_K::kQh + 32 * (c / 4));
    const int at = 2 * (c % 4);
    const __m256i hi =
        _mm256_and_si256(at <= 4 ? sll16(qh, 4 - at) : srl16(qh, at - 4), bytes_of(0x30));
    return _mm256_or_si256(lo, hi);
  }
#if LR_BLOCKS_VNNI
  // The low bits of chunks c and c + 1 are 64 adjacent bytes.
  static __m512i values2(const uint8_t* b, int c) {
    const __m512i lo =
        _mm512_and_si512(_mm512_srli_epi16(_mm512_loadu_si512(b + q::Q6_K::kQl + 64 * (c / 4)),
                                           unsigned(4 * ((c % 4) / 2))),
                         bytes512(15));
    const int at = 2 * (c % 4);
    const __m512i hi = _mm512_and_si512(
        shift_halves(both_halves(b + q::Q6_K::kQh + 32 * (c / 4)), at - 4, at - 2), bytes512(0x30));
    return _mm512_or_si512(lo, hi);
  }
#endif
};

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
inline void rows_dot(const uint8_t* row0, uint64_t rb, int64_t nb, const Acts* x, float* out, int64_t ldo) {
  __m256 acc[T][R];
  float corr[T][R];
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < R; ++i) acc[t][i] = _mm256_setzero_ps(), corr[t][i] = 0;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk[R];
    for (int i = 0; i < R; ++i) blk[i] = row0 + uint64_t(i) * rb + uint64_t(b) * F::kBytes;
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
  int64_t r = r0;
  for (; r + R <= r1; r += R) {
    const uint8_t* row = W + uint64_t(r) * rb;
    // The rows kAhead groups ahead: a decode step streams its weights from
    // DRAM once, and one group ahead into L1 left the kernels at half their
    // in-cache speed there (BM_matvec_blocks_cold).
    for (uint64_t o = 0; o < R * rb; o += 64)
      _mm_prefetch(reinterpret_cast<const char*>(row + kAhead * R * rb + o), kPrefetchHint);
    rows_dot<F, R, T>(row, rb, nb, x, y + r, ldy);
  }
  for (; r < r1; ++r) rows_dot<F, 1, T>(W + uint64_t(r) * rb, 0, nb, x, y + r, ldy);
}

// clang-format off
template <class Fn>
void dispatch(DType t, Fn&& fn) {
  switch (t) {
    case DType::Q4_0: return fn(Q4_0{});
    case DType::Q4_1: return fn(Q4_1{});
    case DType::Q5_0: return fn(Q5_0{});
    case DType::Q5_1: return fn(Q5_1{});
    case DType::Q2_K: return fn(Q2_K{});
    case DType::Q3_K: return fn(Q3_K{});
    case DType::Q4_K: return fn(Q4_K{});
    case DType::Q5_K: return fn(Q5_K{});
    case DType::Q6_K: return fn(Q6_K{});
    default: LR_ASSERT(false && "not a block format");
  }
}
// clang-format on

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
// so they take fewer inputs per pass and more rows).
void matvec_n(DType t, const uint8_t* W, uint64_t rb, const Acts* x, int64_t n, float* Y, int64_t ldy,
              int64_t cols, int64_t r0, int64_t r1) {
  dispatch(t, [&](auto f) {
    using F = decltype(f);
    constexpr int T = F::kElems == 32 ? 2 : 4;
    int64_t k = 0;
    for (; k + T <= n; k += T) matvec_t<F, T>(W, rb, x + k, Y + k * ldy, ldy, cols, r0, r1);
    for (; k < n; ++k) matvec_t<F, 1>(W, rb, x + k, Y + k * ldy, ldy, cols, r0, r1);
  });
}

}  // namespace
