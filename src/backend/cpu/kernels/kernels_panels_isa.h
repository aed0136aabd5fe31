// The panel products (panels.h), written once and compiled once per
// instruction set: kernels_panels.cpp includes this file inside namespace
// avx2 (LR_PANELS_512 0: each panel as two halves of 8 rows in 256-bit
// registers, vpdpbusd as maddubs + madd, exact here: u <= 15, |q| <= 127)
// and inside namespace avx512vnni (LR_PANELS_512 1: 16 rows per register).
// Both sum the same integers and do the same f32 operations per row and
// super-block, so they give the same bits. Internal linkage only (see
// kernels_blocks_isa.h).

namespace {

inline int32_t load32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

#if LR_PANELS_512
using VI = __m512i;
using VF = __m512;
constexpr int kLanes = 16;  // rows per register
inline VI zero_i() {
  return _mm512_setzero_si512();
}
inline VF zero_f() {
  return _mm512_setzero_ps();
}
inline VI load_i(const uint8_t* p) {
  return _mm512_loadu_si512(p);
}
inline VI nibbles_lo(VI q) {
  return _mm512_and_si512(q, _mm512_set1_epi8(0x0F));
}
inline VI nibbles_hi(VI q) {
  return _mm512_and_si512(_mm512_srli_epi16(q, 4), _mm512_set1_epi8(0x0F));
}
inline VI dot4(VI acc, VI u, int32_t x4) {
  return _mm512_dpbusd_epi32(acc, u, _mm512_set1_epi32(x4));
}
// A sum of several dot4 steps: on AVX-512 VNNI the int32 lanes themselves.
inline VI dot4p(VI acc, VI u, int32_t x4) {
  return dot4(acc, u, x4);
}
inline VI finish(VI acc) {
  return acc;
}
inline VI dot2_16(VI acc, VI a, int32_t b2) {
  return _mm512_dpwssd_epi32(acc, a, _mm512_set1_epi32(b2));
}
// The maskz forms: GCC 12 warns of the plain ones' undefined pass-through.
inline VI scales_u8(const uint8_t* p) {
  return _mm512_maskz_cvtepu8_epi32(__mmask16(0xffff),
                                    _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline VI pairs_u8(const uint8_t* p) {
  return _mm512_maskz_cvtepu8_epi16(~__mmask32(0),
                                    _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline VI spairs_i8(const uint8_t* p) {
  return _mm512_maskz_cvtepi8_epi16(~__mmask32(0),
                                    _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
constexpr __mmask16 kAll = 0xffff;
inline VI lo16(VI v) {
  return _mm512_maskz_srai_epi32(kAll, _mm512_maskz_slli_epi32(kAll, v, 16), 16);
}
inline VI hi16(VI v) {
  return _mm512_maskz_srai_epi32(kAll, v, 16);
}
template <int N>
inline VI shl16(VI v) {
  return _mm512_slli_epi16(v, N);
}
template <int N>
inline VI shr16(VI v) {
  return _mm512_srli_epi16(v, N);
}
inline VI and8(VI v, uint8_t m) {
  return _mm512_and_si512(v, _mm512_set1_epi8(char(m)));
}
inline VI or_i(VI a, VI b) {
  return _mm512_or_si512(a, b);
}
inline VI sub_i(VI a, VI b) {
  return _mm512_sub_epi32(a, b);
}
template <int N>
inline VI shl32(VI v) {
  return _mm512_maskz_slli_epi32(kAll, v, N);
}
inline VI add_i(VI a, VI b) {
  return _mm512_add_epi32(a, b);
}
inline VI mul_i(VI a, VI b) {
  return _mm512_mullo_epi32(a, b);
}
inline VF halves_f(const uint8_t* p) {
  return _mm512_maskz_cvtph_ps(__mmask16(0xffff),
                               _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline VF mul_f(VF a, VF b) {
  return _mm512_mul_ps(a, b);
}
inline VF fma_f(VF a, VF b, VF c) {
  return _mm512_fmadd_ps(a, b, c);
}
inline VF fnma_f(VF a, VF b, VF c) {  // c - a b, rounded once
  return _mm512_fnmadd_ps(a, b, c);
}
inline VF to_f(VI a) {
  return _mm512_maskz_cvtepi32_ps(__mmask16(0xffff), a);
}
inline VF set_f(float v) {
  return _mm512_set1_ps(v);
}
inline void store_f(float* p, VF a) {
  _mm512_storeu_ps(p, a);
}
inline VI and16(VI v, uint16_t m) {
  return _mm512_and_si512(v, _mm512_set1_epi16(short(m)));
}
// Q3_K: u[c] += 4 where chunk c's high bit is set, from the 32 bytes of
// nibbles at p (panels.h): each lane byte's bit tested where it lies (bit c
// of the low nibbles' lanes, c + 4 of the high ones), no shifts.
inline void add_high_bits(VI* u, const uint8_t* p, int) {
  const __m512i b = _mm512_maskz_loadu_epi64(__mmask8(0x0f), p);
  const __m512i v = _mm512_maskz_shuffle_i64x2(__mmask8(0xff), b, b, 0x50);  // lanes 0, 0, 1, 1
  const __m512i four = _mm512_set1_epi8(4);
  for (int c = 0; c < 4; ++c) {
    const __m512i bit = _mm512_setr_epi32(
        0x01010101 << c, 0x01010101 << c, 0x01010101 << c, 0x01010101 << c, 0x10101010 << c,
        0x10101010 << c, 0x10101010 << c, 0x10101010 << c, 0x01010101 << c, 0x01010101 << c,
        0x01010101 << c, 0x01010101 << c, 0x10101010 << c, 0x10101010 << c, 0x10101010 << c,
        0x10101010 << c);
    u[c] = _mm512_mask_add_epi8(u[c], _mm512_test_epi8_mask(v, bit), u[c], four);
  }
}
#else
using VI = __m256i;
using VF = __m256;
constexpr int kLanes = 8;
inline VI zero_i() {
  return _mm256_setzero_si256();
}
inline VF zero_f() {
  return _mm256_setzero_ps();
}
inline VI load_i(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
inline VI nibbles_lo(VI q) {
  return _mm256_and_si256(q, _mm256_set1_epi8(0x0F));
}
inline VI nibbles_hi(VI q) {
  return _mm256_and_si256(_mm256_srli_epi16(q, 4), _mm256_set1_epi8(0x0F));
}
inline VI dot4(VI acc, VI u, int32_t x4) {
  return _mm256_add_epi32(
      acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, _mm256_set1_epi32(x4)), _mm256_set1_epi16(1)));
}
// A sum of several dot4 steps kept in int16 pairs until finish() widens it
// (one madd for the lot): exact while the steps' pair sums stay below 2^15,
// which the callers keep (at most 8 steps of u <= 15, 4 of u <= 31).
inline VI dot4p(VI acc, VI u, int32_t x4) {
  return _mm256_add_epi16(acc, _mm256_maddubs_epi16(u, _mm256_set1_epi32(x4)));
}
inline VI finish(VI acc) {
  return _mm256_madd_epi16(acc, _mm256_set1_epi16(1));
}
inline VI dot2_16(VI acc, VI a, int32_t b2) {
  return _mm256_add_epi32(acc, _mm256_madd_epi16(a, _mm256_set1_epi32(b2)));
}
inline VI scales_u8(const uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}
inline VI pairs_u8(const uint8_t* p) {
  return _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline VI spairs_i8(const uint8_t* p) {
  return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline VI lo16(VI v) {
  return _mm256_srai_epi32(_mm256_slli_epi32(v, 16), 16);
}
inline VI hi16(VI v) {
  return _mm256_srai_epi32(v, 16);
}
template <int N>
inline VI shl16(VI v) {
  return _mm256_slli_epi16(v, N);
}
template <int N>
inline VI shr16(VI v) {
  return _mm256_srli_epi16(v, N);
}
inline VI and8(VI v, uint8_t m) {
  return _mm256_and_si256(v, _mm256_set1_epi8(char(m)));
}
inline VI or_i(VI a, VI b) {
  return _mm256_or_si256(a, b);
}
inline VI sub_i(VI a, VI b) {
  return _mm256_sub_epi32(a, b);
}
template <int N>
inline VI shl32(VI v) {
  return _mm256_slli_epi32(v, N);
}
inline VI add_i(VI a, VI b) {
  return _mm256_add_epi32(a, b);
}
inline VI mul_i(VI a, VI b) {
  return _mm256_mullo_epi32(a, b);
}
inline VF halves_f(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline VF mul_f(VF a, VF b) {
  return _mm256_mul_ps(a, b);
}
inline VF fma_f(VF a, VF b, VF c) {
  return _mm256_fmadd_ps(a, b, c);
}
inline VF fnma_f(VF a, VF b, VF c) {
  return _mm256_fnmadd_ps(a, b, c);
}
inline VF to_f(VI a) {
  return _mm256_cvtepi32_ps(a);
}
inline VF set_f(float v) {
  return _mm256_set1_ps(v);
}
inline void store_f(float* p, VF a) {
  _mm256_storeu_ps(p, a);
}
// The half's 16 bytes of nibbles as 32 lanes' bytes: [low nibbles, high nibbles].
inline VI nibble_bytes(const uint8_t* p, int half) {
  const __m256i v =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + half / 2)));
  return and8(_mm256_srlv_epi32(v, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)), 0x0F);
}
inline VI and16(VI v, uint16_t m) {
  return _mm256_and_si256(v, _mm256_set1_epi16(short(m)));
}
// Q3_K: u[c] |= chunk c's high bit at bit 2.
inline void add_high_bits(VI* u, const uint8_t* p, int half) {
  const VI hi = shl16<2>(nibble_bytes(p, half));  // chunk 4h + c's bit at 2 + c
  u[0] = or_i(u[0], and8(hi, 4));
  u[1] = or_i(u[1], and8(shr16<1>(hi), 4));
  u[2] = or_i(u[2], and8(shr16<2>(hi), 4));
  u[3] = or_i(u[3], and8(shr16<3>(hi), 4));
}
#endif

// The two int16 sums of q over chunks c and c + 1 as one int32 (the pair
// the mins multiply).
inline int32_t sum_pair(const Acts& x, int64_t chunk) {
  return int32_t(uint32_t(uint16_t(x.s32[chunk])) | uint32_t(uint16_t(x.s32[chunk + 1])) << 16);
}

// Bits 2g and 2g + 1 of each byte moved to bit 4 (Q5_0, Q5_1 and Q5_K's
// high bits: the low and the high nibble's value of group or chunk pair g).
inline VI high_bit_lo(VI hb, int g) {
  return and8(g == 0 ? shl16<4>(hb) : g == 1 ? shl16<2>(hb) : g == 2 ? hb : shr16<2>(hb), 0x10);
}
inline VI high_bit_hi(VI hb, int g) {
  return and8(g == 0   ? shl16<3>(hb)
              : g == 1 ? shl16<1>(hb)
              : g == 2 ? shr16<1>(hb)
                       : shr16<3>(hb),
              0x10);
}

// kLanes rows of a panel (the half at byte offset `half` of each group:
// 0, or 32 for AVX2's second 8 rows) against T inputs over nb super-blocks:
// out[t * ldo + i]. Every (row, input) sum is independent of T. Q4_K, and
// Q5_K (kQ5: the qh groups first, bit c of a byte chunk c's fifth bit).
template <bool kQ5, int T>
inline void panel_dot_q45k(const uint8_t* P, int half, int64_t nb, const Acts* x, float* out,
                           int64_t ldo) {
  constexpr uint64_t kBlock = kQ5 ? kPanelBytesQ5K : kPanelBytesQ4K;
  constexpr int kV = kQ5 ? 512 : 0;  // the nibble groups, after Q5_K's 8 qh groups
  VF acc[T];
  for (int t = 0; t < T; ++t) acc[t] = zero_f();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* pb = P + uint64_t(b) * kBlock;
    VI S[T], M[T];
    for (int t = 0; t < T; ++t) S[t] = zero_i(), M[t] = zero_i();
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      VI lo[T], hi[T];
      for (int t = 0; t < T; ++t) lo[t] = zero_i(), hi[t] = zero_i();
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) {
        // Q5_K: qh group j and nibble group (0, j) side by side (panels.h).
        const int g = kQ5 && k == 0 ? 128 * j + 64 : kV + 64 * (8 * k + j);
        const VI q = load_i(pb + g + half);
        VI ql = nibbles_lo(q), qh = nibbles_hi(q);
        if constexpr (kQ5) {
          const VI hb = load_i(pb + 128 * j + half);
          ql = or_i(ql, high_bit_lo(hb, k));
          qh = or_i(qh, high_bit_hi(hb, k));
        }
        for (int t = 0; t < T; ++t) {
          const int8_t* xq = x[t].q + 256 * b + 64 * k + 4 * j;
          if constexpr (kQ5) {  // u <= 31: 8 steps would leave int16 on AVX2
            lo[t] = dot4(lo[t], ql, load32(xq));
            hi[t] = dot4(hi[t], qh, load32(xq + 32));
          } else {
            lo[t] = dot4p(lo[t], ql, load32(xq));  // 8 steps of u <= 15
            hi[t] = dot4p(hi[t], qh, load32(xq + 32));
          }
        }
      }
      const VI sl = scales_u8(pb + kV + 2048 + 32 * k + half / 4);  // chunk 2k, these rows
      const VI sh = scales_u8(pb + kV + 2048 + 32 * k + 16 + half / 4);
      const VI mn = pairs_u8(pb + kV + 2176 + 32 * k + half / 2);
      for (int t = 0; t < T; ++t) {
        const VI l = kQ5 ? lo[t] : finish(lo[t]), h = kQ5 ? hi[t] : finish(hi[t]);
        S[t] = add_i(S[t], add_i(mul_i(l, sl), mul_i(h, sh)));
        M[t] = dot2_16(M[t], mn, sum_pair(x[t], 8 * b + 2 * k));
      }
    }
    const VF d = halves_f(pb + kV + 2304 + half / 2), dm = halves_f(pb + kV + 2336 + half / 2);
    for (int t = 0; t < T; ++t) {
      const VF xd = set_f(x[t].d[b]);
      acc[t] = fnma_f(mul_f(dm, xd), to_f(M[t]), fma_f(mul_f(d, xd), to_f(S[t]), acc[t]));
    }
  }
  for (int t = 0; t < T; ++t) store_f(out + t * ldo, acc[t]);
}

// Q6_K: u = 6-bit values (0..63) of sub-blocks g of 16 with int8 scales;
// S = sum_g sc_g sum(u q), M = sum_g sc_g sum(q) (per 16), and the row's
// sum meets f32 once per super-block: acc = fma(d dx, S - 32 M, acc).
// Q6_K's scale of sub-block 2(4h + c) + part, for the lanes' rows: pair
// 4h + c, element `part` (panels.h).
inline VI q6_scale(const uint8_t* pb, int h, int c, int part, int half) {
  const VI pc = spairs_i8(pb + 3072 + 32 * (4 * h + c) + half / 2);
  return part ? hi16(pc) : lo16(pc);
}
template <int T>
inline void panel_dot_q6k(const uint8_t* P, int half, int64_t nb, const Acts* x, float* out,
                          int64_t ldo) {
  VF acc[T];
  for (int t = 0; t < T; ++t) acc[t] = zero_f();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* pb = P + uint64_t(b) * kPanelBytesQ6K;
    VI S[T], M[T];
    for (int t = 0; t < T; ++t) S[t] = zero_i(), M[t] = zero_i();
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h)
#pragma GCC unroll 2
      for (int part = 0; part < 2; ++part) {
        // Chunk c = 4h + s, sub-block `part` (values 4j .. 4j + 3 of groups
        // j): low nibbles of ql group (s = 0, 1) or high (s = 2, 3), and qh
        // bits 2s. One input reads each group once, all four chunks, in
        // address order (from memory the fastest); several inputs take one
        // chunk at a time, T accumulators live instead of 4T (4 inputs:
        // 98 -> 120 G multiply-adds/s in cache, BM_matvec_panels_n; one
        // input that way streamed 10% slower).
        if constexpr (T == 1) {
          VI a[4] = {zero_i(), zero_i(), zero_i(), zero_i()};
#pragma GCC unroll 4
          for (int j = 4 * part; j < 4 * part + 4; ++j) {
            const uint8_t* g = pb + 192 * (8 * h + j) + half;  // qh, ql (s = 0, 2), ql (s = 1, 3)
            const VI qh = load_i(g), l0 = load_i(g + 64), l1 = load_i(g + 128);
            const VI u[4] = {or_i(and8(l0, 0x0F), and8(shl16<4>(qh), 0x30)),
                             or_i(and8(l1, 0x0F), and8(shl16<2>(qh), 0x30)),
                             or_i(and8(shr16<4>(l0), 0x0F), and8(qh, 0x30)),
                             or_i(and8(shr16<4>(l1), 0x0F), and8(shr16<2>(qh), 0x30))};
            const int8_t* xq = x[0].q + 256 * b + 128 * h + 4 * j;
            for (int c = 0; c < 4; ++c) a[c] = dot4(a[c], u[c], load32(xq + 32 * c));
          }
          for (int c = 0; c < 4; ++c) S[0] = add_i(S[0], mul_i(a[c], q6_scale(pb, h, c, part, half)));
        } else {
#pragma GCC unroll 4
          for (int c = 0; c < 4; ++c) {
            VI a[T];
            for (int t = 0; t < T; ++t) a[t] = zero_i();
#pragma GCC unroll 4
            for (int j = 4 * part; j < 4 * part + 4; ++j) {
              const uint8_t* g = pb + 192 * (8 * h + j) + half;
              const VI qh = load_i(g), l = load_i(g + 64 + 64 * (c % 2));
              const VI hb = c == 0 ? shl16<4>(qh) : c == 1 ? shl16<2>(qh) : c == 2 ? qh : shr16<2>(qh);
              const VI u = or_i(and8(c < 2 ? l : shr16<4>(l), 0x0F), and8(hb, 0x30));
              for (int t = 0; t < T; ++t)
                a[t] = dot4(a[t], u, load32(x[t].q + 256 * b + 128 * h + 4 * j + 32 * c));
            }
            const VI sc = q6_scale(pb, h, c, part, half);
            for (int t = 0; t < T; ++t) S[t] = add_i(S[t], mul_i(a[t], sc));
          }
        }
      }
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      const VI pk = spairs_i8(pb + 3072 + 32 * k + half / 2);
      for (int t = 0; t < T; ++t)
        M[t] = dot2_16(M[t], pk,
                       int32_t(uint32_t(uint16_t(x[t].s16[16 * b + 2 * k])) |
                               uint32_t(uint16_t(x[t].s16[16 * b + 2 * k + 1])) << 16));
    }
    const VF d = halves_f(pb + 3328 + half / 2);
    for (int t = 0; t < T; ++t)
      acc[t] = fma_f(mul_f(d, set_f(x[t].d[b])), to_f(sub_i(S[t], shl32<5>(M[t]))), acc[t]);
  }
  for (int t = 0; t < T; ++t) store_f(out + t * ldo, acc[t]);
}

// Q2_K and Q3_K: 2-bit values, four chunks to a byte (chunk 4h + s in bits
// 2s of qs byte 32h + l), and for Q3_K a high bit from hmask (bit c of
// byte l), the value u = low | high << 2 minus 4. Sub-blocks of 16. Q2_K:
// scale and min nibbles, S = sum_g sc_g sum(u q), M = sum_g m_g sum(q),
// acc = fnma(dmin dx, M, fma(d dx, S, acc)). Q3_K: signed 6-bit scales,
// acc = fma(d dx, S - 4 M, acc) with M = sum_g sc_g sum(q).
template <bool kQ3, int T>
inline void panel_dot_k23(const uint8_t* P, int half, int64_t nb, const Acts* x, float* out,
                          int64_t ldo) {
  constexpr uint64_t kBlock = kQ3 ? kPanelBytesQ3K : kPanelBytesQ2K;
  constexpr int kGroup = kQ3 ? 96 : 64;       // bytes per (h, j): qs, then Q3_K's high-bit nibbles
  constexpr int kScales = kQ3 ? 1536 : 1024;  // scale pairs, 32 bytes per pair of sub-blocks
  VF acc[T];
  for (int t = 0; t < T; ++t) acc[t] = zero_f();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* pb = P + uint64_t(b) * kBlock;
    VI S[T], M[T];
    for (int t = 0; t < T; ++t) S[t] = zero_i(), M[t] = zero_i();
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h)
#pragma GCC unroll 2
      for (int part = 0; part < 2; ++part) {
        VI a[T][4];
        for (int t = 0; t < T; ++t)
          for (int c = 0; c < 4; ++c) a[t][c] = zero_i();
#pragma GCC unroll 4
        for (int j = 4 * part; j < 4 * part + 4; ++j) {
          const uint8_t* g = pb + kGroup * (8 * h + j);
          const VI q = load_i(g + half);
          VI u[4] = {and8(q, 3), and8(shr16<2>(q), 3), and8(shr16<4>(q), 3), and8(shr16<6>(q), 3)};
          if constexpr (kQ3) add_high_bits(u, g + 64, half);
          for (int t = 0; t < T; ++t) {
            const int8_t* xq = x[t].q + 256 * b + 128 * h + 4 * j;
            for (int c = 0; c < 4; ++c)
              a[t][c] = dot4p(a[t][c], u[c], load32(xq + 32 * c));  // 4 of u <= 7
          }
        }
        // Sub-block 2c + part of chunk c = 4h + s: pair c, element `part`.
        for (int c = 0; c < 4; ++c) {
          const uint8_t* pc = pb + kScales + 32 * (4 * h + c) + half / 2;
          const VI v = kQ3 ? spairs_i8(pc) : and16(pairs_u8(pc), 0x0F);
          const VI sc = part ? hi16(v) : lo16(v);
          for (int t = 0; t < T; ++t) S[t] = add_i(S[t], mul_i(finish(a[t][c]), sc));
        }
      }
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      const uint8_t* pk = pb + kScales + 32 * k + half / 2;
      const VI m = kQ3 ? spairs_i8(pk) : shr16<4>(pairs_u8(pk));
      for (int t = 0; t < T; ++t)
        M[t] = dot2_16(M[t], m,
                       int32_t(uint32_t(uint16_t(x[t].s16[16 * b + 2 * k])) |
                               uint32_t(uint16_t(x[t].s16[16 * b + 2 * k + 1])) << 16));
    }
    const VF d = halves_f(pb + kScales + 256 + half / 2);
    for (int t = 0; t < T; ++t) {
      const VF xd = set_f(x[t].d[b]);
      if constexpr (kQ3) {
        acc[t] = fma_f(mul_f(d, xd), to_f(sub_i(S[t], shl32<2>(M[t]))), acc[t]);
      } else {
        const VF dm = halves_f(pb + kScales + 288 + half / 2);
        acc[t] = fnma_f(mul_f(dm, xd), to_f(M[t]), fma_f(mul_f(d, xd), to_f(S[t]), acc[t]));
      }
    }
  }
  for (int t = 0; t < T; ++t) store_f(out + t * ldo, acc[t]);
}

