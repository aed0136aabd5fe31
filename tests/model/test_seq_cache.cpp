// The KV-cache interface of the CPU executors (backend/cpu/exec/seq_cache.h)
// taken directly: what a kind's append stores and what its attend returns,
// against the attention kernel over the same rows.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/exec/seq_cache.h"
#include "backend/cpu/kernels/attention_kernels.h"
#include "model_test_util.h"

namespace lr {
namespace {

std::vector<float> normal(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

// Dense f32: append writes the rows of KV head h where dense() shows them,
// and attend for position p over one part is the kernel's result over
// [0, p] bit for bit; over two parts, merged, the same within rounding.
TEST(SeqCache, DenseAppendsTheRowsAndAttendsOverThem) {
  test::TempDir t;
  const Model m = load_model(test::write_tiny(t, test::key_cache_spec(), "m.gguf"), std::nullopt);
  const Config& c = m.weights->cfg;  // head_dim 32, 2 KV heads, groups of 3
  BackendOptions o;
  o.ctx = 32;
  auto cache = cpu::make_seq_cache(*m.weights, o, KvMode::Dense, /*batched=*/true, 32);
  ASSERT_NE(cache->dense(), nullptr);
  EXPECT_EQ(cache->bytes(), 2ull * c.n_layers * c.n_kv_heads * 32 * c.head_dim * 4);
  const int hd = c.head_dim, g = c.n_heads / c.n_kv_heads, n = 11, kv = c.kv_dim();
  const std::vector<float> K = normal(size_t(n) * kv, 1), V = normal(K.size(), 2),
                           q = normal(size_t(g) * hd, 3);
  cache->append(1, 1, 0, K.data() + hd, V.data() + hd, 5, kv, nullptr, 0, g);
  cache->append(1, 1, 5, K.data() + 5 * kv + hd, V.data() + 5 * kv + hd, n - 5, kv, nullptr, 0, g);
  std::vector<float> own(size_t(n) * hd), vown(own.size());
  for (int j = 0; j < n; ++j) {
    std::copy_n(&K[size_t(j * kv + hd)], hd, &own[size_t(j * hd)]);
    std::copy_n(&V[size_t(j * kv + hd)], hd, &vown[size_t(j * hd)]);
  }
  EXPECT_EQ(std::memcmp(cache->dense()->key(1, 1, 0), own.data(), own.size() * 4), 0);
  EXPECT_EQ(std::memcmp(cache->dense()->value(1, 1, 0), vown.data(), vown.size() * 4), 0);

  const float scale = 0.125f;
  const size_t G = static_cast<size_t>(g);
  std::vector<float> m1(G), l1(G), a1(G * size_t(hd)), m2(G), l2(G), a2(G * size_t(hd));
  cache->attend(1, 1, 0, n - 1, q.data(), g, 0, 1, scale, m1.data(), l1.data(), a1.data());
  cpu::attend_partial(q.data(), g, hd, own.data(), vown.data(), hd, 0, n, scale, m2.data(),
                      l2.data(), a2.data());
  EXPECT_EQ(m1, m2);
  EXPECT_EQ(l1, l2);
  EXPECT_EQ(a1, a2);
  {  // A windowed layer's query: the positions [5, n) only.
    std::vector<float> wm1(G), wl1(G), wa1(a1.size()), wm2(G), wl2(G), wa2(a1.size());
    cache->attend(1, 1, 5, n - 1, q.data(), g, 0, 1, scale, wm1.data(), wl1.data(), wa1.data());
    cpu::attend_partial(q.data(), g, hd, own.data(), vown.data(), hd, 5, n, scale, wm2.data(),
                        wl2.data(), wa2.data());
    EXPECT_EQ(wm1, wm2);
    EXPECT_EQ(wl1, wl2);
    EXPECT_EQ(wa1, wa2);
    EXPECT_NE(wa1, a1);
  }

  // Two parts of [0, n), merged, against the one part normalized.
  std::vector<float> pm(2 * G), pl(2 * G), pa(2 * G * size_t(hd)), out(static_cast<size_t>(hd));
  for (int part = 0; part < 2; ++part)
    cache->attend(1, 1, 0, n - 1, q.data(), g, part, 2, scale, &pm[size_t(part * g)],
                  &pl[size_t(part * g)], &pa[size_t(part * g * hd)]);
  for (int h = 0; h < g; ++h) {
    cpu::attend_merge(2, &pm[size_t(h)], &pl[size_t(h)], g, &pa[size_t(h * hd)], int64_t(g) * hd,
                      hd, out.data());
    for (int i = 0; i < hd; ++i)
      EXPECT_NEAR(out[size_t(i)], a2[size_t(h * hd + i)] / l2[size_t(h)], 1e-5);
  }
}

}  // namespace
}  // namespace lr
