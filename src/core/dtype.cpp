#include "core/dtype.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/half.h"
#include "core/quants.h"

namespace lr {

namespace {

constexpr int64_t QK = 32;

uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
void store_u16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

}  // namespace

std::optional<DTypeInfo> dtype_info(uint32_t ggml_type) {
  switch (ggml_type) {
    case uint32_t(DType::F32): return DTypeInfo{"F32", 1, 4};
    case uint32_t(DType::F16): return DTypeInfo{"F16", 1, 2};
    case uint32_t(DType::BF16): return DTypeInfo{"BF16", 1, 2};
    case uint32_t(DType::Q4_0): return DTypeInfo{"Q4_0", QK, 18};
    case uint32_t(DType::Q4_1): return DTypeInfo{"Q4_1", QK, 20};
    case uint32_t(DType::Q5_0): return DTypeInfo{"Q5_0", QK, 22};
    case uint32_t(DType::Q5_1): return DTypeInfo{"Q5_1", QK, 24};
    case uint32_t(DType::Q8_0): return DTypeInfo{"Q8_0", QK, 34};
    case uint32_t(DType::Q2_K): return DTypeInfo{"Q2_K", 256, 84};
    case uint32_t(DType::Q3_K): return DTypeInfo{"Q3_K", 256, 110};
    case uint32_t(DType::Q4_K): return DTypeInfo{"Q4_K", 256, 144};
    case uint32_t(DType::Q5_K): return DTypeInfo{"Q5_K", 256, 176};
    case uint32_t(DType::Q6_K): return DTypeInfo{"Q6_K", 256, 210};
    default: return std::nullopt;
  }
}

DTypeInfo dtype_info(DType t) {
  auto info = dtype_info(uint32_t(t));
  LR_ASSERT(info.has_value());
  return *info;
}

std::string_view dtype_name(DType t) { return dtype_info(t).name; }

bool is_block_format(DType t) {
  return t != DType::F32 && t != DType::F16 && t != DType::BF16 && t != DType::Q8_0;
}

std::optional<uint64_t> row_bytes(DType t, uint64_t n) {
  DTypeInfo info = dtype_info(t);
  if (n % uint64_t(info.block_elems) != 0) return std::nullopt;
  uint64_t blocks = n / uint64_t(info.block_elems);
  uint64_t bytes;
  if (__builtin_mul_overflow(blocks, uint64_t(info.block_bytes), &bytes)) return std::nullopt;
  return bytes;
}

void dequantize(DType t, const void* src_v, float* dst, int64_t n) {
  const auto* src = static_cast<const uint8_t*>(src_v);
  switch (t) {
    case DType::F32: std::memcpy(dst, src, size_t(n) * 4); return;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(load_u16(src + 2 * i));
      return;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(load_u16(src + 2 * i));
      return;
    default: break;
  }
  quants::dequantize_blocks(t, src, dst, n);
}

void quantize(DType t, const float* x, void* dst_v, int64_t n) {
  auto* dst = static_cast<uint8_t*>(dst_v);
  switch (t) {
    case DType::F32: std::memcpy(dst, x, size_t(n) * 4); return;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) store_u16(dst + 2 * i, f32_to_f16(x[i]));
      return;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) store_u16(dst + 2 * i, f32_to_bf16(x[i]));
      return;
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K: return quants::quantize_k_blocks(t, x, dst, n);
    default: break;
  }
  LR_ASSERT(n % QK == 0);
  for (int64_t b = 0; b < n / QK; ++b) {
    const float* v = x + b * QK;
    switch (t) {
      case DType::Q8_0: {
        uint8_t* blk = dst + b * 34;
        float amax = 0;
        for (int j = 0; j < QK; ++j) amax = std::max(amax, std::fabs(v[j]));
        float d = amax / 127.f;
        float id = d != 0 ? 1.f / d : 0.f;
        store_u16(blk, f32_to_f16(d));
        for (int j = 0; j < QK; ++j) blk[2 + j] = uint8_t(int8_t(std::lround(v[j] * id)));
        break;
      }
      case DType::Q4_0: {
        uint8_t* blk = dst + b * 18;
        float amax = 0, maxv = 0;
        for (int j = 0; j < QK; ++j)
          if (std::fabs(v[j]) > amax) amax = std::fabs(v[j]), maxv = v[j];
        float d = maxv / -8.f;
        float id = d != 0 ? 1.f / d : 0.f;
        store_u16(blk, f32_to_f16(d));
        for (int j = 0; j < QK / 2; ++j) {
          int q0 = std::min(15, int(v[j] * id + 8.5f));
          int q1 = std::min(15, int(v[j + QK / 2] * id + 8.5f));
          blk[2 + j] = uint8_t(q0 | q1 << 4);
        }
        break;
      }
      case DType::Q4_1: {
        uint8_t* blk = dst + b * 20;
        float lo = v[0], hi = v[0];
        for (int j = 1; j < QK; ++j) lo = std::min(lo, v[j]), hi = std::max(hi, v[j]);
        float d = (hi - lo) / 15.f;
        float id = d != 0 ? 1.f / d : 0.f;
        store_u16(blk, f32_to_f16(d));
        store_u16(blk + 2, f32_to_f16(lo));
        for (int j = 0; j < QK / 2; ++j) {
          int q0 = std::min(15, int((v[j] - lo) * id + 0.5f));
          int q1 = std::min(15, int((v[j + QK / 2] - lo) * id + 0.5f));
          blk[4 + j] = uint8_t(q0 | q1 << 4);
        }
        break;
      }
      default: LR_ASSERT(false && "quantize: unsupported dtype");
    }
  }
}

void quantize_q8_blocks(const float* x, int8_t* q, float* scales, int64_t n) {
  for (int64_t b = 0; b * 32 < n; ++b) {
    const int64_t c0 = b * 32, c1 = std::min(n, c0 + 32);
    float amax = 0;
    for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(x[c]));
    scales[b] = amax / 127.f;
    const float inv = amax > 0 ? 127.f / amax : 0.f;
    for (int64_t c = c0; c < c1; ++c) q[c] = int8_t(std::nearbyint(x[c] * inv));
  }
}

}  // namespace lr