// The 32-value formats (Q4_0, Q4_1, Q5_0, Q5_1): per block of 32 and 16
// rows, four 64-byte groups of nibbles (values 4g + p low, 16 + 4g + p high),
// Q5's high bits beside them, one byte per lane byte (bit 2g: value 4g + p,
// bit 2g + 1: 16 + 4g + p). S = sum(u q) per block; the input's scale is per
// 32 too, so each block meets f32: acc = fnma(d2, dx sum(q), fma(d dx, S,
// acc)), d2 = off d (off 8 or 16) or, for the formats with a min, -m.
template <DType kT, int T>
inline void panel_dot_small(const uint8_t* P, int half, int64_t nb, const Acts* x, float* out,
                            int64_t ldo) {
  constexpr bool kQ5 = kT == DType::Q5_0 || kT == DType::Q5_1;
  constexpr bool kMin = kT == DType::Q4_1 || kT == DType::Q5_1;
  constexpr int kQs = kQ5 ? 64 : 0, kOff = kT == DType::Q5_0 ? 16 : 8;
  constexpr uint64_t kBlock = panel_block_bytes(kT);
  VF acc[T];
  for (int t = 0; t < T; ++t) acc[t] = zero_f();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* pb = P + uint64_t(b) * kBlock;
    VI lo[T], hi[T];
    for (int t = 0; t < T; ++t) lo[t] = zero_i(), hi[t] = zero_i();
    VI hb = zero_i();
    if constexpr (kQ5) hb = load_i(pb + half);
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) {
      const VI q = load_i(pb + kQs + 64 * g + half);
      VI ul = and8(q, 0x0F), uh = and8(shr16<4>(q), 0x0F);
      if constexpr (kQ5) {
        ul = or_i(ul, high_bit_lo(hb, g));
        uh = or_i(uh, high_bit_hi(hb, g));
      }
      for (int t = 0; t < T; ++t) {
        const int8_t* xq = x[t].q + 32 * b + 4 * g;
        lo[t] = dot4p(lo[t], ul, load32(xq));  // 4 steps of u <= 31
        hi[t] = dot4p(hi[t], uh, load32(xq + 16));
      }
    }
    const VF d = halves_f(pb + kQs + 256 + half / 2);
    // what the offset or the min takes per input's dx sum(q): kOff d, or -m
    const VF d2 = kMin ? mul_f(halves_f(pb + kQs + 288 + half / 2), set_f(-1.f)) : mul_f(d, set_f(kOff));
    for (int t = 0; t < T; ++t) {
      const VI S = add_i(finish(lo[t]), finish(hi[t]));
      acc[t] = fnma_f(d2, set_f(x[t].dsum[b]), fma_f(mul_f(d, set_f(x[t].d[b])), to_f(S), acc[t]));
    }
  }
  for (int t = 0; t < T; ++t) store_f(out + t * ldo, acc[t]);
}

