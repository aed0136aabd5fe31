// The GGUF block formats' layouts: byte offsets inside a block and the packed
// sub-block scales of the K-quants. Shared by the scalar dequantizer
// (quants.cpp, tested bit-exactly against the `gguf` Python package) and the
// CPU kernels, so a layout is written down once.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/dtype.h"

namespace lr::quants {

inline constexpr int kQK = 32;     // elements of a Q4_0 .. Q8_0 block
inline constexpr int kQKK = 256;   // elements of a K-quant super-block


// Q4_0  {f16 d; u8 qs[16]}                      18 bytes
// Q4_1  {f16 d, m; u8 qs[16]}                   20 bytes
// Q5_0  {f16 d; u32 qh; u8 qs[16]}              22 bytes
// Q5_1  {f16 d, m; u32 qh; u8 qs[16]}           24 bytes
// Q8_0  {f16 d; i8 qs[32]}                      34 bytes
// Element j < 16 is the low nibble of qs[j], j >= 16 the high nibble of
// qs[j - 16]; Q5 adds bit j of qh as bit 4.
struct Q4_0 { static constexpr int kQs = 2, kBytes = 18; };
struct Q4_1 { static constexpr int kQs = 4, kBytes = 20; };
struct Q5_0 { static constexpr int kQh = 2, kQs = 6, kBytes = 22; };
struct Q5_1 { static constexpr int kQh = 4, kQs = 8, kBytes = 24; };

// K-quants, 256 elements as 8 chunks of 32 (element e is in chunk e / 32;
// scales per 16 are indexed by e / 16, per 32 by e / 32):
// Q2_K {u8 scales[16]; u8 qs[64]; f16 d, dmin}            84 bytes
//   q = (qs[32 (c / 4) + l] >> 2 (c % 4)) & 3; x = d (sc & 15) q - dmin (sc >> 4)
// Q3_K {u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d}   110 bytes
//   q = (qs[32 (c / 4) + l] >> 2 (c % 4)) & 3, minus 4 unless bit c of hmask[l]; x = d (sc - 32) q
// Q4_K {f16 d, dmin; u8 scales[12]; u8 qs[128]}          144 bytes
//   q = (qs[32 (c / 2) + l] >> 4 (c % 2)) & 15; x = d sc q - dmin m
// Q5_K {f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}  176 bytes
//   Q4_K's nibble plus bit c of qh[l] as bit 4
// Q6_K {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}     210 bytes
//   q = ((ql[64 (c / 4) + 32 (c % 2) + l] >> 4 ((c % 4) / 2)) & 15
//        | ((qh[32 (c / 4) + l] >> 2 (c % 4)) & 3) << 4) - 32; x = d sc q
struct Q2_K { static constexpr int kScales = 0, kQs = 16, kD = 80, kDmin = 82, kBytes = 84; };
struct Q3_K { static constexpr int kHmask = 0, kQs = 32, kScales = 96, kD = 108, kBytes = 110; };
struct Q4_K { static constexpr int kD = 0, kDmin = 2, kScales = 4, kQs = 16, kBytes = 144; };
struct Q5_K { static constexpr int kD = 0, kDmin = 2, kScales = 4, kQh = 16, kQs = 48, kBytes = 176; };
struct Q6_K { static constexpr int kQl = 0, kQh = 128, kScales = 192, kD = 208, kBytes = 210; };

// Q4_K / Q5_K: the 8 six-bit scales and mins packed in 12 bytes. Bytes 0-3
// hold scales 0-3 (low 6 bits) and the top 2 bits of scales 4-7, bytes 4-7
// the same for the mins, bytes 8-11 the low 4 bits of scale (low nibble)
// and min (high nibble) 4-7.
inline void k4_scales(const uint8_t* s, uint8_t sc[8], uint8_t mn[8]) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = s[j] & 63;
    mn[j] = s[j + 4] & 63;
    sc[j + 4] = uint8_t((s[j + 8] & 15) | ((s[j] >> 2) & 0x30));
    mn[j + 4] = uint8_t((s[j + 8] >> 4) | ((s[j + 4] >> 2) & 0x30));
  }
}

// Q3_K: 16 six-bit scales (stored + 32) in 12 bytes. Scale i has its low 4
// bits in byte i % 8 (low nibble for i < 8, high nibble after) and its top 2
// bits in byte 8 + i % 4 at bit 2 (i / 4). Returns them minus 32.
inline void k3_scales(const uint8_t* s, int8_t sc[16]) {
  for (int i = 0; i < 16; ++i) {
    const int lo = (s[i % 8] >> (i < 8 ? 0 : 4)) & 15;
    const int hi = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
    sc[i] = int8_t((lo | hi << 4) - 32);
  }
}

// Decodes n elements (whole blocks) of block format t (or Q8_0 as GGUF stores it).
void dequantize_blocks(DType t, const uint8_t* src, float* dst, int64_t n);

// The integers one block stores, before they are packed into its bytes.
// Per format (e = element, x = the decoded value):
//   Q8_0  x = d q, q in [-127, 127]      Q4_0 / Q5_0  x = d q, q in [-8, 7] / [-16, 15]
//   Q4_1 / Q5_1  x = d q + m, q in [0, 15] / [0, 31]
//   Q2_K  x = d sc[e/16] q - m mn[e/16], q in [0, 3], sc, mn in [0, 15]
//   Q3_K  x = d sc[e/16] q, q in [-4, 3], sc in [-32, 31]
//   Q4_K / Q5_K  x = d sc[e/32] q - m mn[e/32], q in [0, 15] / [0, 31], sc, mn in [0, 63]
//   Q6_K  x = d sc[e/16] q, q in [-32, 31], sc in [-128, 127]
// d and m are stored as f16 (pack_block rounds them).
struct BlockCodes {
  float d = 0, m = 0;
  int16_t sc[16] = {}, mn[16] = {};
  int16_t q[kQKK] = {};
};
// Writes one block of format t (any of the above) from its codes; codes out
// of their format's range are a broken invariant (assert).
void pack_block(DType t, const BlockCodes& c, uint8_t* blk);

// Encodes n elements (whole super-blocks) as Q4_K, Q5_K or Q6_K
// (quantize_k.cpp): round to nearest, every value within half a step of its
// stored sub-block scale.
void quantize_k_blocks(DType t, const float* x, uint8_t* dst, int64_t n);

}  // namespace lr::quants
