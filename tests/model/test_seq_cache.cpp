// The KV-cache interface of the CPU executors (backend/cpu/exec/seq_cache.h)
// taken directly: what a kind's append stores and what its attend returns,
// against the attention kernel over the same rows; a prompt's rows attended
// together against each row's own attend.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <vector>

#include "backend/cpu/exec/seq_cache.h"
#include "backend/cpu/kernels/attention_kernels.h"
#include "core/thread_pool.h"
#include "model_test_util.h"
#include "runtime/session.h"

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

// attend_rows gives each of a prompt's rows the bits attend gives it alone:
// a dense cache, f32 or f16 (in tiles), a session's typed cache while the
// prompt is staged (its own rows in tiles, the history from the stored form,
// in tiles of rows for f16/q8_0/q4_0, rotated or not) and a batch slot's
// (in tiles of rows; KIVI's row by row). Row partials land `stride` apart and nothing
// else is written.
TEST(SeqCache, PromptRowsTogetherAreEachRowsAttend) {
  test::TempDir t;
  const Model m = load_model(test::write_tiny(t, test::key_cache_spec(), "m.gguf"), std::nullopt);
  const Config& c = m.weights->cfg;
  const int hd = c.head_dim, g = c.n_heads / c.n_kv_heads, kv = c.kv_dim(), ctx = 96;
  const int p0 = 37, n = 41;  // the prompt's second call: rows p0 .. p0 + n - 1
  const std::vector<float> K = normal(size_t(p0 + n) * kv, 4), V = normal(K.size(), 5),
                           Q = normal(size_t(p0 + n) * size_t(c.n_heads) * hd, 6);
  const int64_t q_stride = int64_t(c.n_heads) * hd, stride = g + 2;
  ThreadPool pool(1);
  using KV = std::pair<kv::KeyType, std::optional<kv::ValueType>>;
  for (auto [type, values] :
       {KV{kv::KeyType::F32, {}}, KV{kv::KeyType::F16, {}}, KV{kv::KeyType::Q8_0, {}},
        KV{kv::KeyType::Q4_0Rot, {}}, KV{kv::KeyType::Q4_0Rot, kv::ValueType::Q8_0Rot},
        KV{kv::KeyType::F16, kv::ValueType::Q4_0}, KV{kv::KeyType::Kivi2, {}}}) {
    for (bool batched : {false, true}) {
      SCOPED_TRACE(testing::Message()
                   << kv::key_type_name(type) << " " << (values ? kv::value_type_name(*values) : "")
                   << (batched ? " batch" : ""));
      BackendOptions o;
      o.ctx = ctx;
      o.keys.type = type;
      o.keys.value_type = values;
      auto cache = cpu::make_seq_cache(*m.weights, o, KvMode::Dense, batched, ctx);
      for (auto [from, count] : {std::pair{0, p0}, std::pair{p0, n}}) {
        if (!batched) cache->begin_call(from, count);  // a batch slot encodes as it appends
        for (int l = 0; l < c.n_layers; ++l)
          for (int h = 0; h < c.n_kv_heads; ++h)
            cache->append(l, h, from, &K[size_t(from * kv + h * hd)],
                          &V[size_t(from * kv + h * hd)], count, kv,
                          &Q[size_t(from * q_stride + h * g * hd)], q_stride, g);
        if (from == 0 && !batched) cache->end_call(pool);
      }
      const int l = c.n_layers - 1, h = 1;
      const float* q = &Q[size_t(p0 * q_stride + h * g * hd)];
      std::vector<float> rm(size_t(n * stride), 7.f), rl(rm), racc(rm.size() * size_t(hd), 7.f);
      cache->attend_rows(l, h, p0, n, q, q_stride, g, 0.125f,
                         {rm.data(), rl.data(), racc.data(), stride, stride * hd});
      for (int r = 0; r < n; ++r) {
        std::vector<float> m1(static_cast<size_t>(g)), l1(m1), a1(static_cast<size_t>(g * hd));
        cache->attend(l, h, 0, p0 + r, q + r * q_stride, g, 0, 1, 0.125f, m1.data(), l1.data(),
                      a1.data());
        const size_t at = size_t(r * stride);
        EXPECT_EQ(std::memcmp(&rm[at], m1.data(), m1.size() * 4), 0) << "row " << r;
        EXPECT_EQ(std::memcmp(&rl[at], l1.data(), l1.size() * 4), 0) << "row " << r;
        EXPECT_EQ(std::memcmp(&racc[at * size_t(hd)], a1.data(), a1.size() * 4), 0) << "row " << r;
        for (int64_t i = g; i < stride; ++i) EXPECT_EQ(rm[at + size_t(i)], 7.f);
      }
      if (!batched) cache->end_call(pool);
    }
  }
}