// Panels [p0, p1) against inputs x[0 .. n): Y[k * ldy + 16 p + i].
#if LR_PANELS_512
constexpr int kInputs = 4;  // inputs per pass over a panel
#else
constexpr int kInputs = 2;
#endif
template <DType kT>
void matvec_panels_t(const uint8_t* P, int64_t nb, const Acts* x, int64_t n, float* Y, int64_t ldy,
                     int64_t p0, int64_t p1) {
  auto dot = [&](auto tn, const uint8_t* pp, int half, const Acts* xk, float* y) {
    constexpr int T = decltype(tn)::value;
    if constexpr (kT == DType::Q6_K)
      panel_dot_q6k<T>(pp, half, nb, xk, y, ldy);
    else if constexpr (kT == DType::Q4_K)
      panel_dot_q45k<false, T>(pp, half, nb, xk, y, ldy);
    else if constexpr (kT == DType::Q5_K)
      panel_dot_q45k<true, T>(pp, half, nb, xk, y, ldy);
    else if constexpr (kT == DType::Q2_K || kT == DType::Q3_K)
      panel_dot_k23<kT == DType::Q3_K, T>(pp, half, nb, xk, y, ldy);
    else
      panel_dot_small<kT, T>(pp, half, nb, xk, y, ldy);
  };
  for (int64_t p = p0; p < p1; ++p) {
    const uint8_t* pp = P + uint64_t(p * nb) * panel_block_bytes(kT);
    for (int half = 0; half < 64; half += 4 * kLanes) {
      float* y = Y + 16 * p + half / 4;
      int64_t k = 0;
      for (; k + kInputs <= n; k += kInputs)
        dot(std::integral_constant<int, kInputs>{}, pp, half, x + k, y + k * ldy);
      if constexpr (kInputs > 2)
        for (; k + 2 <= n; k += 2)
          dot(std::integral_constant<int, 2>{}, pp, half, x + k, y + k * ldy);
      for (; k < n; ++k) dot(std::integral_constant<int, 1>{}, pp, half, x + k, y + k * ldy);
    }
  }
}

