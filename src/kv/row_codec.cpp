#include "kv/row_codec.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/half.h"

namespace lr::kv {

namespace {
constexpr int kMaxRow = 512;
}  // namespace

uint64_t row_bytes(DType t, int d) {
  const auto b = lr::row_bytes(t, uint64_t(d));
  LR_ASSERT(b.has_value());  // KeyCacheConfig::validate checked d's blocks
  return *b;
}

void encode_row(const RowFormat& f, const float* x, int d, uint8_t* dst) {
  LR_ASSERT(d > 0 && d <= kMaxRow);
  float r[kMaxRow];
  if (f.rot > 0) {
    std::copy_n(x, d, r);
    hadamard(r, d, f.rot);
    x = r;
  }
  quantize(f.type, x, dst, d);
}

void decode_row(DType t, const uint8_t* src, int d, float* out) {
  if (t == DType::F16)  // the vectorized conversion (the same values)
    return f16_to_f32_row(reinterpret_cast<const uint16_t*>(src), out, d);
  dequantize(t, src, out, d);
}

void reconstruct_row(const RowFormat& f, const uint8_t* src, int d, float* out) {
  decode_row(f.type, src, d, out);
  if (f.rot > 0) hadamard(out, d, f.rot);
}

void hadamard(float* x, int d, int n) {
  LR_ASSERT(n > 0 && (n & (n - 1)) == 0 && d % n == 0);
  const float norm = 1.f / std::sqrt(float(n));
  for (int b = 0; b < d; b += n) {
    float* y = x + b;
    for (int h = 1; h < n; h *= 2)  // butterflies of span h: (a, c) -> (a + c, a - c)
      for (int i = 0; i < n; i += 2 * h)
        for (int j = i; j < i + h; ++j) {
          const float a = y[j], c = y[j + h];
          y[j] = a + c;
          y[j + h] = a - c;
        }
    for (int i = 0; i < n; ++i) y[i] *= norm;
  }
}

int key_rotation(int head_dim) {
  if (head_dim <= 0 || head_dim % 32 != 0) return 0;
  int n = 32;
  while (head_dim % (2 * n) == 0) n *= 2;
  return n;
}

int value_rotation(int head_dim) {
  return head_dim <= 0 || head_dim % 32 != 0 ? 0 : head_dim % 64 == 0 ? 64 : 32;
}

}  // namespace lr::kv
