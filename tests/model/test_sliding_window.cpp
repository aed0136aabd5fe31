// Sliding-window layers keep a ring (kv/dense_cache.h): the Gemma 3 golden
// fixture (layers 0 and 2 attend to a window of 16 positions) on the fast
// CPU path with rings, against the reference forward (which keeps every
// position and masks) and against the batch without rings, bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "../batch_runner.h"
#include "../error_of.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/exec/seq_cache.h"
#include "backend/cpu/kernels/attention_kernels.h"
#include "core/half.h"
#include "kv/dense_cache.h"
#include "model/load.h"
#include "model_test_util.h"
#include "runtime/model.h"
#include "runtime/session.h"

namespace lr {
namespace {

const std::string kGemma = LOWRANK_SOURCE_DIR "/tests/fixtures/arch/gemma3.gguf";

std::vector<int32_t> random_tokens(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t& x : t) x = int32_t(rng() % uint32_t(vocab));
  return t;
}

// The worst difference of a's logits from b's, as a fraction of b's largest,
// over toks[0, prompt) at once and then each later token alone.
double worst_rel(Backend& a, Backend& b, const std::vector<int32_t>& toks, int prompt) {
  const int V = a.weights().cfg.vocab;
  std::vector<float> x(static_cast<size_t>(V)), y(static_cast<size_t>(V));
  double worst = 0, scale = 0;
  for (int i = 0; i < int(toks.size()); i = i == 0 ? prompt : i + 1) {
    const int n = i == 0 ? prompt : 1;
    a.forward(&toks[size_t(i)], n, x.data(), false);
    b.forward(&toks[size_t(i)], n, y.data(), false);
    for (int v = 0; v < V; ++v) {
      worst = std::max(worst, double(std::fabs(x[size_t(v)] - y[size_t(v)])));
      scale = std::max(scale, double(std::fabs(y[size_t(v)])));
    }
  }
  return worst / scale;
}

TEST(SlidingWindow, LayoutSizesTheRings) {
  const Model m = load_model(kGemma, DType::F32);
  const Config& c = m.weights->cfg;  // 4 layers, 1 KV head of 32, window 16 in layers 0 and 2
  ASSERT_EQ(c.swa_window, 16);
  ASSERT_EQ(c.n_kv_heads, 1);
  ASSERT_EQ(c.head_dim, 32);
  // Calls of up to 512 rows: a ring of 16 + 511 positions, mirrored: 1054 slots.
  const kv::DenseLayout big = kv::DenseLayout::of(c, 4096, 512);
  EXPECT_EQ(big.ring, (std::vector<int>{527, 0, 527, 0}));
  EXPECT_EQ(big.bytes(), 2ull * (1054 + 4096 + 1054 + 4096) * 32 * 4);
  EXPECT_EQ(big.full_bytes(), 2ull * 4 * 4096 * 32 * 4);
  // A ring no smaller than the context is not used.
  EXPECT_EQ(kv::DenseLayout::of(c, 1054, 512).ring, (std::vector<int>{0, 0, 0, 0}));
  EXPECT_EQ(kv::DenseLayout::of(c, 1055, 512).ring, (std::vector<int>{527, 0, 527, 0}));
  // Beside a compressed key cache: the windowed layers only.
  const kv::DenseLayout rings = kv::DenseLayout::of(c, 4096, 512, true);
  EXPECT_EQ(rings.ring, (std::vector<int>{527, -1, 527, -1}));
  EXPECT_EQ(rings.bytes(), 2ull * (1054 + 1054) * 32 * 4);
}

// A prompt of 1100 tokens (chunks of 512, 512, 76: the rings wrap) and 12
// decoded ones: the reference forward's logits, with a cache of 1/4 less.
TEST(SlidingWindow, SessionRingsGiveTheReferenceLogits) {
  const Model m = load_model(kGemma, DType::F32);
  const int V = m.weights->cfg.vocab;
  const BackendOptions o = test::backend_options(4096, 2);
  auto fast = make_session(m, ExecPath::Fast, o);
  auto ref = make_session(m, ExecPath::Reference, o);
  EXPECT_EQ(fast->cache_bytes(), kv::DenseLayout::of(m.weights->cfg, 4096, 512).bytes());
  const std::vector<int32_t> toks = random_tokens(1112, V, 7);
  EXPECT_LT(worst_rel(*fast, *ref, toks, 1100), 1e-5);

  // Cut back: 12 positions are still held (the window of a query at 1100),
  // 800 are not (the ring has overwritten them): nothing is kept then, and
  // a rewind there is refused by name.
  EXPECT_EQ(fast->rewindable(1100), 1100);
  EXPECT_EQ(fast->rewindable(300), 0);
  EXPECT_EQ(ref->rewindable(300), 300);
  const std::string e = test::error_of([&] { fast->rewind(300); });
  EXPECT_NE(e.find("cannot rewind to 300 of 1112 tokens: the sliding-window layers"),
            std::string::npos)
      << e;
  fast->rewind(1100);
  ref->rewind(1100);
  EXPECT_LT(worst_rel(*fast, *ref, {toks.begin() + 1100, toks.end()}, 12), 1e-5);
}

// A compressed key type (q8_0) keeps the windowed layers' rings in f16
// beside f16 values (in f32 beside f32 values) and compresses the full
// layers' keys: 1100 prompt tokens and 12 decoded, near the reference
// forward's logits (q8_0 keys: within 1e-2 of the logit scale), with the
// bytes of the rings plus the full layers' q8_0 keys (34 bytes a head_dim of
// 32) and their values.
TEST(SlidingWindow, CompressedKeysKeepTheRings) {
  const Model m = load_model(kGemma, DType::F32);
  const int V = m.weights->cfg.vocab;
  const std::vector<int32_t> toks = random_tokens(1112, V, 7);
  for (kv::ValueType values : {kv::ValueType::F16, kv::ValueType::F32}) {
    const bool f16 = values == kv::ValueType::F16;
    SCOPED_TRACE(f16 ? "f16 values" : "f32 values");
    BackendOptions o = test::backend_options(4096, 2);
    o.keys.type = kv::KeyType::Q8_0;
    o.keys.value_type = values;
    EXPECT_EQ(o.keys.ring_elem_bytes(), f16 ? 2 : 4);
    auto fast = make_session(m, ExecPath::Fast, o);
    auto ref = make_session(m, ExecPath::Reference, test::backend_options(4096, 2));
    const uint64_t elem = f16 ? 2 : 4, rings = 2ull * 2 * 1054 * 32 * elem,
                   full = 2ull * 4096 * (34 + 32 * elem);
    EXPECT_EQ(fast->cache_bytes(), rings + full);
    const double e = worst_rel(*fast, *ref, toks, 1100);
    EXPECT_LT(e, 1e-2);
    EXPECT_GT(e, 1e-6);  // the full layers' keys are q8_0
  }
}

// The default cache's f16 rings hold each row rounded to f16, and a windowed
// layer's query attends to them as attend_partial does to f32 rows holding
// those values, bit for bit (a ring of 16 + 3 positions, wrapped twice).
TEST(SlidingWindow, F16RingsHoldTheRoundedRows) {
  const Model m = load_model(kGemma, DType::F32);
  const Config& c = m.weights->cfg;  // 1 KV head of 32, groups of 4, window 16 in layers 0 and 2
  BackendOptions o = test::backend_options(256, 2);
  o.keys.type = kv::KeyType::F16;
  auto cache = cpu::make_seq_cache(*m.weights, o, KvMode::Dense, /*batched=*/true, 4);
  EXPECT_EQ(kv::DenseLayout::of(c, 256, 4, true, 2).bytes(), 2ull * 2 * 38 * 32 * 2);
  const int hd = c.head_dim, g = c.n_heads / c.n_kv_heads, n = 50;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> K(size_t(n) * size_t(hd)), Vv(K.size()), q(size_t(g) * size_t(hd));
  for (float& x : K) x = nd(rng);
  for (float& x : Vv) x = nd(rng);
  for (float& x : q) x = nd(rng);
  for (int p = 0; p < n; p += 2)
    cache->append(0, 0, p, &K[size_t(p * hd)], &Vv[size_t(p * hd)], 2, hd, nullptr, 0, g);
  std::vector<float> Kr(K.size()), Vr(K.size());
  for (size_t i = 0; i < K.size(); ++i) {
    Kr[i] = f16_to_f32(f32_to_f16(K[i]));
    Vr[i] = f16_to_f32(f32_to_f16(Vv[i]));
  }
  ASSERT_NE(Kr, K);
  const size_t G = size_t(g);
  std::vector<float> m1(G), l1(G), a1(G * size_t(hd)), m2(G), l2(G), a2(a1.size());
  const int p = n - 1, from = p - c.swa_window + 1;
  cache->attend(0, 0, from, p, q.data(), g, 0, 1, 0.2f, m1.data(), l1.data(), a1.data());
  cpu::attend_partial(q.data(), g, hd, Kr.data(), Vr.data(), hd, from, p + 1, 0.2f, m2.data(),
                      l2.data(), a2.data());
  EXPECT_EQ(m1, m2);
  EXPECT_EQ(l1, l2);
  EXPECT_EQ(a1, a2);
}

// Batch steps of at most 4 tokens: rings of 16 + 3 positions in a context
// of 256. Three sequences (the prompt cut at 80, 40 and 10 tokens, then 16
// generated), together: the bits of the batch that keeps every position.
TEST(SlidingWindow, BatchRingsKeepTheBits) {
  const Model m = load_model(kGemma, DType::F32);
  const std::vector<int32_t> all = random_tokens(96, m.weights->cfg.vocab, 3);
  std::vector<test::Seq> seqs;
  for (int prompt : {80, 40, 10}) seqs.push_back({all, prompt});
  const BackendOptions o = test::backend_options(256, 2);
  EXPECT_EQ(kv::DenseLayout::of(m.weights->cfg, 256, 4).ring, (std::vector<int>{19, 0, 19, 0}));
  const test::AllLogits full =
      test::run_batch(*make_cpu_batch_backend(m.weights, o, 3, 128), seqs, false, 1, 0);
  auto ringed = make_cpu_batch_backend(m.weights, o, 3, 4);
  test::expect_same_bits(test::run_batch(*ringed, seqs, true, 1, 0), full);
  // 96 positions held; the ring of 19 holds 77..95: a query at 92 attends
  // to 77..92, one at 91 to 76..91.
  EXPECT_EQ(ringed->rewindable(0, 92), 92);
  EXPECT_EQ(ringed->rewindable(0, 91), 0);
}

// The same over every compressed key type: the windowed layers' rings
// beside the full layers' compressed keys give the bits of the batch that
// keeps every position.
TEST(SlidingWindow, BatchRingsKeepTheBitsBesideCompressedKeys) {
  const Model m = load_model(kGemma, DType::F32);
  const std::vector<int32_t> all = random_tokens(96, m.weights->cfg.vocab, 3);
  std::vector<test::Seq> seqs;
  for (int prompt : {80, 40, 10}) seqs.push_back({all, prompt});
  for (kv::KeyType kind :
       {kv::KeyType::F16, kv::KeyType::Q8_0, kv::KeyType::Q4_0, kv::KeyType::Kivi2}) {
    SCOPED_TRACE(kv::key_type_name(kind));
    BackendOptions o = test::backend_options(256, 2);
    o.keys.type = kind;
    const test::AllLogits full =
        test::run_batch(*make_cpu_batch_backend(m.weights, o, 3, 128), seqs, false, 1, 0);
    auto ringed = make_cpu_batch_backend(m.weights, o, 3, 4);
    test::expect_same_bits(test::run_batch(*ringed, seqs, true, 1, 0), full);
    EXPECT_EQ(ringed->rewindable(0, 91), 0);
  }
}

}  // namespace
}  // namespace lr
