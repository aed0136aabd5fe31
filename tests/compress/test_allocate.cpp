// Rank allocation under a global budget (compress/allocate.h).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "compress/allocate.h"
#include "compress_test_util.h"

namespace lr::compress {
namespace {

using testing::error_of;

// A [m, n] matrix's candidate in parameters, with sigma_j = decay^j.
RankCandidate geometric(int64_t m, int64_t n, double decay, int64_t g = 1) {
  RankCandidate c;
  for (int64_t j = 0; j < std::min(m, n); ++j) c.sigma.push_back(std::pow(decay, double(j)));
  c.dense_cost = double(m * n);
  c.rank_cost = double(m + n);
  c.granularity = g;
  return c;
}

double cost_of(const std::vector<RankCandidate>& cs, const std::vector<int64_t>& ranks) {
  double total = 0;
  for (size_t i = 0; i < cs.size(); ++i)
    total += ranks[i] == 0 ? cs[i].dense_cost : double(ranks[i]) * cs[i].rank_cost;
  return total;
}

TEST(UsefulRank, FactorsMustBeSmallerThanDense) {
  EXPECT_EQ(useful_rank(geometric(64, 64, 0.9)), 31);     // 31 * 128 < 4096 = 32 * 128
  EXPECT_EQ(useful_rank(geometric(64, 64, 0.9, 8)), 24);  // multiples of 8 below 32
  EXPECT_EQ(useful_rank(geometric(100, 10, 0.9)), 9);  // 9 * 110 < 1000; capped by min(m, n) = 10
  RankCandidate tiny = geometric(2, 2, 0.5);           // 1 * 4 >= 4: no rank is smaller
  EXPECT_EQ(useful_rank(tiny), 0);
}

TEST(AllocateRanks, MeetsTheBudgetWithinOneRankOfOneMatrix) {
  std::vector<RankCandidate> cs = {geometric(64, 64, 0.95), geometric(96, 32, 0.8),
                                   geometric(48, 80, 0.99), geometric(64, 64, 0.7)};
  double dense = 0, smallest_rank = 1e300;
  for (const auto& c : cs)
    dense += c.dense_cost, smallest_rank = std::min(smallest_rank, c.rank_cost);
  for (double keep : {0.3, 0.5, 0.8}) {
    const double budget = keep * dense;
    const Allocation a = allocate_ranks(cs, budget);
    ASSERT_EQ(a.ranks.size(), cs.size());
    EXPECT_DOUBLE_EQ(a.cost, cost_of(cs, a.ranks));
    EXPECT_LE(a.cost, budget) << keep;
    EXPECT_GT(a.cost + smallest_rank, budget) << keep;  // nothing else would fit... unless capped:
    for (size_t i = 0; i < cs.size(); ++i) {
      if (a.ranks[i] > 0 && a.ranks[i] < useful_rank(cs[i])) {
        EXPECT_GT(a.cost + cs[i].rank_cost, budget) << keep << " matrix " << i;
      }
    }
  }
}

TEST(AllocateRanks, FastDecayingSpectraGiveUpRankFirst) {
  // Same shapes: the matrix whose spectrum decays fast loses little per
  // dropped component, so it ends with the lower rank.
  const std::vector<RankCandidate> cs = {geometric(64, 64, 0.7), geometric(64, 64, 0.99)};
  const Allocation a = allocate_ranks(cs, 0.5 * 2 * 4096);
  ASSERT_GT(a.ranks[0], 0);
  ASSERT_GT(a.ranks[1], 0);
  EXPECT_LT(a.ranks[0], a.ranks[1]);
  // Better than the even split at the same cost (16 + 16 ranks).
  auto loss = [](const RankCandidate& c, int64_t r) {
    double all = 0, tail = 0;
    for (size_t j = 0; j < c.sigma.size(); ++j) {
      all += c.sigma[j] * c.sigma[j];
      if (int64_t(j) >= r) tail += c.sigma[j] * c.sigma[j];
    }
    return tail / all;
  };
  EXPECT_NEAR(a.loss, loss(cs[0], a.ranks[0]) + loss(cs[1], a.ranks[1]), 1e-12);
  EXPECT_LT(a.loss, loss(cs[0], 16) + loss(cs[1], 16));
}

TEST(AllocateRanks, AFlatSpectrumStaysDenseWhenTheBudgetAllows) {
  // A white-noise-like spectrum loses most at any useful rank: with room for
  // it dense, the allocation keeps it dense and compresses the other.
  std::vector<RankCandidate> cs = {geometric(64, 64, 1.0), geometric(64, 64, 0.5)};
  const Allocation a = allocate_ranks(cs, 4096 + 20 * 128);
  EXPECT_EQ(a.ranks[0], 0);
  EXPECT_EQ(a.ranks[1], 20);
}

TEST(AllocateRanks, GranularityIsRespected) {
  std::vector<RankCandidate> cs = {geometric(256, 256, 0.98, 32), geometric(256, 512, 0.97, 32)};
  const Allocation a = allocate_ranks(cs, 0.4 * (cs[0].dense_cost + cs[1].dense_cost));
  for (int64_t r : a.ranks) EXPECT_EQ(r % 32, 0) << r;
  EXPECT_GT(a.cost + 32 * cs[0].rank_cost, 0.4 * (cs[0].dense_cost + cs[1].dense_cost));
}

// The residual form's correction: rank 0 costs nothing and keeps the whole
// loss, each loss is normalised by the energy passed in.
RankCandidate correction(std::vector<double> sigma, double energy) {
  RankCandidate c;
  c.sigma = std::move(sigma);
  c.dense_cost = 64.0 * 64.0;
  c.rank_cost = 128;
  c.correction = true;
  c.energy = energy;
  return c;
}

TEST(AllocateRanks, ACorrectionTakesTheLargestRestoredShareFirst) {
  // Equal costs per rank and descending gains: the best choice of k ranks in
  // all is the k largest sigma^2 / energy over every matrix (exchange argument),
  // and the allocation must find exactly it.
  const std::vector<RankCandidate> cs = {correction({4, 3, 1, 0.5}, 100), correction({2, 2, 2, 2}, 10),
                                         correction({6, 1, 0.1, 0.1}, 450)};
  // sigma^2 / energy: {.16 .09 .01 .0025}, {.4 .4 .4 .4}, {.08 .0022 ...}
  const Allocation a = allocate_ranks(cs, 6 * 128);
  EXPECT_EQ(a.ranks, (std::vector<int64_t>{2, 4, 0}));  // .4 x4, .16, .09
  EXPECT_DOUBLE_EQ(a.cost, 6 * 128);
  const double whole = (16 + 9 + 1 + 0.25) / 100 + 16.0 / 10 + (36 + 1 + 0.02) / 450;
  EXPECT_NEAR(a.loss, whole - (4 * 0.4 + 0.16 + 0.09), 1e-12);
}

TEST(AllocateRanks, ACorrectionMayGetNothing) {
  const std::vector<RankCandidate> cs = {correction({4, 3}, 100), correction({2, 1}, 10)};
  // No budget: no correction anywhere (no error: rank 0 costs nothing).
  Allocation a = allocate_ranks(cs, 0);
  EXPECT_EQ(a.ranks, (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(a.cost, 0);
  EXPECT_NEAR(a.loss, 0.25 + 0.5, 1e-12);
  // Room for 1.5 ranks: one, where it restores most (.4 against .16).
  a = allocate_ranks(cs, 1.5 * 128);
  EXPECT_EQ(a.ranks, (std::vector<int64_t>{0, 1}));
  // max_rank caps a matrix (and useful_rank says so).
  std::vector<RankCandidate> capped = {correction({4, 3, 2, 1}, 1), correction({1, 1, 1, 1}, 1)};
  capped[0].max_rank = 2;
  EXPECT_EQ(useful_rank(capped[0]), 2);
  a = allocate_ranks(capped, 3 * 128);
  EXPECT_EQ(a.ranks, (std::vector<int64_t>{2, 1}));
}

TEST(AllocateRanks, Errors) {
  std::vector<RankCandidate> cs = {geometric(64, 64, 0.9)};
  EXPECT_EQ(error_of([&] { allocate_ranks(cs, 100); }),
            "the budget (100) is below what the smallest ranks cost (128): raise --budget");
  cs[0].rank_cost = 0;
  LR_EXPECT_CONTAINS(error_of([&] { allocate_ranks(cs, 1000); }),
                     "rank allocation: matrix 0 is malformed");
  cs[0] = RankCandidate{};
  LR_EXPECT_CONTAINS(error_of([&] { allocate_ranks(cs, 1000); }), "0 singular values");
}

}  // namespace
}  // namespace lr::compress