void matvec_panels(DType t, const uint8_t* P, int64_t nb, const Acts* x, int64_t n, float* Y,
                   int64_t ldy, int64_t p0, int64_t p1) {
  switch (t) {
    case DType::Q6_K:
      return matvec_panels_t<DType::Q6_K>(P, nb, x, n, Y, ldy, p0, p1);
    case DType::Q5_K:
      return matvec_panels_t<DType::Q5_K>(P, nb, x, n, Y, ldy, p0, p1);
    case DType::Q3_K:
      return matvec_panels_t<DType::Q3_K>(P, nb, x, n, Y, ldy, p0, p1);
    case DType::Q2_K:
      return matvec_panels_t<DType::Q2_K>(P, nb, x, n, Y, ldy, p0, p1);
    case DType::Q4_0:
      return matvec_panels_t<DType::Q4_0>(P, nb, x, n, Y, ldy, p0, p1);
    case DType::Q4_1:
      return matvec_panels_t<DType::Q4_1>(P, nb, x, n, Y, ldy, p0, p1);
    case DType::Q5_0:
      return matvec_panels_t<DType::Q5_0>(P, nb, x, n, Y, ldy, p0, p1);
    case DType::Q5_1:
      return matvec_panels_t<DType::Q5_1>(P, nb, x, n, Y, ldy, p0, p1);
    default:
      return matvec_panels_t<DType::Q4_K>(P, nb, x, n, Y, ldy, p0, p1);
  }
}

}  // namespace
