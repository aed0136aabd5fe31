// Internal AVX2 helpers shared by the CPU kernels.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/half.h"

// Code between these is compiled for AVX-512 F/BW/VL + VNNI, and runs only
// when kernel_isa() (core/cpu_features.h) is Isa::Avx512Vnni. The *_isa.h
// bodies are included once outside and once inside them.
#if defined(__clang__)
#define LR_BEGIN_AVX512VNNI                                                                                  \
  _Pragma("clang attribute push(__attribute__((target(\"avx512f,avx512bw,avx512vl,avx512vnni\"))), apply_to = function)")
#define LR_END_AVX512VNNI _Pragma("clang attribute pop")
#else
#define LR_BEGIN_AVX512VNNI \
  _Pragma("GCC push_options") _Pragma("GCC target(\"avx512f,avx512bw,avx512vl,avx512vnni\")")
#define LR_END_AVX512VNNI _Pragma("GCC pop_options")
#endif

namespace lr::cpu::detail {

// Sum of the 8 lanes.
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Maximum of the 8 lanes.
inline float hmax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// The sums of a, b, c and d's 8 lanes, each ((v0 + v1) + (v2 + v3)) +
// ((v4 + v5) + (v6 + v7)) (not hsum's order).
inline __m128 hsum4(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 ab = _mm256_hadd_ps(a, b);   // a01 a23 b01 b23 | a45 a67 b45 b67
  const __m256 cd = _mm256_hadd_ps(c, d);
  const __m256 abcd = _mm256_hadd_ps(ab, cd);  // a0-3 b0-3 c0-3 d0-3 | a4-7 ...
  return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

// One row's sum in hsum4's order: a row kernel that takes rows four at a
// time gives a row left over the same bits, so a row's product does not
// depend on where the range it lies in starts.
inline float hsum_as4(__m256 a) {
  const __m256 z = _mm256_setzero_ps();
  return _mm_cvtss_f32(hsum4(a, z, z, z));
}

// 8 bf16 values -> 8 f32 (exact: bf16 is the top half of an f32).
inline __m256 load_bf16x8(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// 8 IEEE binary16 values -> 8 f32 (exact, subnormals included; F16C).
inline __m256 load_f16x8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Mask whose first k lanes (0 <= k <= 8) are set, for maskload / maskstore.
inline __m256i tail_mask(int64_t k) {
  alignas(32) static const int32_t bits[16] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                               0,  0,  0,  0,  0,  0,  0,  0};
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bits + 8 - k));
}

