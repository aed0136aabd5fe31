// The quantizers lowrank writes (core/dtype.h quantize: Q8_0 and the
// K-quants Q4_K, Q5_K, Q6_K), read back through the scalar dequantizer that
// is bit-exact with the `gguf` package (test_quants.cpp):
//  - every value within half a step of its stored sub-block scale (Q6_K: a
//    step, see quantize_k.cpp), and the relative RMS
//    error of Gaussian rows under each format's bound;
//  - an all-zero super-block decodes to zeros, a constant one to itself
//    within a step;
//  - Q8_0 against the reference definition (d = amax / 127 as f16, q = x / d
//    rounded half away from zero), as gguf.quants.quantize computes it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/half.h"
#include "core/quants.h"

namespace lr {
namespace {

std::vector<float> gaussian(int64_t n, uint32_t seed, float sigma) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, sigma);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = d(rng);
  return x;
}

std::vector<float> round_trip(DType t, const std::vector<float>& x,
                              std::vector<uint8_t>* raw = nullptr) {
  std::vector<uint8_t> b(*row_bytes(t, x.size()));
  quantize(t, x.data(), b.data(), int64_t(x.size()));
  std::vector<float> y(x.size());
  dequantize(t, b.data(), y.data(), int64_t(x.size()));
  if (raw) *raw = b;
  return y;
}

// The step (value of one unit of q) of element e of a super-block, from the
// stored fields.
float step_of(DType t, const uint8_t* blk, int e) {
  namespace q = quants;
  auto f16 = [&](int at) {
    uint16_t h;
    std::memcpy(&h, blk + at, 2);
    return f16_to_f32(h);
  };
  if (t == DType::Q6_K)
    return std::fabs(f16(q::Q6_K::kD) * float(int8_t(blk[q::Q6_K::kScales + e / 16])));
  uint8_t sc[8], mn[8];
  q::k4_scales(blk + (t == DType::Q4_K ? q::Q4_K::kScales : q::Q5_K::kScales), sc, mn);
  return f16(t == DType::Q4_K ? q::Q4_K::kD : q::Q5_K::kD) * float(sc[e / 32]);
}

struct Bound {
  DType t;
  double rms;  // relative RMS error bound on Gaussian rows
};

TEST(Quantize, KQuantsWithinHalfAStepOfTheirStoredScales) {
  for (Bound b :
       {Bound{DType::Q4_K, 0.085}, Bound{DType::Q5_K, 0.042}, Bound{DType::Q6_K, 0.021}}) {
    SCOPED_TRACE(std::string(dtype_name(b.t)));
    const int64_t n = 256 * 64;
    // Super-blocks of very different magnitudes, and one shifted positive
    // (its minimum far above 0).
    std::vector<float> x = gaussian(n, 7, 1.f);
    for (int64_t i = 0; i < n; ++i) x[size_t(i)] *= std::pow(10.f, float(i / 256 % 7) - 3);
    for (int i = 0; i < 256; ++i) x[size_t(256 * 5 + i)] = 2.f + 0.1f * x[size_t(256 * 5 + i)];
    std::vector<uint8_t> raw;
    const std::vector<float> y = round_trip(b.t, x, &raw);
    const int bytes = dtype_info(b.t).block_bytes;
    double err2 = 0, sum2 = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float step = step_of(b.t, raw.data() + i / 256 * bytes, int(i % 256));
      ASSERT_LE(
          std::fabs(y[size_t(i)] - x[size_t(i)]),
          (b.t == DType::Q6_K ? 1.0f : 0.5f) * step + 1e-6f * std::fabs(x[size_t(i)]) + 1e-30f)
          << "element " << i << " x " << x[size_t(i)] << " y " << y[size_t(i)];
      if (i / 256 % 7 == 3)
        err2 += double(y[size_t(i)] - x[size_t(i)]) * (y[size_t(i)] - x[size_t(i)]),
            sum2 += double(x[size_t(i)]) * x[size_t(i)];
    }
    std::printf("%s relative rms error %.4f\n", std::string(dtype_name(b.t)).c_str(),
                std::sqrt(err2 / sum2));
    EXPECT_LT(std::sqrt(err2 / sum2), b.rms);
    EXPECT_GT(std::sqrt(err2 / sum2), b.rms / 4);  // a real quantization, not a copy
  }
}

TEST(Quantize, ZeroAndConstantSuperBlocks) {
  for (DType t : {DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_0}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    std::vector<float> zero(256, 0.f), y = round_trip(t, zero);
    for (float v : y) EXPECT_EQ(v, 0.f);
    std::vector<float> c(256, -0.75f);
    y = round_trip(t, c);
    for (float v : y) EXPECT_NEAR(v, -0.75f, 0.75f / 15);
  }
}

TEST(Quantize, Q8_0IsTheReferenceRounding) {
  const std::vector<float> x = gaussian(32 * 8, 9, 0.3f);
  std::vector<uint8_t> raw;
  round_trip(DType::Q8_0, x, &raw);
  for (int b = 0; b < 8; ++b) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[size_t(32 * b + j)]));
    const float d = amax / 127.f;
    uint16_t h;
    std::memcpy(&h, &raw[size_t(34 * b)], 2);
    EXPECT_EQ(h, f32_to_f16(d));
    for (int j = 0; j < 32; ++j) {
      const float v = x[size_t(32 * b + j)] * (1.f / d);
      const float a = std::floor(std::fabs(v));
      const int want =
          int(std::copysign(a + std::floor(2 * (std::fabs(v) - a)), v));  // gguf's np_roundf
      EXPECT_EQ(int8_t(raw[size_t(34 * b + 2 + j)]), want) << b << " " << j;
    }
  }
}

}  // namespace
}  // namespace lr
