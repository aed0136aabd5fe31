// lowrank's own quantizers (compress/quantize.h), decoded by the dequantizer
// that is tested bit for bit against the gguf package (tests/format).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "compress/quantize.h"
#include "core/dtype.h"

namespace lr::compress {
namespace {

const DType kAll[] = {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                      DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K};

std::vector<float> gaussian(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = g(rng);
  return x;
}

std::vector<float> round_trip(DType t, const std::vector<float>& x, const float* importance) {
  const int64_t n = int64_t(x.size());
  std::vector<uint8_t> q(*row_bytes(t, uint64_t(n)));
  quantize_row(t, x.data(), importance, q.data(), n);
  std::vector<float> y(x.size());
  dequantize(t, q.data(), y.data(), n);
  return y;
}

// sum w (x - y)^2 / sum w x^2
double rel_error(const std::vector<float>& x, const std::vector<float>& y,
                 const std::vector<float>* w = nullptr) {
  double e = 0, s = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double wi = w ? (*w)[i] : 1.0;
    e += wi * (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
    s += wi * double(x[i]) * x[i];
  }
  return e / s;
}

// The relative squared error each format stays within on a Gaussian row of
// 4096 (measured with seed 1: Q8_0 2.7e-5, Q6_K 3.0e-4, Q5_K 1.3e-3, Q5_1
// 1.2e-3, Q5_0 1.6e-3, Q4_K 5.1e-3, Q4_1 4.9e-3, Q4_0 6.8e-3, Q3_K 2.0e-2,
// Q2_K 7.1e-2; each bit fewer about 4x more).
double bound(DType t) {
  switch (t) {
    case DType::Q8_0:
      return 4e-5;
    case DType::Q6_K:
      return 4e-4;
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q5_K:
      return 2e-3;
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q4_K:
      return 8e-3;
    case DType::Q3_K:
      return 2.6e-2;
    default:
      return 9e-2;  // Q2_K
  }
}

TEST(Quantize, GaussianRowsRoundTripWithinTheFormatsError) {
  const std::vector<float> x = gaussian(4096, 1);
  for (DType t : kAll) {
    const double e = rel_error(x, round_trip(t, x, nullptr));
    EXPECT_LT(e, bound(t)) << dtype_name(t);
    EXPECT_GT(e, bound(t) / 40) << dtype_name(t);  // the bound is not loose by orders of magnitude
  }
}

TEST(Quantize, SearchIsNoWorseThanRoundToNearest) {
  // core/dtype.h quantize(): the plain round-to-nearest writers.
  const std::vector<float> x = gaussian(8192, 2);
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    std::vector<uint8_t> q(*row_bytes(t, x.size()));
    quantize(t, x.data(), q.data(), int64_t(x.size()));
    std::vector<float> rtn(x.size());
    dequantize(t, q.data(), rtn.data(), int64_t(x.size()));
    const double searched = rel_error(x, round_trip(t, x, nullptr));
    const double plain = rel_error(x, rtn);
    EXPECT_LE(searched, plain * 1.0001) << dtype_name(t);
    if (t != DType::Q8_0) {
      EXPECT_LT(searched, plain * 0.95) << dtype_name(t);  // a real gain below 8 bits
    }
  }
}

TEST(Quantize, ValuesOnTheGridAreExact) {
  // x = d q with q over the whole integer range (its extremes included) and
  // d a power of two: the search finds d and every value comes back exactly.
  for (auto [t, lo, hi] :
       {std::tuple{DType::Q8_0, -127, 127}, {DType::Q4_0, -8, 7}, {DType::Q5_0, -16, 15}}) {
    std::vector<float> x(64);
    for (size_t i = 0; i < x.size(); ++i) x[i] = 0.25f * float(lo + int(i * 7) % (hi - lo + 1));
    x[0] = 0.25f * float(lo), x[32] = 0.25f * float(lo);
    EXPECT_EQ(round_trip(t, x, nullptr), x) << dtype_name(t);
  }
}

TEST(Quantize, ImportanceWeightsTheErrorWhereItMatters) {
  // Columns with 100x importance (the Gram diagonal of hot input features):
  // the activation-weighted quantizer has a lower weighted error than the
  // plain one, and a higher unweighted one.
  const int64_t n = 4096;
  const std::vector<float> x = gaussian(n, 3);
  std::vector<float> imp(size_t(n), 1.f);
  for (int64_t i = 0; i < n; i += 7) imp[size_t(i)] = 100.f;
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q6_K}) {
    const std::vector<float> plain = round_trip(t, x, nullptr);
    const std::vector<float> weighted = round_trip(t, x, imp.data());
    EXPECT_LT(rel_error(x, weighted, &imp), 0.9 * rel_error(x, plain, &imp)) << dtype_name(t);
    EXPECT_GT(rel_error(x, weighted), rel_error(x, plain)) << dtype_name(t);
  }
}

TEST(Quantize, ZeroAndConstantBlocks) {
  for (DType t : kAll) {
    const int64_t n = dtype_info(t).block_elems;
    std::vector<float> zero(size_t(n), 0.f), same(size_t(n), -0.75f);
    EXPECT_EQ(round_trip(t, zero, nullptr), zero) << dtype_name(t);
    const std::vector<float> y = round_trip(t, same, nullptr);
    for (float v : y) EXPECT_NEAR(v, -0.75f, 0.75f * bound(t) * 4 + 1e-3) << dtype_name(t);
    std::vector<float> none(size_t(n), 0.f);
    EXPECT_EQ(round_trip(t, zero, none.data()), zero) << dtype_name(t);  // all-zero importance
  }
}

}  // namespace
}  // namespace lr::compress
