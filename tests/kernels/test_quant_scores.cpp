// Attention scores over q8_0 and q4_0 keys in integers (quant_scores.h):
// every kernel path the host has gives the scalar twin's bits, and the twin
// is the score of the query as rounded, within f32 rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cpu/kernels/quant_scores.h"
#include "core/half.h"
#include "isa_util.h"

namespace lr::cpu {
namespace {

// n key rows of d values, `stride` blocks apart (the blocks between rows
// filled too, as other heads' rows are): q8_0 codes over [-127, 127] with
// both ends present, q4_0 nibbles over 0..15; f16 scales of a few sizes.
template <typename B>
std::vector<B> make_keys(int n, int d, int64_t stride, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<B> k(size_t(n) * size_t(stride));
  for (size_t i = 0; i < k.size(); ++i) {
    k[i].d = f32_to_f16(std::ldexp(0.5f + float(rng() % 1000) / 1000.f, -int(rng() % 8)));
    for (auto& c : k[i].qs)
      c = std::remove_reference_t<decltype(c)>(std::is_same_v<B, Q8Block> ? int(rng() % 255) - 127
                                                                          : int(rng() % 256));
    if constexpr (std::is_same_v<B, Q8Block>) k[i].qs[i % 32] = (i % 2) ? 127 : -127;
  }
  (void)d;
  return k;
}

// R row-heads of normal values (row 0 a hundred times larger; row 1's first
// block all zero: scale 0), quantized.
struct Queries {
  QuantQueries qq;
  const QuantQuery* rows;
  Queries(int R, int d, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> n(0.f, 1.f);
    std::vector<float> x(static_cast<size_t>(d));
    qq.reset(R, d);
    for (int r = 0; r < R; ++r) {
      for (auto& v : x) v = n(rng) * (r == 0 ? 100.f : 1.f);
      if (r == 1) std::fill_n(x.begin(), 32, 0.f);
      qq.quantize(r, x.data());
    }
    rows = qq.rows();
  }
};

template <typename B>
void expect_twin_bits(int d, int R, int nb, int64_t stride) {
  const auto K = make_keys<B>(nb, d, stride, uint32_t(7 * d + nb));
  Queries Q(R, d, uint32_t(R + d));
  const int64_t lds = nb + 3;
  std::vector<float> want(size_t(R) * size_t(lds), -1.f);
  ref::quant_scores(Q.rows, R, d, K.data(), stride, nb, 0.125f, want.data(), lds);
  for (Isa isa : test::supported_isas()) {
    test::IsaScope scope(isa);
    std::vector<float> got(want.size(), -1.f);
    quant_scores(Q.rows, R, d, K.data(), stride, nb, 0.125f, got.data(), lds);
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
        << isa_name(isa) << (std::is_same_v<B, Q8Block> ? " q8_0" : " q4_0") << " d=" << d
        << " R=" << R << " nb=" << nb << " stride=" << stride;
  }
}

TEST(QuantScores, EveryPathGivesTheScalarTwinsBits) {
  for (int d : {32, 64, 128, 256})
    for (int R : {1, 2, 3, 5, 7, 13})
      for (int nb : {32, 16, 8, 1, 23, 37})
        for (int64_t stride : {int64_t(d / 32), int64_t(3 * d / 32)}) {
          expect_twin_bits<Q8Block>(d, R, nb, stride);
          expect_twin_bits<Q4Block>(d, R, nb, stride);
        }
}

// The twin against the rounded query's score in double: sum over blocks of
// dq dk sum(q k), q4_0's codes minus 8; within a few f32 roundings of the
// sum of the terms' magnitudes.
template <typename B>
void expect_rounded_query_score(int d) {
  const int nb = 32, R = 4;
  const auto K = make_keys<B>(nb, d, d / 32, 3);
  Queries Q(R, d, 5);
  std::vector<float> s(size_t(R) * nb);
  ref::quant_scores(Q.rows, R, d, K.data(), d / 32, nb, 0.125f, s.data(), nb);
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < nb; ++b) {
      double exact = 0, mag = 0;
      for (int blk = 0; blk < d / 32; ++blk) {
        const B& k = K[size_t(b) * size_t(d / 32) + size_t(blk)];
        for (int i = 0; i < 32; ++i) {
          const int c = std::is_same_v<B, Q8Block>
                            ? int(int8_t(k.qs[i]))
                            : int((i < 16 ? k.qs[i] : k.qs[i - 16] >> 4) & 15) - 8;
          const double t =
              double(Q.rows[r].d[blk]) * f16_to_f32(k.d) * Q.rows[r].q[32 * blk + i] * c;
          exact += t;
          mag += std::abs(t);
        }
      }
      EXPECT_NEAR(s[size_t(r * nb + b)], 0.125 * exact, 0.125 * mag * 1e-6 + 1e-30)
          << "r=" << r << " b=" << b;
    }
}

TEST(QuantScores, TheTwinIsTheRoundedQuerysScore) {
  for (int d : {32, 128}) {
    expect_rounded_query_score<Q8Block>(d);
    expect_rounded_query_score<Q4Block>(d);
  }
}

// A row-head's codes: q8_0 blocks (scale max |x| / 127, codes x * (127 /
// max |x|) rounded to even), with each block's code sum.
TEST(QuantScores, QueryRoundsToQ8Blocks) {
  std::vector<float> x(64);
  for (int i = 0; i < 32; ++i) x[size_t(i)] = float(i) - 15.5f;
  x[5] = -25.4f;  // the block's largest magnitude
  std::fill(x.begin() + 32, x.end(), 0.f);
  QuantQueries qq;
  qq.reset(2, 64);
  qq.quantize(1, x.data());
  const QuantQuery& r = qq.rows()[1];
  EXPECT_FLOAT_EQ(r.d[0], 25.4f / 127.f);
  EXPECT_EQ(r.q[5], -127);
  int32_t t = 0;
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(r.q[i], int(std::nearbyint(x[size_t(i)] * (127.f / 25.4f)))) << i;
    t += r.q[i];
  }
  EXPECT_EQ(r.sum[0], t);
  EXPECT_EQ(r.d[1], 0.f);
  EXPECT_EQ(r.sum[1], 0);
}

}  // namespace
}  // namespace lr::cpu
