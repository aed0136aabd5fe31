// Writers of the K-quant super-blocks (layouts in core/quants.h). Each
// sub-block's scale comes from its range; the integer scales are rounded up
// against the super-block's f16 base (itself rounded up), so the stored step
// still spans the sub-block's range and nothing is clipped; the values are
// then rounded to nearest against the scales as stored, each within half a
// step (Q6_K: the longer side of a group's range maps to -32, so a value
// on the other side near the same magnitude may sit a step away, at +31).
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/half.h"
#include "core/quants.h"

namespace lr::quants {

namespace {

int nearest(float v) {
  return int(std::lround(v));
}
void put_f16(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}
// The smallest f16 at or above v >= 0.
float f16_up(float v) {
  uint16_t h = f32_to_f16(v);
  if (f16_to_f32(h) < v) ++h;
  return f16_to_f32(h);
}
// ceil(v) for v >= 0, without counting float noise just above an integer.
int ceil_int(float v) {
  return int(std::ceil(v * (1 - 1e-6f)));
}

// Q4_K / Q5_K: per chunk of 32, x ~ d sc q - dmin m with q in [0, qmax],
// sc and m six-bit. The chunk's minimum is taken at or below 0 (so m >= 0).
template <int kQmax>
void quantize_q45_k(const float* x, uint8_t* blk) {
  float scale[8], minv[8];
  for (int c = 0; c < 8; ++c) {
    float lo = 0, hi = 0;  // lo <= 0 <= hi
    for (int l = 0; l < 32; ++l) lo = std::min(lo, x[32 * c + l]), hi = std::max(hi, x[32 * c + l]);
    scale[c] = (hi - lo) / kQmax;
    minv[c] = -lo;
  }
  const float max_scale = *std::max_element(scale, scale + 8),
              max_min = *std::max_element(minv, minv + 8);
  const float d = f16_up(max_scale / 63), dmin = f16_up(max_min / 63);
  uint8_t sc[8], mn[8];
  for (int c = 0; c < 8; ++c) {
    mn[c] = uint8_t(dmin > 0 ? std::clamp(ceil_int(minv[c] / dmin), 0, 63)
                             : 0);  // nothing below clipped
    // The step spans the chunk's top above the stored minimum.
    const float span = scale[c] * kQmax - minv[c] + dmin * float(mn[c]);
    sc[c] = uint8_t(d > 0 ? std::clamp(ceil_int(span / kQmax / d), 0, 63) : 0);
  }
  BlockCodes codes;
  codes.d = d;
  codes.m = dmin;
  for (int c = 0; c < 8; ++c) {
    codes.sc[c] = sc[c];
    codes.mn[c] = mn[c];
    const float step = d * float(sc[c]), m = dmin * float(mn[c]);
    for (int l = 0; l < 32; ++l)
      codes.q[32 * c + l] =
          int16_t(step > 0 ? std::clamp(nearest((x[32 * c + l] + m) / step), 0, kQmax) : 0);
  }
  pack_block(kQmax == 15 ? DType::Q4_K : DType::Q5_K, codes, blk);
}

// Q6_K: per 16 values x ~ d sc q with q in [-32, 31] and sc an int8. The
// scale of a group maps its value of largest magnitude to -32 (the longer
// side of the range), and d maps the largest scale to -128.
void quantize_q6_k(const float* x, uint8_t* blk) {
  float scale[16];
  for (int g = 0; g < 16; ++g) {
    float amax = 0, maxv = 0;
    for (int l = 0; l < 16; ++l)
      if (std::fabs(x[16 * g + l]) > amax) amax = std::fabs(x[16 * g + l]), maxv = x[16 * g + l];
    scale[g] = maxv / -32;
  }
  float max_scale = 0, amax_scale = 0;
  for (float s : scale)
    if (std::fabs(s) > amax_scale) amax_scale = std::fabs(s), max_scale = s;
  const float d = std::copysign(f16_up(amax_scale / 128), -max_scale);
  BlockCodes codes;
  codes.d = d;
  for (int g = 0; g < 16; ++g) {
    const float r = d != 0 ? scale[g] / d : 0;
    codes.sc[g] =
        int16_t(std::clamp(int(std::copysign(float(ceil_int(std::fabs(r))), r)), -128, 127));
  }
  for (int e = 0; e < 256; ++e) {
    const float step = d * float(codes.sc[e / 16]);
    codes.q[e] = int16_t(step != 0 ? std::clamp(nearest(x[e] / step), -32, 31) : 0);
  }
  pack_block(DType::Q6_K, codes, blk);
}

}  // namespace

void pack_block(DType t, const BlockCodes& c, uint8_t* blk) {
  auto in = [](int v, int lo, int hi) {
    LR_ASSERT(v >= lo && v <= hi);
    return v;
  };
  switch (t) {
    case DType::Q8_0:
      put_f16(blk, c.d);
      for (int j = 0; j < kQK; ++j) blk[2 + j] = uint8_t(int8_t(in(c.q[j], -127, 127)));
      return;
    case DType::Q4_0:
    case DType::Q5_0: {
      const bool five = t == DType::Q5_0;
      const int half = five ? 16 : 8;
      put_f16(blk, c.d);
      uint8_t* qs = blk + (five ? Q5_0::kQs : Q4_0::kQs);
      uint32_t qh = 0;
      for (int j = 0; j < kQK / 2; ++j) {
        const int lo = in(c.q[j], -half, half - 1) + half, hi = in(c.q[j + 16], -half, half - 1) + half;
        qs[j] = uint8_t((lo & 15) | (hi & 15) << 4);
        qh |= uint32_t(lo >> 4) << j | uint32_t(hi >> 4) << (j + 16);
      }
      if (five) std::memcpy(blk + Q5_0::kQh, &qh, 4);
      return;
    }
    case DType::Q4_1:
    case DType::Q5_1: {
      const bool five = t == DType::Q5_1;
      const int top = five ? 31 : 15;
      put_f16(blk, c.d);
      put_f16(blk + 2, c.m);
      uint8_t* qs = blk + (five ? Q5_1::kQs : Q4_1::kQs);
      uint32_t qh = 0;
      for (int j = 0; j < kQK / 2; ++j) {
        const int lo = in(c.q[j], 0, top), hi = in(c.q[j + 16], 0, top);
        qs[j] = uint8_t((lo & 15) | (hi & 15) << 4);
        qh |= uint32_t(lo >> 4) << j | uint32_t(hi >> 4) << (j + 16);
      }
      if (five) std::memcpy(blk + Q5_1::kQh, &qh, 4);
      return;
    }
    case DType::Q2_K:
      std::memset(blk, 0, Q2_K::kBytes);
      for (int i = 0; i < 16; ++i)
        blk[Q2_K::kScales + i] = uint8_t(in(c.sc[i], 0, 15) | in(c.mn[i], 0, 15) << 4);
      for (int e = 0; e < kQKK; ++e) {
        const int ch = e / 32, l = e % 32;
        blk[Q2_K::kQs + 32 * (ch / 4) + l] |= uint8_t(in(c.q[e], 0, 3) << 2 * (ch % 4));
      }
      put_f16(blk + Q2_K::kD, c.d);
      put_f16(blk + Q2_K::kDmin, c.m);
      return;
    case DType::Q3_K: {
      std::memset(blk, 0, Q3_K::kBytes);
      for (int e = 0; e < kQKK; ++e) {
        const int ch = e / 32, l = e % 32, u = in(c.q[e], -4, 3) + 4;
        blk[Q3_K::kQs + 32 * (ch / 4) + l] |= uint8_t((u & 3) << 2 * (ch % 4));
        if (u >= 4) blk[Q3_K::kHmask + l] |= uint8_t(1u << ch);
      }
      uint8_t* s = blk + Q3_K::kScales;  // the packing k3_scales reads
      for (int i = 0; i < 16; ++i) {
        const int v = in(c.sc[i], -32, 31) + 32;
        s[i % 8] |= uint8_t((v & 15) << (i < 8 ? 0 : 4));
        s[8 + i % 4] |= uint8_t((v >> 4) << 2 * (i / 4));
      }
      put_f16(blk + Q3_K::kD, c.d);
      return;
    }
    case DType::Q4_K:
    case DType::Q5_K: {
      const bool five = t == DType::Q5_K;
      const int top = five ? 31 : 15;
      const int d_at = five ? Q5_K::kD : Q4_K::kD, m_at = five ? Q5_K::kDmin : Q4_K::kDmin;
      uint8_t* s = blk + (five ? Q5_K::kScales : Q4_K::kScales);  // the packing k4_scales reads
      uint8_t* qs = blk + (five ? Q5_K::kQs : Q4_K::kQs);
      put_f16(blk + d_at, c.d);
      put_f16(blk + m_at, c.m);
      for (int j = 0; j < 4; ++j) {
        const int sc0 = in(c.sc[j], 0, 63), sc1 = in(c.sc[j + 4], 0, 63);
        const int mn0 = in(c.mn[j], 0, 63), mn1 = in(c.mn[j + 4], 0, 63);
        s[j] = uint8_t(sc0 | (sc1 >> 4) << 6);
        s[j + 4] = uint8_t(mn0 | (mn1 >> 4) << 6);
        s[j + 8] = uint8_t((sc1 & 15) | (mn1 & 15) << 4);
      }
      std::memset(qs, 0, 128);
      if (five) std::memset(blk + Q5_K::kQh, 0, 32);
      for (int e = 0; e < kQKK; ++e) {
        const int ch = e / 32, l = e % 32, q = in(c.q[e], 0, top);
        qs[32 * (ch / 2) + l] |= uint8_t((q & 15) << 4 * (ch % 2));
        if (five) blk[Q5_K::kQh + l] |= uint8_t((q >> 4) << ch);
      }
      return;
    }
    case DType::Q6_K: {
      std::memset(blk, 0, Q6_K::kBytes);
      for (int i = 0; i < 16; ++i)
        blk[Q6_K::kScales + i] = uint8_t(int8_t(in(c.sc[i], -128, 127)));
      for (int e = 0; e < kQKK; ++e) {
        const int ch = e / 32, l = e % 32, q = in(c.q[e], -32, 31) + 32;
        blk[Q6_K::kQl + 64 * (ch / 4) + 32 * (ch % 2) + l] |= uint8_t((q & 15) << 4 * ((ch % 4) / 2));
        blk[Q6_K::kQh + 32 * (ch / 4) + l] |= uint8_t((q >> 4) << 2 * (ch % 4));
      }
      put_f16(blk + Q6_K::kD, c.d);
      return;
    }
    default:
      LR_ASSERT(false && "pack_block: a block format");
  }
}

void quantize_k_blocks(DType t, const float* x, uint8_t* dst, int64_t n) {
  const DTypeInfo info = dtype_info(t);
  LR_ASSERT(n % kQKK == 0);
  for (int64_t b = 0; b < n / kQKK; ++b) {
    uint8_t* blk = dst + b * info.block_bytes;
    switch (t) {
      case DType::Q4_K:
        quantize_q45_k<15>(x + b * kQKK, blk);
        break;
      case DType::Q5_K:
        quantize_q45_k<31>(x + b * kQKK, blk);
        break;
      case DType::Q6_K:
        quantize_q6_k(x + b * kQKK, blk);
        break;
      default:
        LR_ASSERT(false && "quantize_k_blocks: Q4_K, Q5_K or Q6_K");
    }
  }
}

}  // namespace lr::quants
