// Scalar dequantizers of the GGUF block formats (layouts in quants.h). Each
// computes what gguf.quants.dequantize computes, with the same f32
// operations in the same order (this file is built with -ffp-contract=off,
// so no multiply-add is fused), which makes them bit-exact with it.
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "core/half.h"
#include "core/quants.h"

namespace lr::quants {

namespace {

float f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// Element j of a 32-block's nibbles: low nibble of qs[j] for j < 16, high of qs[j - 16].
int nibble(const uint8_t* qs, int j) { return j < 16 ? qs[j] & 15 : qs[j - 16] >> 4; }

void q4_0(const uint8_t* b, float* y) {
  const float d = f16_at(b);
  for (int j = 0; j < kQK; ++j) y[j] = d * float(nibble(b + Q4_0::kQs, j) - 8);
}
void q4_1(const uint8_t* b, float* y) {
  const float d = f16_at(b), m = f16_at(b + 2);
  for (int j = 0; j < kQK; ++j) y[j] = d * float(nibble(b + Q4_1::kQs, j)) + m;
}
int q5(const uint8_t* b, int qh_at, int qs_at, int j) {
  uint32_t qh;
  std::memcpy(&qh, b + qh_at, 4);
  return nibble(b + qs_at, j) | int((qh >> j) & 1) << 4;
}
void q5_0(const uint8_t* b, float* y) {
  const float d = f16_at(b);
  for (int j = 0; j < kQK; ++j) y[j] = d * float(q5(b, Q5_0::kQh, Q5_0::kQs, j) - 16);
}
void q5_1(const uint8_t* b, float* y) {
  const float d = f16_at(b), m = f16_at(b + 2);
  for (int j = 0; j < kQK; ++j) y[j] = d * float(q5(b, Q5_1::kQh, Q5_1::kQs, j)) + m;
}
void q8_0(const uint8_t* b, float* y) {
  const float d = f16_at(b);
  for (int j = 0; j < kQK; ++j) y[j] = float(int8_t(b[2 + j])) * d;
}

void q2_k(const uint8_t* b, float* y) {
  const float d = f16_at(b + Q2_K::kD), dmin = f16_at(b + Q2_K::kDmin);
  for (int e = 0; e < kQKK; ++e) {
    const int c = e / 32, l = e % 32;
    const uint8_t sc = b[Q2_K::kScales + e / 16];
    const float dl = d * float(sc & 15), ml = dmin * float(sc >> 4);
    const int q = (b[Q2_K::kQs + 32 * (c / 4) + l] >> (2 * (c % 4))) & 3;
    y[e] = dl * float(q) - ml;
  }
}
void q3_k(const uint8_t* b, float* y) {
  const float d = f16_at(b + Q3_K::kD);
  int8_t sc[16];
  k3_scales(b + Q3_K::kScales, sc);
  for (int e = 0; e < kQKK; ++e) {
    const int c = e / 32, l = e % 32;
    const int lo = (b[Q3_K::kQs + 32 * (c / 4) + l] >> (2 * (c % 4))) & 3;
    const int high = (b[Q3_K::kHmask + l] >> c) & 1;
    y[e] = (d * float(sc[e / 16])) * float(lo - (high ? 0 : 4));
  }
}
template <class L, bool kFive>
void q45_k(const uint8_t* b, float* y) {
  const float d = f16_at(b + L::kD), dmin = f16_at(b + L::kDmin);
  uint8_t sc[8], mn[8];
  k4_scales(b + L::kScales, sc, mn);
  for (int e = 0; e < kQKK; ++e) {
    const int c = e / 32, l = e % 32;
    int q = (b[L::kQs + 32 * (c / 2) + l] >> (4 * (c % 2))) & 15;
    if constexpr (kFive) q |= ((b[Q5_K::kQh + l] >> c) & 1) << 4;
    y[e] = (d * float(sc[c])) * float(q) - dmin * float(mn[c]);
  }
}
void q6_k(const uint8_t* b, float* y) {
  const float d = f16_at(b + Q6_K::kD);
  for (int e = 0; e < kQKK; ++e) {
    const int c = e / 32, l = e % 32;
    const int lo = (b[Q6_K::kQl + 64 * (c / 4) + 32 * (c % 2) + l] >> (4 * ((c % 4) / 2))) & 15;
    const int hi = (b[Q6_K::kQh + 32 * (c / 4) + l] >> (2 * (c % 4))) & 3;
    const float dl = d * float(int8_t(b[Q6_K::kScales + e / 16]));
    y[e] = dl * float((lo | hi << 4) - 32);
  }
}

}  // namespace

// Decodes n elements (whole blocks) of block format t.
void dequantize_blocks(DType t, const uint8_t* src, float* dst, int64_t n) {
  const DTypeInfo info = dtype_info(t);
  LR_ASSERT(n % info.block_elems == 0);
  void (*one)(const uint8_t*, float*) = nullptr;
  switch (t) {
    case DType::Q4_0: one = q4_0; break;
    case DType::Q4_1: one = q4_1; break;
    case DType::Q5_0: one = q5_0; break;
    case DType::Q5_1: one = q5_1; break;
    case DType::Q8_0: one = q8_0; break;
    case DType::Q2_K: one = q2_k; break;
    case DType::Q3_K: one = q3_k; break;
    case DType::Q4_K: one = q45_k<Q4_K, false>; break;
    case DType::Q5_K: one = q45_k<Q5_K, true>; break;
    case DType::Q6_K: one = q6_k; break;
    default: LR_ASSERT(false && "dequantize_blocks: not a block format");
  }
  for (int64_t b = 0; b < n / info.block_elems; ++b)
    one(src + b * info.block_bytes, dst + b * info.block_elems);
}

}  // namespace lr::quants
