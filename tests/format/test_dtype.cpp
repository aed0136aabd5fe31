// lr::dtype_info / row_bytes / quantize / dequantize (core/dtype.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/half.h"

namespace lr {
namespace {

uint16_t u16_at(const std::vector<uint8_t>& b, size_t at) {
  uint16_t v;
  std::memcpy(&v, b.data() + at, 2);
  return v;
}

std::vector<uint8_t> q(DType t, const std::vector<float>& x) {
  std::vector<uint8_t> out(*row_bytes(t, x.size()));
  quantize(t, x.data(), out.data(), int64_t(x.size()));
  return out;
}

std::vector<float> dq(DType t, const std::vector<uint8_t>& b, size_t n) {
  std::vector<float> y(n);
  dequantize(t, b.data(), y.data(), int64_t(n));
  return y;
}

TEST(DType, Info) {
  EXPECT_EQ(dtype_info(uint32_t(0))->name, "F32");
  EXPECT_EQ(dtype_info(uint32_t(8))->block_bytes, 34);
  EXPECT_EQ(dtype_info(uint32_t(2))->block_bytes, 18);
  EXPECT_EQ(dtype_info(uint32_t(3))->block_bytes, 20);
  EXPECT_EQ(dtype_info(uint32_t(30))->name, "BF16");
  EXPECT_FALSE(dtype_info(uint32_t(16)).has_value());  // IQ2_XXS: not read by lowrank
  EXPECT_FALSE(dtype_info(uint32_t(99)).has_value());
  EXPECT_EQ(dtype_name(DType::Q4_1), "Q4_1");
}

TEST(DType, RowBytes) {
  EXPECT_EQ(row_bytes(DType::F32, 7), 28u);
  EXPECT_EQ(row_bytes(DType::F16, 3), 6u);
  EXPECT_EQ(row_bytes(DType::BF16, 5), 10u);
  EXPECT_EQ(row_bytes(DType::Q8_0, 64), 68u);
  EXPECT_EQ(row_bytes(DType::Q4_0, 4096), 128u * 18);
  EXPECT_EQ(row_bytes(DType::Q4_1, 32), 20u);
  EXPECT_FALSE(row_bytes(DType::Q8_0, 33).has_value());
  EXPECT_FALSE(row_bytes(DType::Q4_0, 16).has_value());
  EXPECT_FALSE(row_bytes(DType::F32, uint64_t(1) << 63).has_value());  // overflow
}

TEST(DType, FloatFormatsAreExactOnRepresentableValues) {
  std::vector<float> x = {0.f, -0.f, 1.f, -2.5f, 65504.f, 0.000061035156f, 1000.5f, INFINITY};
  EXPECT_EQ(dq(DType::F32, q(DType::F32, x), x.size()), x);
  EXPECT_EQ(dq(DType::F16, q(DType::F16, x), x.size()), x);
  std::vector<float> b = {0.f, 1.f, -2.5f, 3.0e38f, 1.5f, -0.f, 1.0e-38f, -INFINITY};
  auto bb = dq(DType::BF16, q(DType::BF16, b), b.size());
  EXPECT_EQ(bb[7], -INFINITY);
  for (size_t k = 0; k < 7; ++k)
    EXPECT_NEAR(bb[k], b[k], std::fabs(b[k]) / 128) << k;  // 8 significant bits
  EXPECT_EQ(bb[1], 1.f);
  EXPECT_EQ(bb[2], -2.5f);
  // F16 bits of a few known values.
  auto h = q(DType::F16, {1.f, -2.f, 0.5f, 65504.f});
  EXPECT_EQ(u16_at(h, 0), 0x3c00);
  EXPECT_EQ(u16_at(h, 2), 0xc000);
  EXPECT_EQ(u16_at(h, 4), 0x3800);
  EXPECT_EQ(u16_at(h, 6), 0x7bff);
  auto bf = q(DType::BF16, {1.f, -2.f});
  EXPECT_EQ(u16_at(bf, 0), 0x3f80);
  EXPECT_EQ(u16_at(bf, 2), 0xc000);
}

// The row widening (F16C, 8 at a time) against the scalar conversion, for
// every one of the 65536 bit patterns (NaNs as NaNs), at an odd length so the
// tail runs too.
TEST(DType, F16RowWideningIsExactForEveryValue) {
  std::vector<uint16_t> h(65536 + 3);
  for (size_t i = 0; i < h.size(); ++i) h[i] = uint16_t(i);
  std::vector<float> out(h.size());
  f16_to_f32_row(h.data(), out.data(), int64_t(h.size()));
  for (size_t i = 0; i < h.size(); ++i) {
    const float want = f16_to_f32(h[i]);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(out[i])) << i;
      continue;
    }
    uint32_t a, b;
    std::memcpy(&a, &out[i], 4);
    std::memcpy(&b, &want, 4);
    ASSERT_EQ(a, b) << "f16 bits " << h[i];
  }
}

