// The GGUF block formats as the CPU kernels read them: one small traits
// struct per format (how a block's values, scales and mins unpack into
// registers), written once and compiled once per instruction set. Like
// kernels_blocks_isa.h it is included inside a namespace (avx2, avx512vnni)
// with LR_BLOCKS_VNNI 0 or 1 and has no #pragma once and no includes: every
// function here has internal linkage, so the copies never meet at link time.
// kernels_blocks.cpp (the decode products) and kernels_blocks_gemm.cpp (the
// integer prompt products) read the formats through these traits.

namespace {

namespace q = lr::quants;

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
// subtracted multiples times the input (w = d sc u - dm mn). The formats
// with a min base of their own (kMin) also give mins(b, mn): the integer
// multiple mn per group of 16 (per 32 formats: each 32's twice); the others
// subtract kOff sc with dm = d.
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
  static void mins(const uint8_t* b, int16_t* mn) {
    for (int g = 0; g < 16; ++g) mn[g] = int16_t(b[q::Q2_K::kScales + g] >> 4);
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
    // hmask bit c moved to bit 2 in one shift
    const __m256i hm = load256(b + q::Q3_K::kHmask);
    const __m256i hi = _mm256_and_si256(c >= 2 ? srl16(hm, c - 2) : sll16(hm, 2 - c), bytes_of(4));
    return _mm256_or_si256(lo, hi);
  }
#if LR_BLOCKS_VNNI
  // The hmask bits of chunks c and c + 1 tested into a byte mask that adds 4.
  static __m512i values2(const uint8_t* b, int c) {
    const int at = 2 * (c % 4);
    const __m512i lo = _mm512_and_si512(
        shift_halves(both_halves(b + q::Q3_K::kQs + 32 * (c / 4)), at, at + 2), bytes512(3));
    const __m512i bits = _mm512_mask_blend_epi64(__mmask8(0xf0), bytes512(1 << c), bytes512(1 << (c + 1)));
    const __mmask64 hi = _mm512_test_epi8_mask(both_halves(b + q::Q3_K::kHmask), bits);
    return _mm512_mask_add_epi8(lo, hi, lo, bytes512(4));
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
  static void mins(const uint8_t* b, int16_t* mn) {
    uint8_t sc[8], m[8];
    q::k4_scales(b + L::kScales, sc, m);
    for (int g = 0; g < 16; ++g) mn[g] = int16_t(m[g / 2]);
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

}  // namespace
