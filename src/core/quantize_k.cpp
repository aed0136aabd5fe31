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
template <class L, int kQmax>
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
  put_f16(blk + L::kD, d);
  put_f16(blk + L::kDmin, dmin);
  uint8_t* s = blk + L::kScales;  // the packing k4_scales reads
  for (int j = 0; j < 4; ++j) {
    s[j] = uint8_t(sc[j] | (sc[j + 4] >> 4) << 6);
    s[j + 4] = uint8_t(mn[j] | (mn[j + 4] >> 4) << 6);
    s[j + 8] = uint8_t((sc[j + 4] & 15) | (mn[j + 4] & 15) << 4);
  }
  std::memset(blk + L::kQs, 0, 128);
  if constexpr (kQmax == 31) std::memset(blk + Q5_K::kQh, 0, 32);
  for (int c = 0; c < 8; ++c) {
    const float step = d * float(sc[c]), m = dmin * float(mn[c]);
    for (int l = 0; l < 32; ++l) {
      const int q = step > 0 ? std::clamp(nearest((x[32 * c + l] + m) / step), 0, kQmax) : 0;
      blk[L::kQs + 32 * (c / 2) + l] |= uint8_t((q & 15) << 4 * (c % 2));
      if constexpr (kQmax == 31) blk[Q5_K::kQh + l] |= uint8_t((q >> 4) << c);
    }
  }
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
  auto* sc = reinterpret_cast<int8_t*>(blk + Q6_K::kScales);
  for (int g = 0; g < 16; ++g) {
    const float r = d != 0 ? scale[g] / d : 0;
    sc[g] = int8_t(std::clamp(int(std::copysign(float(ceil_int(std::fabs(r))), r)), -128, 127));
  }
  put_f16(blk + Q6_K::kD, d);
  std::memset(blk + Q6_K::kQl, 0, 128 + 64);
  for (int e = 0; e < 256; ++e) {
    const float step = d * float(sc[e / 16]);
    const int q = (step != 0 ? std::clamp(nearest(x[e] / step), -32, 31) : 0) + 32;
    const int c = e / 32, l = e % 32;
    blk[Q6_K::kQl + 64 * (c / 4) + 32 * (c % 2) + l] |= uint8_t((q & 15) << 4 * ((c % 4) / 2));
    blk[Q6_K::kQh + 32 * (c / 4) + l] |= uint8_t((q >> 4) << 2 * (c % 4));
  }
}

}  // namespace

void quantize_k_blocks(DType t, const float* x, uint8_t* dst, int64_t n) {
  const DTypeInfo info = dtype_info(t);
  LR_ASSERT(n % kQKK == 0);
  for (int64_t b = 0; b < n / kQKK; ++b) {
    uint8_t* blk = dst + b * info.block_bytes;
    switch (t) {
      case DType::Q4_K:
        quantize_q45_k<Q4_K, 15>(x + b * kQKK, blk);
        break;
      case DType::Q5_K:
        quantize_q45_k<Q5_K, 31>(x + b * kQKK, blk);
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
