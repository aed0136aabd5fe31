// The per-token cache rows (kv/row_codec.h): the Hadamard rotation against
// the Sylvester matrix written out, the row sizes, what a rotation buys a
// row with an outlier channel, and the type names and checks.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <vector>

#include "../error_of.h"
#include "kv/key_config.h"
#include "kv/row_codec.h"
#include "kv_test_util.h"

namespace lr::kv {
namespace {

// Blocks of n along x [d] times the Sylvester Hadamard matrix
// H_ij = (-1)^popcount(i & j) / sqrt(n), in double.
std::vector<double> by_matrix(const std::vector<float>& x, int n) {
  std::vector<double> y(x.size());
  for (size_t b = 0; b < x.size(); b += size_t(n))
    for (int i = 0; i < n; ++i) {
      double s = 0;
      for (int j = 0; j < n; ++j)
        s += (std::popcount(unsigned(i & j)) % 2 ? -1.0 : 1.0) * x[b + size_t(j)];
      y[b + size_t(i)] = s / std::sqrt(double(n));
    }
  return y;
}

TEST(RowCodec, HadamardIsTheSylvesterMatrixAndItsOwnInverse) {
  for (int n : {32, 64, 128, 256}) {
    const int d = 2 * n;  // two blocks
    const std::vector<float> x = test::normal(size_t(d), uint32_t(n));
    std::vector<float> y = x;
    hadamard(y.data(), d, n);
    const std::vector<double> want = by_matrix(x, n);
    for (int i = 0; i < d; ++i) EXPECT_NEAR(y[size_t(i)], want[size_t(i)], 1e-5) << n << " " << i;
    hadamard(y.data(), d, n);
    for (int i = 0; i < d; ++i) EXPECT_NEAR(y[size_t(i)], x[size_t(i)], 1e-5) << n << " " << i;
  }
}

TEST(RowCodec, RowBytesAndRotationBlocks) {
  EXPECT_EQ(row_bytes(DType::F32, 64), 256u);
  EXPECT_EQ(row_bytes(DType::F16, 64), 128u);
  EXPECT_EQ(row_bytes(DType::Q8_0, 64), 68u);   // 2 x (2 + 32)
  EXPECT_EQ(row_bytes(DType::Q4_0, 128), 72u);  // 4 x (2 + 16)
  EXPECT_EQ(key_rotation(64), 64);
  EXPECT_EQ(key_rotation(128), 128);
  EXPECT_EQ(key_rotation(256), 256);
  EXPECT_EQ(key_rotation(192), 64);
  EXPECT_EQ(key_rotation(96), 32);
  EXPECT_EQ(key_rotation(80), 0);
  EXPECT_EQ(value_rotation(128), 64);
  EXPECT_EQ(value_rotation(96), 32);
  EXPECT_EQ(value_rotation(48), 0);
  EXPECT_EQ(key_row_format(KeyType::Q4_0Rot, 128).rot, 128);
  EXPECT_EQ(key_row_format(KeyType::Q4_0, 128).rot, 0);
  EXPECT_EQ(value_row_format(ValueType::Q8_0Rot, 128).rot, 64);
  EXPECT_EQ(value_row_format(ValueType::Q8_0Rot, 128).type, DType::Q8_0);
}

// Rows of N(0, 1) values with one channel 30 times larger (the keys' outlier
// channels): q4_0's block scale follows the outlier and the other 31 values
// of its block round to a few levels; rotated, the outlier is spread over
// the 64 values and the error falls several fold. Unrotated rows encode
// exactly as core/dtype.h's quantize does.
TEST(RowCodec, RotationCutsTheErrorOfARowWithAnOutlier) {
  const int d = 64, rows = 200;
  std::vector<float> x = test::normal(size_t(rows) * d, 3);
  for (int r = 0; r < rows; ++r) x[size_t(r) * d + 5] *= 30.f;
  for (DType t : {DType::Q8_0, DType::Q4_0}) {
    double err[2] = {0, 0};
    for (int rot : {0, 64}) {
      const RowFormat f{t, rot};
      std::vector<uint8_t> b(row_bytes(t, d));
      std::vector<float> y(static_cast<size_t>(d));
      for (int r = 0; r < rows; ++r) {
        const float* xr = &x[size_t(r) * d];
        encode_row(f, xr, d, b.data());
        if (rot == 0) {
          std::vector<uint8_t> want(b.size());
          quantize(t, xr, want.data(), d);
          ASSERT_EQ(b, want);
        }
        reconstruct_row(f, b.data(), d, y.data());
        for (int i = 0; i < d; ++i) {
          if (i == 5) continue;  // the other channels' error
          err[rot ? 1 : 0] += std::pow(double(y[size_t(i)]) - xr[i], 2);
        }
      }
    }
    EXPECT_LT(err[1], err[0] / 4) << dtype_name(t);
  }
}

TEST(RowCodec, TypeNamesAndChecks) {
  EXPECT_EQ(parse_key_type("q4_0-rot"), KeyType::Q4_0Rot);
  EXPECT_EQ(parse_value_type("q8_0-rot"), ValueType::Q8_0Rot);
  EXPECT_STREQ(value_type_name(ValueType::Q4_0), "q4_0");
  EXPECT_EQ(lr::test::error_of([] { parse_value_type("svdq"); }),
            "--cache-type-v: unknown value cache type 'svdq' (expected f32, f16, q8_0, q4_0, "
            "q8_0-rot, q4_0-rot)");
  EXPECT_EQ(lr::test::error_of([] { parse_key_type("q5_0"); }),
            "--cache-type-k: unknown key cache type 'q5_0' (expected f32, f16, q8_0, q4_0, "
            "q8_0-rot, q4_0-rot, kivi2, svdq)");
  KeyCacheConfig c;
  EXPECT_EQ(c.values(), ValueType::F32);
  EXPECT_TRUE(c.dense());
  c.type = KeyType::Q8_0;
  EXPECT_EQ(c.values(), ValueType::F16);  // beside typed keys, f16 values unless told
  c.type = KeyType::F32;
  c.value_type = ValueType::Q4_0Rot;
  EXPECT_FALSE(c.dense());
  EXPECT_EQ(lr::test::error_of([&] { c.validate(80); }),
            "--cache-type-v q4_0-rot: blocks of 32 along head_dim, but head_dim is 80");
  c.validate(96);
}

}  // namespace
}  // namespace lr::kv
