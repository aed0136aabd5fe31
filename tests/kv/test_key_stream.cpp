// Key streams of every compressed key type: accounting, windows, chunking,
// degenerate input, latent scoring against reconstruct-then-dot, and the
// attention kernel against its reference.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "core/half.h"
#include "kv/key_stream.h"
#include "kv_test_util.h"

namespace lr::kv {
namespace {

using test::of;
using test::svdq_cfg;

std::vector<float> keys_of(const KeyStream& s) {
  std::vector<float> out(size_t(s.size()) * size_t(s.head_dim()));
  for (int64_t j = 0; j < s.size(); ++j) s.reconstruct(j, &out[size_t(j) * size_t(s.head_dim())]);
  return out;
}

TEST(KeyStream, TrueBytesMatchTheLayoutByHand) {
  const int d = 64;
  auto k = test::lowrank_keys(100, d, 40, 0.05, 0.01, 1);
  KeyStream s(svdq_cfg(32), d, 128);
  s.append(k.data(), 100, d);
  ASSERT_NE(s.basis(), nullptr);
  EXPECT_EQ(s.basis()->rank, 32);
  // Rank 32 in 8 groups of 4 at 8,4,2,1,1,0,0,0: 20 stored channels; per
  // block of 32 tokens 32 * 4 * (8+4+2+1+1) bits = 256 B of codes and 20
  // scale/min pairs = 80 B. 100 tokens: 3 blocks, 4 in the window (32 rows
  // of f16 reserved), basis 20 x 64 f16 + 64 f32 mean.
  EXPECT_EQ(s.channels(), 20);
  EXPECT_EQ(s.compressed(), 96);
  const KeyBytes b = s.held();
  EXPECT_EQ(b.codes, 3u * 256);
  EXPECT_EQ(b.scales, 3u * 80);
  EXPECT_EQ(b.window, 32u * 64 * 2);
  EXPECT_EQ(b.basis, 20u * 64 * 2 + 64 * 4);
  EXPECT_EQ(s.allocated().codes, 4u * 256);  // capacity 128: 4 blocks
  // Nominal bits (mean(schedule) * r / d) vs the true bits of what is held.
  const double nominal = 2.0 * 32 / 64;
  const double codes_bits = double(b.codes + b.scales) * 8 / (96.0 * d);
  EXPECT_DOUBLE_EQ(codes_bits, (256.0 + 80.0) * 8 / (32.0 * 64));  // 1.3125
  EXPECT_GT(codes_bits, nominal);

  // Fixed-rate types: exact bits per element.
  struct Want {
    KeyType t;
    double bits;
  } wants[] = {{KeyType::F16, 16}, {KeyType::Q8_0, 8.5}, {KeyType::Q4_0, 4.5}};
  for (const Want& w : wants) {
    KeyStream f(of(w.t), d, 128);
    f.append(k.data(), 100, d);
    EXPECT_EQ(f.compressed(), 100);
    EXPECT_DOUBLE_EQ(double(f.held().total()) * 8 / (100.0 * d), w.bits) << key_type_name(w.t);
    EXPECT_EQ(f.allocated().total(), uint64_t(w.bits * 128 * d / 8));
  }
  // KIVI-2: 2 bits + an f16 scale and min per channel per 32 tokens = 3 bits,
  // plus a window of 128 f16 rows; 100 tokens stay in the window.
  KeyStream kv2(of(KeyType::Kivi2), d, 256);
  kv2.append(k.data(), 100, d);
  EXPECT_EQ(kv2.compressed(), 0);
  EXPECT_EQ(kv2.held().window, 128u * d * 2);
  std::vector<float> more(k.begin(), k.begin() + 28 * d);
  kv2.append(more.data(), 28, d);  // the window reaches 128: four blocks
  EXPECT_EQ(kv2.compressed(), 128);
  EXPECT_DOUBLE_EQ(double(kv2.held().codes + kv2.held().scales) * 8 / (128.0 * d), 3.0);
}

TEST(KeyStream, WindowFlushesAtExactlyOneBlockAndChunkingIsInvariant) {
  const int d = 32, G = 16;
  auto k = test::lowrank_keys(160, d, 20, 0.05, 0.01, 2);
  // A fixed (calibrated) basis, so the fit does not depend on the chunking.
  KeyMoments m(d);
  m.add(k.data(), 160, d);
  SvdqConfig sc;
  sc.rank = 32;
  sc.group_size = G;
  auto basis = std::make_shared<const SvdqBasis>(fit_basis(m, sc));
  KeyCacheConfig c = svdq_cfg(32, G);
  c.svdq.basis = BasisSource::Calibrated;
  KeyStream one(c, d, 160, basis), steps(c, d, 160, basis), mixed(c, d, 160, basis);
  one.append(k.data(), 160, d);
  for (int t = 0; t < 160; ++t) {
    steps.append(&k[size_t(t) * d], 1, d);
    EXPECT_EQ(steps.compressed(), (t + 1) / G * G) << t;  // flushed when a block fills, not before
  }
  mixed.append(k.data(), 37, d);
  mixed.append(&k[37 * d], 50, d);
  for (int t = 87; t < 160; ++t) mixed.append(&k[size_t(t) * d], 1, d);
  EXPECT_EQ(keys_of(one), keys_of(steps));
  EXPECT_EQ(keys_of(one), keys_of(mixed));
  // KIVI: the same at its window of 128.
  KeyStream a(of(KeyType::Kivi2), d, 160), b(of(KeyType::Kivi2), d, 160);
  a.append(k.data(), 128, d);
  for (int t = 0; t < 128; ++t) b.append(&k[size_t(t) * d], 1, d);
  EXPECT_EQ(keys_of(a), keys_of(b));
}

TEST(KeyStream, SequenceBasisDefersTheFitAndShortPrefillsStayExact) {
  const int d = 64;
  auto k = test::lowrank_keys(200, d, 40, 0.05, 0.01, 3);
  KeyStream s(svdq_cfg(), d, 256);
  s.append(k.data(), 1, d);  // one token: no fit, exact (f16) key
  EXPECT_EQ(s.basis(), nullptr);
  std::vector<float> r(static_cast<size_t>(d));
  s.reconstruct(0, r.data());
  for (int i = 0; i < d; ++i) EXPECT_EQ(r[size_t(i)], f16_to_f32(f32_to_f16(k[size_t(i)])));
  for (int t = 1; t < 63; ++t) s.append(&k[size_t(t) * d], 1, d);
  EXPECT_EQ(s.basis(), nullptr);  // min_fit_tokens = 64
  EXPECT_EQ(s.compressed(), 0);
  s.append(&k[63 * d], 1, d);
  ASSERT_NE(s.basis(), nullptr);
  EXPECT_EQ(s.compressed(), 64);
  // n = 0 forgets the basis; the next sequence fits its own.
  s.truncate(0);
  EXPECT_EQ(s.basis(), nullptr);
  auto other = test::lowrank_keys(100, d, 40, 0.05, 0.01, 99);
  s.append(other.data(), 100, d);
  ASSERT_NE(s.basis(), nullptr);
}

TEST(KeyStream, DegenerateInputs) {
  const int d = 64;
  std::vector<float> same(size_t(70) * d, -0.75f);
  KeyStream s(svdq_cfg(), d, 128);
  s.append(same.data(), 70, d);
  ASSERT_NE(s.basis(), nullptr);
  EXPECT_EQ(s.basis()->rank, 1);
  for (float x : keys_of(s)) EXPECT_NEAR(x, -0.75f, 1e-6);
  std::vector<float> bad(static_cast<size_t>(d), 0.f);
  bad[3] = NAN;
  try {
    s.append(bad.data(), 1, d);
    FAIL() << "NaN key accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("key 70 channel 3 is nan"), std::string::npos) << e.what();
  }
  bad[3] = INFINITY;
  EXPECT_THROW(s.append(bad.data(), 1, d), Error);
  bad[3] = 1e6f;  // outside f16
  EXPECT_THROW(s.append(bad.data(), 1, d), Error);
  EXPECT_EQ(s.size(), 70);  // nothing was appended
  std::vector<float> ok(size_t(60) * d, 0.f);
  EXPECT_THROW(s.append(ok.data(), 60, d), Error);  // 130 > capacity 128
  KeyCacheConfig q;
  q.type = KeyType::Q8_0;
  EXPECT_THROW(KeyStream(q, 48, 16), Error);  // head_dim not a multiple of 32
}

TEST(KeyStream, ZeroBitGroupsAreExactlyZero) {
  const int d = 64, n = 64;
  auto k = test::lowrank_keys(n, d, 48, 0.02, 0.01, 4);
  KeyStream s(svdq_cfg(48), d, n);
  s.append(k.data(), n, d);
  ASSERT_NE(s.basis(), nullptr);
  const auto& groups = s.basis()->groups;
  std::vector<float> l(48);
  for (int64_t j = 0; j < s.compressed(); ++j) {
    s.latents(j, l.data());
    for (const ChannelGroup& g : groups)
      for (int c = g.begin; c < g.begin + g.count; ++c) {
        if (g.bits == 0) {
          EXPECT_EQ(l[size_t(c)], 0.f);
        }
      }
  }
  EXPECT_EQ(s.channels(), 48 - 3 * 6);  // three 0-bit groups of 6 are not stored
}

TEST(KeyStream, BeatsNaiveTwoBitOnDecayingSpectraAndLosesOnFlatSmallRank) {
  // Exponentially decaying rank-64 keys (D = 128): SVDq at r = 64 vs naive
  // 2-bit per-channel quantization of the raw keys in blocks of 16 tokens.
  const int d = 128, n = 256;
  auto k = test::lowrank_keys(n, d, 64, 0.15, 0.02, 5);
  KeyCacheConfig c = svdq_cfg(64, 16);
  KeyStream s(c, d, n);
  s.append(k.data(), n, d);
  auto naive = [&](const std::vector<float>& x, int dd, int nn) {
    std::vector<float> y(x.size());
    BlockLayout lay(16, std::vector<int>(size_t(dd), 2));
    std::vector<uint16_t> sm(size_t(2 * dd));
    std::vector<uint32_t> codes(size_t(lay.code_words));
    for (int b = 0; b < nn / 16; ++b) {
      quantize_block(lay, &x[size_t(b) * 16 * dd], dd, sm.data(), codes.data());
      dequantize_block(lay, sm.data(), codes.data(), &y[size_t(b) * 16 * dd], dd);
    }
    return y;
  };
  const double e_svdq = test::mse(keys_of(s), k), e_naive = test::mse(naive(k, d, n), k);
  EXPECT_LT(e_svdq, e_naive) << e_svdq << " vs " << e_naive;
  // Flat spectrum of true rank 8 (D = 64): the small explicit rank is refused
  // outright with the default schedule...
  auto flat = test::lowrank_keys(n, 64, 8, 0.0, 0.0, 6);
  EXPECT_THROW(KeyStream(svdq_cfg(8, 16), 64, n), Error);
  // ...and an automatic rank (8 here) is degraded to a schedule without
  // zeros instead of dropping real signal: better than it would be dropped.
  KeyStream a(svdq_cfg(0, 16), 64, n);
  a.append(flat.data(), n, 64);
  ASSERT_NE(a.basis(), nullptr);
  EXPECT_EQ(a.basis()->rank, 8);
  EXPECT_TRUE(a.basis()->degraded);
  EXPECT_EQ(a.channels(), 8);
}

TEST(KeyStream, PerHeadBasesReconstructTheirOwnSubspace) {
  // Heads whose keys live in different random subspaces: each stream fits
  // its own basis and reconstructs well (a basis shared from one head would not).
  const int d = 64, n = 256;
  KeyCacheConfig c = svdq_cfg(32);
  c.svdq.schedule = {8, 8, 8, 8, 8, 8, 8, 8};
  for (uint32_t seed : {10u, 20u, 30u}) {
    auto k = test::lowrank_keys(n, d, 16, 0.05, 0.0, seed);
    KeyStream s(c, d, n);
    s.append(k.data(), n, d);
    double num = 0, den = 0;
    auto rec = keys_of(s);
    for (size_t i = 0; i < k.size(); ++i) {
      num += (rec[i] - k[i]) * (rec[i] - k[i]);
      den += (k[i] - 0.5) * (k[i] - 0.5);
    }
    EXPECT_LT(num / den, 1e-2) << seed;
  }
  auto k1 = test::lowrank_keys(n, d, 16, 0.05, 0.0, 10), k2 = test::lowrank_keys(n, d, 16, 0.05, 0.0, 20);
  KeyStream s1(c, d, n), s2(c, d, n);
  s1.append(k1.data(), n, d);
  s2.append(k2.data(), n, d);
  EXPECT_NE(s1.basis()->v, s2.basis()->v);
}

TEST(KeyStream, TruncateInsideABlockKeepsTheReconstruction) {
  const int d = 64;
  auto k = test::lowrank_keys(150, d, 40, 0.05, 0.01, 8);
  KeyStream s(svdq_cfg(), d, 256);
  s.append(k.data(), 150, d);
  auto before = keys_of(s);
  s.truncate(100);  // inside block 3 (positions 96..127)
  EXPECT_EQ(s.size(), 100);
  EXPECT_EQ(s.compressed(), 96);
  auto after = keys_of(s);
  for (size_t i = 0; i < after.size(); ++i)
    EXPECT_NEAR(after[i], before[i], 2e-3f * (1 + std::fabs(before[i])));
  s.append(&k[100 * d], 50, d);
  EXPECT_EQ(s.size(), 150);
  EXPECT_EQ(s.compressed(), 128);
}

// Query metric: keys spread over every direction, queries only along the
// directions where the keys vary least. The key metric spends its rank on
// the keys' big directions (useless for these scores); the query metric keeps
// what the scores see.
TEST(KeyStream, QueryMetricCutsTheScoreErrorOnAnisotropicQueries) {
  const int d = 32, n = 256;
  std::vector<float> k(size_t(n) * d);
  auto z = test::normal(k.size(), 31);
  for (int t = 0; t < n; ++t)
    for (int i = 0; i < d; ++i) k[size_t(t) * d + size_t(i)] = z[size_t(t) * d + size_t(i)] * (i < 16 ? 4.f : 0.5f);
  auto queries = [&](int m, uint32_t seed) {  // only dims 16..31
    auto q = test::normal(size_t(m) * d, seed);
    for (int t = 0; t < m; ++t)
      for (int i = 0; i < 16; ++i) q[size_t(t) * d + size_t(i)] = 0.f;
    return q;
  };
  const auto fitq = queries(64, 32), testq = queries(64, 33);
  auto score_mse = [&](Metric metric) {
    KeyCacheConfig c = svdq_cfg(16);
    c.svdq.schedule = {8};
    c.svdq.metric = metric;
    KeyStream s(c, d, n);
    s.add_queries(fitq.data(), 64, d);
    s.append(k.data(), n, d);
    EXPECT_EQ(s.basis()->p.empty(), metric == Metric::Key);
    double err = 0;
    std::vector<float> r(static_cast<size_t>(d));
    for (int64_t j = 0; j < n; ++j) {
      s.reconstruct(j, r.data());
      for (int t = 0; t < 64; ++t) {
        double e = 0;
        for (int i = 0; i < d; ++i) e += testq[size_t(t) * d + size_t(i)] * (k[size_t(j) * d + size_t(i)] - r[size_t(i)]);
        err += e * e;
      }
    }
    return err / (64.0 * n);
  };
  const double key = score_mse(Metric::Key), query = score_mse(Metric::Query);
  EXPECT_LT(query, 0.1 * key) << query << " vs " << key;
}

TEST(SvdqFit, QueryMetricProjectionAndReconstructionAreBiorthogonal) {
  const int d = 24, n = 200;
  auto keys = test::lowrank_keys(n, d, 20, 0.05, 0.01, 41);
  auto q = test::normal(size_t(100) * d, 42);
  KeyMoments km(d), qm(d);
  km.add(keys.data(), n, d);
  qm.add(q.data(), 100, d);
  const KeyEigen e = fit_eigen_weighted(km, qm);
  ASSERT_EQ(e.proj.size(), size_t(d) * d);
  double worst = 0;
  for (int a = 0; a < d; ++a)
    for (int b = 0; b < d; ++b) {
      double dot = 0;
      for (int i = 0; i < d; ++i) dot += double(e.proj[size_t(a * d + i)]) * e.vectors[size_t(b * d + i)];
      worst = std::max(worst, std::fabs(dot - (a == b ? 1 : 0)));
    }
  EXPECT_LT(worst, 1e-4);  // p_a . v_b = [a == b]: latents reconstruct exactly at full rank
  EXPECT_TRUE(std::is_sorted(e.sigma.rbegin(), e.sigma.rend()));
}

// Keys whose pre-RoPE distribution is the same at every position: a basis
// fitted on the post-RoPE keys of positions [0, 64) reconstructs later
// positions badly (the slow RoPE pairs have not turned yet); the RoPE-spread
// fit sees them at every position of the capacity. (RoPE raises the rank:
// six pre-RoPE directions turn through many post-RoPE ones, so rank 24.)
TEST(KeyStream, RopeSpreadFitGeneralizesToLaterPositions) {
  const int d = 32, n = 512, prompt = 64;
  std::vector<double> freq;
  for (int i = 0; i < d / 2; ++i) freq.push_back(std::pow(10000.0, -2.0 * i / d));
  auto pre = test::lowrank_keys(n, d, 6, 0.2, 0.0, 71, 1.0f);
  std::vector<float> post(pre);
  for (int p = 0; p < n; ++p) rope_unrotate(&post[size_t(p) * d], d, freq, -p);  // rotate to p
  auto later_error = [&](bool spread) {
    KeyCacheConfig c = svdq_cfg(24);
    c.svdq.schedule = {8};
    c.svdq.spread = spread;
    KeyStream s(c, d, n, nullptr, freq);
    s.append(post.data(), prompt, d);
    s.append(&post[size_t(prompt) * d], n - prompt, d);
    double e = 0, total = 0;
    std::vector<float> r(static_cast<size_t>(d));
    for (int64_t j = 256; j < s.compressed(); ++j) {
      s.reconstruct(j, r.data());
      for (int i = 0; i < d; ++i) {
        const double x = post[size_t(j) * d + size_t(i)];
        e += (r[size_t(i)] - x) * (r[size_t(i)] - x);
        total += x * x;
      }
    }
    return e / total;
  };
  const double seen = later_error(false), all = later_error(true);
  std::printf("relative error at positions 256..511: seen %.4f, spread %.4f\n", seen, all);
  EXPECT_LT(all, 0.5 * seen) << all << " vs " << seen;
  // Without the model's RoPE the spread fit cannot run: a clear error.
  KeyCacheConfig c;
  c.type = KeyType::Svdq;
  c.svdq.spread = true;
  EXPECT_THROW(KeyStream(c, d, n), Error);
}

}  // namespace
}  // namespace lr::kv