// The first k (0 <= k < 8) 16-bit values at p, zero-padded to 8, through a
// stack buffer (AVX2 has no 16-bit masked load). Reads only p[0..k).
inline __m128i load_u16_partial(const uint16_t* p, int64_t k) {
  alignas(16) uint16_t buf[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::memcpy(buf, p, size_t(k) * sizeof(uint16_t));
  return _mm_load_si128(reinterpret_cast<const __m128i*>(buf));
}

// Weight formats. Kernels written once against these traits differ only in
// how weights are read as f32:
//   load8(p)           8 weights p[0..8) as f32
//   load_partial(p, k) p[0..k) as f32 (k < 8), the other lanes 0; reads
//                      nothing past p + k
//   scalar(v)          one weight as f32
struct F32Weights {
  using T = float;
  static __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
  static __m256 load_partial(const float* p, int64_t k) {
    return _mm256_maskload_ps(p, tail_mask(k));
  }
  static float scalar(float v) { return v; }
};

struct Bf16Weights {
  using T = uint16_t;
  static __m256 load8(const uint16_t* p) { return load_bf16x8(p); }
  static __m256 load_partial(const uint16_t* p, int64_t k) {
    const __m256i u = _mm256_cvtepu16_epi32(load_u16_partial(p, k));
    return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
  }
  static float scalar(uint16_t v) { return bf16_to_f32(v); }
};

struct F16Weights {
  using T = uint16_t;
  static __m256 load8(const uint16_t* p) { return load_f16x8(p); }
  static __m256 load_partial(const uint16_t* p, int64_t k) {
    return _mm256_cvtph_ps(load_u16_partial(p, k));
  }
  static float scalar(uint16_t v) { return f16_to_f32(v); }
};

// A 256-bit load of 16 bf16 holds, in 32-bit lane i, elements 2i (low half)
// and 2i+1 (high half). These give them as f32 without any shuffle.
inline __m256 bf16_even(__m256i w) { return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)); }
inline __m256 bf16_odd(__m256i w) {
  return _mm256_castsi256_ps(_mm256_and_si256(w, _mm256_set1_epi32(int32_t(0xffff0000u))));
}
inline __m256i load_bf16x16_raw(const uint16_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// Reorders x[0..16) into {x0, x2, ..., x14, x1, x3, ..., x15} (the order
// matching bf16_even / bf16_odd).
inline void deinterleave16(const float* x, float* out) {
  const __m256 a = _mm256_loadu_ps(x), b = _mm256_loadu_ps(x + 8);
  const __m256 ev = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));  // a0 a2 b0 b2 | a4 a6 b4 b6
  const __m256 od = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1));
  _mm256_storeu_ps(out, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(ev), 0xD8)));
  _mm256_storeu_ps(out + 8, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(od), 0xD8)));
}

// Deinterleaves the first cmain (a multiple of 16) elements of each of n rows
// of X (row stride ldx) into out (row stride cmain).
inline void deinterleave_rows(const float* X, int64_t ldx, int64_t n, int64_t cmain, float* out) {
  for (int64_t t = 0; t < n; ++t)
    for (int64_t c = 0; c < cmain; c += 16) deinterleave16(X + t * ldx + c, out + t * cmain + c);
}

// 8x8 transpose of r[0..8) in place.
inline void transpose8(__m256 r[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
  r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
  r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
  r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
  r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

// exp(x), ~1-2 ulp for x in [-87.3, 88.3]; below that range it returns
// exp(-87.3) (about 1e-38) instead of a denormal or 0, above it +inf.
// x = n ln2 + r with |r| <= ln2/2, exp(r) by a degree-7 polynomial, 2^n built
// in the exponent field.
inline __m256 exp_ps(__m256 x) {
  const __m256 hi = _mm256_set1_ps(88.3f);
  const __m256 overflow = _mm256_cmp_ps(x, hi, _CMP_GT_OQ);
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), hi);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // r = x - n ln2, with ln2 split into a part exact in few bits and a correction.
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  const __m256 y = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  return _mm256_blendv_ps(y, _mm256_set1_ps(__builtin_inff()), overflow);
}

// Rows the prompt kernels of the stored formats (matmul_blocks, matmul_q8_0)
// decode to f32 per matmul_f32 call: the two 16-row panels of its AVX-512
// tile.
constexpr int64_t kDecodedRows = 32;

// Blocks of 32 in a row of n (the last may be shorter).
inline int64_t q8_blocks_of(int64_t n) { return (n + 31) / 32; }

// Per-thread scratch buffer of at least n floats, 64-byte aligned (contents
// unspecified). `slot` selects one of a few independent buffers: 0 and 1 are
// used by the matvec and matmul kernels, 2 by matmul_q8_0 and matmul_blocks
// around matmul_f32,
// 3-5 by the block-format kernels (the quantized input).
inline float* scratch(int slot, int64_t n) {
  thread_local std::vector<float> bufs[6];
  std::vector<float>& b = bufs[slot];
  if (int64_t(b.size()) < n + 16) b.resize(size_t(n) + 16);
  const uintptr_t p = reinterpret_cast<uintptr_t>(b.data());
  return reinterpret_cast<float*>((p + 63) & ~uintptr_t(63));
}

}  // namespace lr::cpu::detail