// The row narrowing (F16C, 8 at a time) against the scalar conversion: every
// finite f16 value, the midpoint between it and the next (ties to even),
// past the largest (to infinity) and below the smallest subnormal (to zero),
// at an odd length so the tail runs too.
TEST(DType, F16RowNarrowingRoundsAsTheScalarConversion) {
  std::vector<float> x;
  for (uint32_t i = 0; i < 0x7bff; ++i) {
    const float a = f16_to_f32(uint16_t(i)), b = f16_to_f32(uint16_t(i + 1));
    x.insert(x.end(), {a, -a, a + (b - a) / 2, -(a + (b - a) / 2)});
  }
  x.insert(x.end(), {65520.f, 1e6f, -1e6f, 1e-9f, -1e-9f, INFINITY});
  std::vector<uint16_t> h(x.size());
  f32_to_f16_row(x.data(), h.data(), int64_t(x.size()));
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(h[i], f32_to_f16(x[i])) << x[i];
  uint16_t one[3];
  const float ties[3] = {1.f + 0x1p-11f, 1.f + 0x3p-11f, 65520.f};
  f32_to_f16_row(ties, one, 3);
  EXPECT_EQ(one[0], 0x3c00);  // 1 + half an ulp: to even, 1
  EXPECT_EQ(one[1], 0x3c02);  // 1 + 1.5 ulp: to even, 1 + 2 ulp
  EXPECT_EQ(one[2], 0x7c00);  // past 65504 by half an ulp: infinity
}

// x_j = j - 16: amax 16, d = 16/127 -> f16 0x3008 (0.1259765625).
TEST(DType, Q8_0KnownBlock) {
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[size_t(j)] = float(j - 16);
  auto b = q(DType::Q8_0, x);
  ASSERT_EQ(b.size(), 34u);
  EXPECT_EQ(u16_at(b, 0), 0x3008);
  EXPECT_EQ(int8_t(b[2 + 0]), -127);
  EXPECT_EQ(int8_t(b[2 + 16]), 0);
  EXPECT_EQ(int8_t(b[2 + 20]), 32);   // 4 * 7.9375 = 31.75
  EXPECT_EQ(int8_t(b[2 + 31]), 119);  // 15 * 7.9375 = 119.06
  auto y = dq(DType::Q8_0, b, 32);
  EXPECT_FLOAT_EQ(y[0], -127 * 0.1259765625f);
  EXPECT_FLOAT_EQ(y[31], 119 * 0.1259765625f);

  // Hand-made block: d = 0.5, q_j = j - 10.
  std::vector<uint8_t> blk(34);
  blk[0] = 0x00, blk[1] = 0x38;
  for (int j = 0; j < 32; ++j) blk[size_t(2 + j)] = uint8_t(int8_t(j - 10));
  y = dq(DType::Q8_0, blk, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[size_t(j)], 0.5f * float(j - 10)) << j;
}

// x_j = j - 16: the largest magnitude is x_0 = -16, so d = -16 / -8 = 2,
// q_j = min(15, floor(x_j / 2 + 8.5)).
TEST(DType, Q4_0KnownBlock) {
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[size_t(j)] = float(j - 16);
  auto b = q(DType::Q4_0, x);
  ASSERT_EQ(b.size(), 18u);
  EXPECT_EQ(u16_at(b, 0), 0x4000);  // 2.0
  auto qj = [](int j) { return std::min(15, int(std::floor((j - 16) / 2.0 + 8.5))); };
  for (int k = 0; k < 16; ++k) EXPECT_EQ(b[size_t(2 + k)], uint8_t(qj(k) | qj(k + 16) << 4)) << k;
  EXPECT_EQ(b[2], 0x80);   // q0 = 0, q16 = 8
  EXPECT_EQ(b[17], 0xf8);  // q15 = 8, q31 = 15 (clamped from 16)
  auto y = dq(DType::Q4_0, b, 32);
  EXPECT_EQ(y[0], -16.f);
  EXPECT_EQ(y[16], 0.f);
  EXPECT_EQ(y[31], 14.f);  // the clamped end: 2 * (15 - 8)

  // Hand-made block: d = 1, byte 0 = 0x9a -> y0 = 10 - 8, y16 = 9 - 8.
  std::vector<uint8_t> blk(18, 0x88);
  blk[0] = 0x00, blk[1] = 0x3c;
  blk[2] = 0x9a;
  y = dq(DType::Q4_0, blk, 32);
  EXPECT_EQ(y[0], 2.f);
  EXPECT_EQ(y[16], 1.f);
  EXPECT_EQ(y[1], 0.f);
}

