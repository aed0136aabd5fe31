// How the attention tiles (attention_kernels.cpp) read a stored key or value
// row, 8 elements at a time in 256-bit registers: f32 rows as stored, f16
// rows and q8_0/q4_0 blocks converted exactly, so every element type gives
// the bits of f32 rows holding the same values. (AVX2 inline functions of
// the kernels' translation unit: internal linkage, kernels_blocks_isa.h's
// reasons.)
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "backend/cpu/kernels/attention_kernels.h"
#include "backend/cpu/kernels/kernels_simd.h"

namespace lr::cpu {
namespace {

// Elements [c, c + 8) of a row as f32.
inline __m256 row8(const float* row, int c) {
  return _mm256_loadu_ps(row + c);
}
inline __m256 row8(const uint16_t* row, int c) {
  return detail::load_f16x8(row + c);
}
// q8_0 and q4_0 rows: the codes widened, times the block's scale (exact).
inline __m256 scale_of(const void* block) {
  uint16_t d;
  std::memcpy(&d, block, 2);
  return _mm256_set1_ps(_cvtsh_ss(d));
}
// The codes of elements [c, c + 8) as f32 (q8_0: q; q4_0: q - 8), unscaled.
inline __m256 codes8(const Q8Block* row, int c) {
  const Q8Block* b = row + c / 32;
  const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b->qs + c % 32));
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
}
// The 4-bit codes in bytes loaded from a q4_0 block's qs at (o & 15), for
// values from o on: the low nibbles (values 0-15) or the high ones (16-31).
inline __m128i q4_codes(__m128i bytes, int o) {
  if (o >= 16) bytes = _mm_srli_epi16(bytes, 4);
  return _mm_and_si128(bytes, _mm_set1_epi8(15));
}
inline __m256 codes8(const Q4Block* row, int c) {
  const int o = c % 32;
  const __m128i q =
      q4_codes(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(row[c / 32].qs + (o & 15))), o);
  return _mm256_sub_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(q)), _mm256_set1_ps(8.f));
}
template <typename B>
inline __m256 row8(const B* row, int c) {
  return _mm256_mul_ps(codes8(row, c), scale_of(row + c / 32));
}
// row8 with the scale of the block holding c given (f32 and f16 rows have
// none): scales taken once a block, not once every 8 elements.
inline __m256 block_scale(const float*, int) {
  return _mm256_setzero_ps();
}
inline __m256 block_scale(const uint16_t*, int) {
  return _mm256_setzero_ps();
}
template <typename B>
inline __m256 block_scale(const B* row, int c) {
  return scale_of(row + c / 32);
}
inline __m256 row8(const float* row, int c, __m256) {
  return row8(row, c);
}
inline __m256 row8(const uint16_t* row, int c, __m256) {
  return row8(row, c);
}
template <typename B>
inline __m256 row8(const B* row, int c, __m256 scale) {
  return _mm256_mul_ps(codes8(row, c), scale);
}

}  // namespace
}  // namespace lr::cpu
