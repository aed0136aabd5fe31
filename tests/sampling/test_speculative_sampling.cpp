// Speculative sampling's rule (sampling/sampler.h Sampler::verify) on a
// vocabulary of six tokens: the tokens it returns follow the target's
// distribution whatever the draft's, and drafts are taken as often as the
// rule says, sum_x min(p(x), q(x)).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "sampling/sampler.h"

namespace lr {
namespace {

// Pearson's statistic of counts against the probabilities p (of n draws).
double chi_square(const std::vector<int>& counts, const std::vector<double>& p, int n) {
  double x2 = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " has no probability";
      continue;
    }
    const double e = p[i] * n;
    x2 += (counts[i] - e) * (counts[i] - e) / e;
  }
  return x2;
}

// The target's distribution over all six tokens (zeros where its filters cut).
std::vector<double> dense(const TokenDist& d, int n) {
  std::vector<double> p(size_t(n), 0.0);
  for (size_t i = 0; i < d.ids.size(); ++i) p[size_t(d.ids[i])] = d.p[i];
  return p;
}

// Softmax at temperature 1, no filters.
SamplerParams unfiltered() {
  SamplerParams p;
  p.temperature = 1.f;
  p.top_k = 0;
  p.top_p = 1.f;
  p.min_p = 0.f;
  return p;
}

const std::vector<float> kLogits = {1.0f, 2.2f, 0.1f, -0.5f, 1.7f, 0.9f};

struct Case {
  const char* name;
  SamplerParams target;
  std::vector<float> logits;  // the target's
  TokenDist q;                // the draft's
};

TEST(SpeculativeSampling, TokensFollowTheTargetWhateverTheDraft) {
  constexpr int kVocab = 6, kDraws = 60000;
  const SamplerParams plain = unfiltered();
  SamplerParams filtered = plain;  // top-k cuts two tokens the draft proposes
  filtered.temperature = 0.7f;
  filtered.top_k = 4;
  SamplerParams greedy = plain;
  greedy.temperature = 0.f;
  const std::vector<float>& logits = kLogits;
  const std::vector<Case> cases = {
      // a draft close to the target, one far from it, one on tokens the target cuts
      {"close", plain, logits, {{0, 1, 2, 3, 4, 5}, {0.12, 0.38, 0.05, 0.03, 0.27, 0.15}}},
      {"far", plain, logits, {{0, 2, 3}, {0.2, 0.5, 0.3}}},
      {"filtered", filtered, logits, {{1, 2, 3, 4}, {0.1, 0.4, 0.4, 0.1}}},
      {"greedy target", greedy, logits, {{1, 4}, {0.5, 0.5}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Sampler target(c.target);
    const std::vector<double> p = dense(target.distribution(c.logits.data(), kVocab, {}), kVocab);
    double want_taken = 0;  // the rule's acceptance rate
    for (size_t i = 0; i < c.q.ids.size(); ++i)
      want_taken += std::min(p[size_t(c.q.ids[i])], c.q.p[i]);
    SamplerParams sp = c.target;
    sp.seed = 7;
    Sampler s(sp);
    std::mt19937_64 draft_rng(11);
    std::vector<int> counts(kVocab, 0);
    int taken = 0;
    for (int i = 0; i < kDraws; ++i) {
      const int32_t d = draw(c.q, draft_rng);
      const Sampler::Verdict v = s.verify(c.logits.data(), kVocab, {}, 0, nullptr, d, c.q);
      ASSERT_TRUE(v.id >= 0 && v.id < kVocab);
      ASSERT_EQ(v.taken, v.id == d);  // a rejection never returns the drafted token
      ++counts[size_t(v.id)];
      taken += v.taken;
    }
    // df <= 5: P(chi2 > 25.7) = 1e-4 for a rule that is right.
    EXPECT_LT(chi_square(counts, p, kDraws), 25.7);
    // The acceptance rate: a binomial of kDraws, within 5 standard deviations.
    const double sd = std::sqrt(want_taken * (1 - want_taken) / kDraws);
    EXPECT_NEAR(double(taken) / kDraws, want_taken, 5 * sd + 1e-12);
  }
}

// The rule's statistic tells a wrong rule apart: taking every drafted token
// gives the draft's distribution, far from the target's.
TEST(SpeculativeSampling, TheTestSeesARuleThatTakesEveryDraft) {
  constexpr int kVocab = 6, kDraws = 60000;
  const SamplerParams sp = unfiltered();
  const std::vector<float>& logits = kLogits;
  const TokenDist q{{0, 1, 2, 3, 4, 5}, {0.12, 0.38, 0.05, 0.03, 0.27, 0.15}};
  Sampler target(sp);
  const std::vector<double> p = dense(target.distribution(logits.data(), kVocab, {}), kVocab);
  std::mt19937_64 rng(11);
  std::vector<int> counts(kVocab, 0);
  for (int i = 0; i < kDraws; ++i) ++counts[size_t(draw(q, rng))];
  EXPECT_GT(chi_square(counts, p, kDraws), 100.0);
}

// The distribution sample() draws from: its filters, in ascending ids.
TEST(SpeculativeSampling, DistributionIsWhatSampleDrawsFrom) {
  const std::vector<float>& logits = kLogits;
  SamplerParams sp = unfiltered();
  sp.top_k = 3;
  const TokenDist d = Sampler(sp).distribution(logits.data(), 6, {});
  ASSERT_EQ(d.ids, (std::vector<int32_t>{0, 1, 4}));
  const double z = std::exp(1.0) + std::exp(2.2) + std::exp(1.7);
  EXPECT_NEAR(d.p[0], std::exp(1.0) / z, 1e-6);
  EXPECT_NEAR(d.p[1], std::exp(2.2) / z, 1e-6);
  EXPECT_NEAR(d.p[2], std::exp(1.7) / z, 1e-6);
  EXPECT_EQ(d.prob(3), 0.0);
  EXPECT_NEAR(d.max(), std::exp(2.2) / z, 1e-6);
  sp.temperature = 0.f;  // greedy: certain
  const TokenDist g = Sampler(sp).distribution(logits.data(), 6, {});
  EXPECT_EQ(g.ids, (std::vector<int32_t>{1}));
  EXPECT_EQ(g.p, (std::vector<double>{1.0}));
  // A grammar's mask: only the allowed tokens, renormalized.
  const std::vector<uint8_t> allowed = {1, 0, 1, 0, 0, 1};
  sp.temperature = 1.f;
  sp.top_k = 0;
  const TokenDist m = Sampler(sp).distribution(logits.data(), 6, {}, 0, allowed.data());
  ASSERT_EQ(m.ids, (std::vector<int32_t>{0, 2, 5}));
  EXPECT_NEAR(m.p[0] + m.p[1] + m.p[2], 1.0, 1e-12);
}

}  // namespace
}  // namespace lr
