// SVDq building blocks: config checks, group slicing, rank rules, the basis
// fit, the block quantizer and its bit packing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "core/error.h"
#include "core/half.h"
#include "kv/svdq.h"
#include "kv_test_util.h"

namespace lr::kv {
namespace {

using test::lowrank_keys;

void expect_error(const std::function<void()>& f, const std::string& part) {
  try {
    f();
    FAIL() << "no error; expected one containing '" << part << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(SvdqConfig, RejectsBadSchedulesAndBounds) {
  SvdqConfig c;
  c.validate();  // the default is fine
  c.schedule = {};
  expect_error([&] { c.validate(); }, "svdq_bit_schedule");
  c.schedule = {8, -1, 2};
  expect_error([&] { c.validate(); }, "svdq_bit_schedule: width -1");
  c.schedule = {9, 4};
  expect_error([&] { c.validate(); }, "width 9 is outside [0, 8]");
  c.schedule = {0, 0};
  expect_error([&] { c.validate(); }, "every width is 0");
  c = SvdqConfig{};
  c.group_size = 0;
  expect_error([&] { c.validate(); }, "group_size");
  c = SvdqConfig{};
  c.energy = 0;
  expect_error([&] { c.validate(); }, "energy must be in (0, 1]");
  c.energy = 1.5;
  expect_error([&] { c.validate(); }, "energy must be in (0, 1]");
  c.energy = 1.0;
  c.validate();
}

TEST(SvdqConfig, ExplicitRankBelowSafeFloorIsRejected) {
  SvdqConfig c;
  EXPECT_EQ(c.min_safe_rank(), 32);  // 4 channels x 8 groups
  c.rank = 8;
  expect_error([&] { c.validate(); }, "too small for the");
  c.schedule = {4, 4, 3, 3, 2, 2, 1, 1};  // no 0-bit group: a small rank is fine
  c.validate();
  EXPECT_EQ(parse_schedule("8,4,2,1,1,0,0,0"), (std::vector<int>{8, 4, 2, 1, 1, 0, 0, 0}));
  expect_error([] { parse_schedule("8,x"); }, "not a list of integer widths");
  expect_error([] { parse_schedule("8,,1"); }, "not a list of integer widths");
}

TEST(SvdqGroups, SlicesSumToRankFirstGroupsWider) {
  const std::vector<int> sched = {8, 4, 2, 1, 1, 0, 0, 0};
  for (int r = 1; r <= 200; ++r) {
    auto g = group_slices(r, sched);
    ASSERT_EQ(int(g.size()), std::min(r, 8)) << r;
    int at = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      EXPECT_EQ(g[i].begin, at);
      EXPECT_EQ(g[i].bits, sched[i]);
      const int want = r / int(g.size()) + (int(i) < r % int(g.size()) ? 1 : 0);
      EXPECT_EQ(g[i].count, want) << "r=" << r << " group " << i;
      at += g[i].count;
    }
    EXPECT_EQ(at, r);
  }
  auto g20 = group_slices(20, sched);
  EXPECT_EQ(g20[0].count, 3);
  EXPECT_EQ(g20[3].count, 3);
  EXPECT_EQ(g20[4].count, 2);
  auto g5 = group_slices(5, sched);  // five one-channel groups at 8, 4, 2, 1, 1
  ASSERT_EQ(g5.size(), 5u);
  EXPECT_EQ(g5[4].bits, 1);
}

TEST(SvdqRank, EnergyRulesOnConstructedSpectra) {
  std::vector<double> s(128);
  for (int j = 0; j < 128; ++j) s[size_t(j)] = std::exp(-0.05 * j);
  // Cumulative sums by hand: the smallest r reaching 95%.
  auto expect_rank = [&](bool squared) {
    double total = 0, run = 0;
    for (double x : s) total += squared ? x * x : x;
    for (int r = 1; r <= 128; ++r) {
      run += squared ? s[size_t(r - 1)] * s[size_t(r - 1)] : s[size_t(r - 1)];
      if (run >= 0.95 * total) return r;
    }
    return 128;
  };
  EXPECT_EQ(rank_for_energy(s, 0.95, EnergyMode::Sigma), expect_rank(false));
  EXPECT_EQ(rank_for_energy(s, 0.95, EnergyMode::Sigma2), expect_rank(true));
  EXPECT_EQ(rank_for_energy(s, 0.95, EnergyMode::Sigma), 60);   // values quoted in the SVDq notes
  EXPECT_EQ(rank_for_energy(s, 0.95, EnergyMode::Sigma2), 30);
  EXPECT_EQ(rank_for_energy(s, 1.0, EnergyMode::Sigma), 128);
  EXPECT_EQ(rank_for_energy(std::vector<double>(64, 0.0), 0.95, EnergyMode::Sigma), 1);
  std::vector<double> flat(128, 1.0);
  EXPECT_EQ(rank_for_energy(flat, 0.95, EnergyMode::Sigma), 122);
}

SvdqBasis fit(const std::vector<float>& k, int n, int d, const SvdqConfig& c) {
  KeyMoments m(d);
  m.add(k.data(), n, d);
  return fit_basis(m, c);
}

TEST(SvdqFit, OrthonormalBasisShapesAndExactLowRankRecovery) {
  const int n = 200, d = 64, k = 12;
  auto keys = lowrank_keys(n, d, k, 0.1, 0.0, 7);
  for (EnergyMode mode : {EnergyMode::Sigma, EnergyMode::Sigma2}) {
    SvdqConfig c;
    c.energy = 0.999;
    c.energy_mode = mode;
    SvdqBasis b = fit(keys, n, d, c);
    EXPECT_EQ(b.rank, k);  // exactly rank-k data: r = k in both modes
    EXPECT_EQ(b.d, d);
    EXPECT_EQ(b.v.size(), size_t(k) * d);
    EXPECT_EQ(b.mean.size(), size_t(d));
    EXPECT_TRUE(b.degraded);  // rank 12 < 32 with an automatic rank: 0-bit groups become 1-bit
    for (int w : b.schedule) EXPECT_GE(w, 1);
    double worst = 0;
    for (int a = 0; a < k; ++a)
      for (int c2 = 0; c2 < k; ++c2) {
        double dot = 0;
        for (int i = 0; i < d; ++i) dot += double(b.v[size_t(a * d + i)]) * b.v[size_t(c2 * d + i)];
        worst = std::max(worst, std::fabs(dot - (a == c2 ? 1 : 0)));
      }
    EXPECT_LT(worst, 1e-5);
    // Projection onto the basis and back recovers every key.
    double err = 0;
    for (int t = 0; t < n; ++t) {
      const float* x = &keys[size_t(t) * d];
      std::vector<double> rec(b.mean.begin(), b.mean.end());
      for (int a = 0; a < k; ++a) {
        double l = 0;
        for (int i = 0; i < d; ++i) l += (x[i] - b.mean[size_t(i)]) * double(b.v[size_t(a * d + i)]);
        for (int i = 0; i < d; ++i) rec[size_t(i)] += l * b.v[size_t(a * d + i)];
      }
      for (int i = 0; i < d; ++i) err = std::max(err, std::fabs(rec[size_t(i)] - x[i]));
    }
    EXPECT_LT(err, 1e-4);
  }
}

TEST(SvdqFit, CentredLatentsHaveZeroMeanAndSignsAreDeterministic) {
  const int n = 96, d = 32;
  auto keys = lowrank_keys(n, d, 20, 0.05, 0.01, 3);
  SvdqConfig c;
  c.rank = 32;
  SvdqBasis a = fit(keys, n, d, c), b = fit(keys, n, d, c);
  EXPECT_EQ(a.v, b.v);
  for (int r = 0; r < a.rank; ++r) {
    // Largest-magnitude component positive.
    const float* v = &a.v[size_t(r) * d];
    const float* big = std::max_element(v, v + d, [](float x, float y) { return std::fabs(x) < std::fabs(y); });
    EXPECT_GT(*big, 0.f);
    double mean_l = 0;
    for (int t = 0; t < n; ++t) {
      double l = 0;
      for (int i = 0; i < d; ++i) l += (keys[size_t(t) * d + size_t(i)] - a.mean[size_t(i)]) * double(v[i]);
      mean_l += l / n;
    }
    EXPECT_NEAR(mean_l, 0.0, 1e-4);
  }
}

TEST(SvdqFit, RankIsCappedByTokensAndGuardRailDegradesAutomaticRanks) {
  const int d = 128;
  auto keys = test::normal(size_t(16) * d, 5);
  SvdqConfig c;  // automatic rank
  SvdqBasis b = fit(keys, 16, d, c);
  EXPECT_LE(b.rank, 15);  // centring leaves n - 1 directions
  EXPECT_LT(b.rank, c.min_safe_rank());
  EXPECT_TRUE(b.degraded);
  EXPECT_EQ(std::count(b.schedule.begin(), b.schedule.end(), 0), 0);
  // An explicit rank that the short fit clamps below the floor is an error naming both ranks.
  c.rank = 32;
  expect_error([&] { fit(keys, 16, d, c); }, "rank 15 (of 32 requested, 16 keys to fit) is too small for the");
  // All-equal keys: no energy, rank 1, the mean is the key.
  std::vector<float> same(size_t(40) * d, 0.25f);
  SvdqConfig c2;
  c2.schedule = {8};
  SvdqBasis z = fit(same, 40, d, c2);
  EXPECT_EQ(z.rank, 1);
  for (float m : z.mean) EXPECT_EQ(m, 0.25f);
}

// --- quantizer ----------------------------------------------------------------

TEST(SvdqQuant, PackUnpackBitExactOddSizesAndOffsets) {
  std::mt19937 rng(11);
  for (int bits = 1; bits <= 8; ++bits)
    for (int n : {1, 3, 7, 31, 33, 65, 127}) {
      for (uint64_t bit0 : {0ull, 5ull, 31ull, 37ull}) {
        std::vector<uint8_t> codes(static_cast<size_t>(n)), back(static_cast<size_t>(n));
        for (uint8_t& c : codes) c = uint8_t(rng() & ((1u << bits) - 1));
        std::vector<uint32_t> words((bit0 + uint64_t(n) * bits + 63) / 32, 0u);
        pack_codes(codes.data(), n, bits, words.data(), bit0);
        unpack_codes(words.data(), bit0, n, bits, back.data());
        EXPECT_EQ(codes, back) << "bits " << bits << " n " << n << " bit0 " << bit0;
        // Nothing written outside the stream's bits.
        for (uint64_t b = 0; b < words.size() * 32; ++b) {
          if (b < bit0 || b >= bit0 + uint64_t(n) * bits) {
            EXPECT_EQ((words[b / 32] >> (b % 32)) & 1u, 0u);
          }
        }
      }
    }
}

TEST(SvdqQuant, ErrorWithinHalfScaleCodesInRangeConstantBlocksExact) {
  for (int bits : {1, 2, 4, 8}) {
    for (int tokens : {8, 16, 32}) {
      const int C = 5;
      auto X = test::normal(size_t(tokens) * C, 100 + bits, 3.0);
      // Channel 4 is constant (an f16-representable value): exact.
      for (int t = 0; t < tokens; ++t) X[size_t(t) * C + 4] = 1.375f;
      BlockLayout lay(tokens, std::vector<int>(C, bits));
      std::vector<uint16_t> sm(2 * C);
      std::vector<uint32_t> codes(size_t(lay.code_words));
      quantize_block(lay, X.data(), C, sm.data(), codes.data());
      std::vector<float> Y(X.size());
      dequantize_block(lay, sm.data(), codes.data(), Y.data(), C);
      for (int c = 0; c < C; ++c) {
        const float s = f16_to_f32(sm[size_t(c)]);
        std::vector<uint8_t> q(static_cast<size_t>(tokens));
        unpack_codes(codes.data(), lay.bit_off[size_t(c)], tokens, bits, q.data());
        for (int t = 0; t < tokens; ++t) {
          EXPECT_LE(int(q[size_t(t)]), (1 << bits) - 1);
          const float x = X[size_t(t) * C + size_t(c)], y = Y[size_t(t) * C + size_t(c)];
          EXPECT_LE(std::fabs(x - y), s / 2 + 1e-6f * (1 + std::fabs(x))) << "bits " << bits << " c " << c;
        }
      }
      for (int t = 0; t < tokens; ++t) EXPECT_EQ(Y[size_t(t) * C + 4], 1.375f);
    }
  }
  // Bytes: codes of 32 tokens x (8 + 4 + 2 + 1) bits + an f16 scale and min per channel.
  BlockLayout lay(32, {8, 4, 2, 1});
  EXPECT_EQ(lay.code_words, 15);
  EXPECT_EQ(lay.bytes(), 15u * 4 + 4u * 4);
  EXPECT_EQ(f16_to_f32(f16_round_down(0.1f)) <= 0.1f, true);
  EXPECT_EQ(f16_to_f32(f16_round_up(0.1f)) >= 0.1f, true);
  EXPECT_EQ(f16_to_f32(f16_round_down(-0.1f)) <= -0.1f, true);
  EXPECT_EQ(f16_to_f32(f16_round_up(-0.1f)) >= -0.1f, true);
}

TEST(SvdqQuant, RoundsHalfToEven) {
  // Values at exactly 0.5 and 1.5 steps (min 0, scale 1 with 2 bits over [0, 3]).
  BlockLayout lay(4, {2});
  const float X[4] = {0.f, 0.5f, 1.5f, 3.f};
  uint16_t sm[2];
  uint32_t codes[1];
  quantize_block(lay, X, 1, sm, codes);
  uint8_t q[4];
  unpack_codes(codes, 0, 4, 2, q);
  EXPECT_EQ(q[0], 0);
  EXPECT_EQ(q[1], 0);  // 0.5 -> 0 (even)
  EXPECT_EQ(q[2], 2);  // 1.5 -> 2 (even)
  EXPECT_EQ(q[3], 3);
}

// rope_spread's closed form against brute force: every unrotated key placed
// at every position of [0, n_pos) and rotated there.
TEST(SvdqFit, RopeSpreadEqualsRotatingEveryKeyToEveryPosition) {
  const int d = 8, n = 20;
  const int64_t n_pos = 37;
  std::vector<double> freq;
  for (int i = 0; i < d / 2; ++i) freq.push_back(std::pow(100.0, -2.0 * i / d));
  freq[3] = 0.0;  // a pair that never turns
  auto keys = test::normal(size_t(n) * d, 61);
  for (int t = 0; t < n; ++t) keys[size_t(t) * d] += 2.f;  // a mean
  KeyMoments pre(d), brute(d);
  pre.add(keys.data(), n, d);
  std::vector<float> row(static_cast<size_t>(d));
  for (int t = 0; t < n; ++t)
    for (int64_t p = 0; p < n_pos; ++p) {
      std::copy_n(&keys[size_t(t) * d], d, row.data());
      rope_unrotate(row.data(), d, freq, -p);  // rotate forward to position p
      brute.add(row.data(), 1, d);
    }
  const KeyMoments s = rope_spread(pre, freq, n_pos);
  for (int i = 0; i < d; ++i) {
    EXPECT_NEAR(s.sum[size_t(i)] / double(s.n), brute.sum[size_t(i)] / double(brute.n), 1e-5) << i;
    for (int j = 0; j <= i; ++j)
      EXPECT_NEAR(s.outer[size_t(i * d + j)] / double(s.n), brute.outer[size_t(i * d + j)] / double(brute.n), 1e-5)
          << i << "," << j;
  }
  // Unrotating undoes rotating.
  std::copy_n(keys.data(), d, row.data());
  rope_unrotate(row.data(), d, freq, 11);
  rope_unrotate(row.data(), d, freq, -11);
  for (int i = 0; i < d; ++i) EXPECT_NEAR(row[size_t(i)], keys[size_t(i)], 1e-5);
}

}  // namespace
}  // namespace lr::kv
