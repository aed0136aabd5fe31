// Random rows of a GGUF block format for kernel tests: random bits with
// every f16 scale field set to a small normal value, so the values are finite.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/half.h"

namespace lr::test {

// Every GGUF block format the CPU kernels compute in their blocks.
inline constexpr DType kBlockFormats[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q2_K,
                                          DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K};

// Byte offsets of each format's f16 fields (the rest of a block is random bits).
inline std::vector<int> f16_fields(DType t) {
  switch (t) {
    case DType::Q4_0:
    case DType::Q5_0:
      return {0};
    case DType::Q4_1:
    case DType::Q5_1:
    case DType::Q4_K:
    case DType::Q5_K:
      return {0, 2};
    case DType::Q2_K:
      return {80, 82};
    case DType::Q3_K:
      return {108};
    case DType::Q6_K:
      return {208};
    default:
      return {};
  }
}

inline std::vector<uint8_t> random_rows(DType t, int64_t rows, int64_t cols, uint32_t seed) {
  const DTypeInfo info = dtype_info(t);
  const int64_t nb = rows * cols / info.block_elems;
  std::mt19937 rng(seed);
  std::vector<uint8_t> b(size_t(nb * info.block_bytes));
  for (auto& x : b) x = uint8_t(rng());
  std::normal_distribution<float> n(0.f, 0.02f);
  for (int64_t i = 0; i < nb; ++i)
    for (int off : f16_fields(t)) {
      const uint16_t h = f32_to_f16(n(rng));
      std::memcpy(&b[size_t(i * info.block_bytes + off)], &h, 2);
    }
  return b;
}

// Normal inputs for the panel kernels, with an all-zero super-block
// (values 256..511: its scale is 0).
inline std::vector<float> random_x(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = d(rng);
  for (int64_t c = 256; c < 512 && c < n; ++c) x[size_t(c)] = 0;
  return x;
}

// A float's bits, for comparisons that tell -0 from 0.
inline uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Rows [r0, r1) of W (rows of cols values of block format t) with every bit
// set but the f16 scales d (and dmin, m): the largest sums a block gives.
inline void saturate_rows(DType t, std::vector<uint8_t>& W, int64_t cols, int64_t r0, int64_t r1) {
  const int bytes = int(dtype_info(t).block_bytes);
  const int64_t per_row = cols / int64_t(dtype_info(t).block_elems);
  for (int64_t b = per_row * r0; b < per_row * r1; ++b) {
    uint8_t* blk = &W[size_t(b * bytes)];
    if (t == DType::Q4_K || t == DType::Q5_K) {
      std::memset(blk + 4, 0xff, size_t(bytes - 4));
    } else if (t == DType::Q6_K) {
      std::memset(blk, 0xff, 192);
      std::memset(blk + 192, 0x80, 16);
    } else if (t == DType::Q2_K || t == DType::Q3_K) {
      std::memset(blk, 0xff, t == DType::Q2_K ? 80 : 108);  // values and scales, not d
    } else {
      const int d = t == DType::Q4_1 || t == DType::Q5_1 ? 4 : 2;  // after d (and m)
      std::memset(blk + d, 0xff, size_t(bytes - d));
    }
  }
}

}  // namespace lr::test