// The default cache (f16 keys and values) as a session holds it: every row
// rounded as it is put (logits near the f32 cache's, not equal), its
// statistics those of 16-bit keys over the positions held, and a rewound
// session's tokens cut back.
TEST(SeqCache, F16SessionCacheAndItsStatistics) {
  test::TempDir t;
  const Model m = load_model(test::write_tiny(t, test::key_cache_spec(), "m.gguf"), std::nullopt);
  const Config& c = m.weights->cfg;
  const int V = c.vocab;
  BackendOptions o;
  o.ctx = 128;
  o.cpu.n_threads = 2;
  std::vector<int32_t> toks(71);
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = int32_t((i * 37 + 11) % size_t(V));
  std::vector<float> f32(size_t(V) * toks.size()), f16(f32.size());
  make_session(m, ExecPath::Fast, o)->forward(toks.data(), 71, f32.data(), true);
  o.keys.type = kv::KeyType::F16;
  ASSERT_TRUE(o.keys.half());
  auto s = make_session(m, ExecPath::Fast, o);
  s->forward(toks.data(), 40, f16.data(), true);
  s->forward(&toks[40], 31, &f16[size_t(40) * size_t(V)], true);
  const kv::KeyCacheStats st = s->key_stats();
  EXPECT_EQ(st.type, kv::KeyType::F16);
  EXPECT_EQ(st.value_type, kv::ValueType::F16);
  EXPECT_EQ(st.tokens, 71);
  EXPECT_EQ(st.streams, c.n_layers * c.n_kv_heads);
  EXPECT_EQ(st.held.total(), uint64_t(71) * st.streams * c.head_dim * 2);
  EXPECT_EQ(st.true_bits(), 16.0);
  EXPECT_EQ(st.allocated.total(), uint64_t(128) * st.streams * c.head_dim * 2);
  EXPECT_EQ(s->cache_bytes(), 2 * st.allocated.total());
  double worst = 0, scale = 0;
  for (size_t i = 0; i < f32.size(); ++i) {
    worst = std::max(worst, double(std::fabs(f16[i] - f32[i])));
    scale = std::max(scale, double(std::fabs(f32[i])));
  }
  EXPECT_LT(worst / scale, 1e-2);
  EXPECT_GT(worst / scale, 0.0);
  s->rewind(30);
  EXPECT_EQ(s->key_stats().tokens, 30);
}

// A cache is set aside for its whole context but takes RAM for the positions
// written (core/zero_pages.h): a slot of 65536 positions that has held 16
// takes a page per layer, KV head and keys or values (dense f32 and f16),
// and a few pages per stream for q8_0 keys and values.
TEST(SeqCache, RamFollowsThePositionsWritten) {
  test::TempDir t;
  const Model m = load_model(test::write_tiny(t, test::key_cache_spec(), "m.gguf"), std::nullopt);
  const Config& c = m.weights->cfg;  // head_dim 32, 2 KV heads, groups of 3
  const uint64_t page = uint64_t(sysconf(_SC_PAGESIZE));
  const int n = 16, g = c.n_heads / c.n_kv_heads;
  const auto k = normal(size_t(n) * size_t(c.head_dim), 1), v = normal(k.size(), 2);
  const auto q = normal(size_t(n) * size_t(g) * size_t(c.head_dim), 3);
  const uint64_t streams = uint64_t(c.n_layers) * uint64_t(c.n_kv_heads);
  for (kv::KeyType type : {kv::KeyType::F32, kv::KeyType::F16, kv::KeyType::Q8_0}) {
    BackendOptions o;
    o.ctx = 65536;
    o.keys.type = type;
    if (type == kv::KeyType::Q8_0) o.keys.value_type = kv::ValueType::Q8_0;
    auto cache = cpu::make_seq_cache(*m.weights, o, KvMode::Dense, /*batched=*/true, n);
    EXPECT_EQ(cache->resident_bytes(), 0u) << kv::key_type_name(type);
    for (int l = 0; l < c.n_layers; ++l)
      for (int h = 0; h < c.n_kv_heads; ++h)
        cache->append(l, h, 0, k.data(), v.data(), n, c.head_dim, q.data(), g * c.head_dim, g);
    cache->end_step();
    const uint64_t ram = cache->resident_bytes();
    if (type == kv::KeyType::Q8_0) {
      EXPECT_GE(ram, 2 * streams * page);
      EXPECT_LE(ram, 4 * streams * page);
    } else {
      EXPECT_EQ(ram, 2 * streams * page) << kv::key_type_name(type);
    }
    EXPECT_GT(cache->bytes(), 500 * ram) << kv::key_type_name(type);
  }
}

}  // namespace
}  // namespace lr