// x_j = (j mod 16) - 3: min -3, d = 15 / 15 = 1, q_j = j mod 16.
TEST(DType, Q4_1KnownBlock) {
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[size_t(j)] = float(j % 16 - 3);
  auto b = q(DType::Q4_1, x);
  ASSERT_EQ(b.size(), 20u);
  EXPECT_EQ(u16_at(b, 0), 0x3c00);  // d = 1
  EXPECT_EQ(u16_at(b, 2), 0xc200);  // m = -3
  for (int k = 0; k < 16; ++k) EXPECT_EQ(b[size_t(4 + k)], uint8_t(k | k << 4)) << k;
  EXPECT_EQ(dq(DType::Q4_1, b, 32), x);

  // Hand-made block: d = 2, m = -1, byte 0 = 0x3f -> y0 = 2*15-1, y16 = 2*3-1.
  std::vector<uint8_t> blk(20, 0);
  blk[0] = 0x00, blk[1] = 0x40;
  blk[2] = 0x00, blk[3] = 0xbc;
  blk[4] = 0x3f;
  auto y = dq(DType::Q4_1, blk, 32);
  EXPECT_EQ(y[0], 29.f);
  EXPECT_EQ(y[16], 5.f);
  EXPECT_EQ(y[1], -1.f);
}

TEST(DType, ZeroBlocks) {
  std::vector<float> zero(64, 0.f);
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_1})
    EXPECT_EQ(dq(t, q(t, zero), 64), zero) << dtype_name(t);
}

// Round trip error is within half a quantisation step (plus the rounding of
// the stored f16 scale/min), for random blocks of several magnitudes.
TEST(DType, QuantRoundTripErrorWithinHalfStep) {
  std::mt19937 rng(1234);
  for (float scale : {1e-3f, 1.f, 37.f}) {
    std::normal_distribution<float> dist(0.f, scale);
    std::vector<float> x(32 * 64);
    for (float& v : x) v = dist(rng);
    for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_1}) {
      auto y = dq(t, q(t, x), x.size());
      for (size_t b = 0; b < x.size() / 32; ++b) {
        const float* v = &x[b * 32];
        float amax = 0, maxv = 0, lo = v[0], hi = v[0];
        for (int j = 0; j < 32; ++j) {
          if (std::fabs(v[j]) > amax) amax = std::fabs(v[j]), maxv = v[j];
          lo = std::min(lo, v[j]), hi = std::max(hi, v[j]);
        }
        for (int j = 0; j < 32; ++j) {
          float err = std::fabs(y[b * 32 + size_t(j)] - v[j]);
          double bound;
          if (t == DType::Q8_0) {
            double d = amax / 127.0, d16 = f16_to_f32(f32_to_f16(float(d)));
            bound = 0.5 * d + 127 * std::fabs(d - d16);
          } else if (t == DType::Q4_0) {
            // Levels d*(q-8), q in 0..15, d = maxv/-8: the end opposite maxv
            // reaches only 7/8 of it, so values beyond that level are clamped.
            double d = maxv / -8.0, d16 = f16_to_f32(f32_to_f16(float(d)));
            double ideal = v[j] / d + 8;
            bound = (ideal > 15.5 ? (ideal - 15) * std::fabs(d) : 0.5 * std::fabs(d)) +
                    8 * std::fabs(d - d16);
          } else {
            double d = (hi - lo) / 15.0, d16 = f16_to_f32(f32_to_f16(float(d)));
            double lo16 = f16_to_f32(f32_to_f16(lo));
            bound = 0.5 * d + 15 * std::fabs(d - d16) + std::fabs(lo - lo16);
          }
          ASSERT_LE(err, bound * (1 + 1e-5) + 1e-7 * amax)
              << dtype_name(t) << " scale " << scale << " block " << b << " j " << j;
        }
      }
    }
  }
}

}  // namespace
}  // namespace lr
