// Typed KV caches (compressed keys, quantized values) in batched steps
// (backend/batch.h over backend/cpu/exec/seq_cache.h). Every kind is invariant to what else a
// step holds; every kind whose blocks do not depend on where a prompt is
// cut (all but SVDq fitting a basis on each sequence's first keys) is
// invariant to how the prompt is cut; and each kind's logits lie as near
// the f32 cache's as a single session's do.
#include <gtest/gtest.h>

#include <cstring>

#include "../batch_runner.h"
#include "backend/batch.h"
#include "backend/cpu/cpu.h"
#include "compress/calibrate_kv.h"
#include "model_test_util.h"
#include "runtime/model.h"
#include "runtime/session.h"

namespace lr {
namespace {

using test::AllLogits;
using test::expect_same_bits;
using test::Seq;

test::TinySpec spec() {
  return test::key_cache_spec();
}

// Prompts of 50, 9 and 70 tokens, then 14, 20 and 6 generated ones.
std::vector<Seq> seqs() {
  std::vector<Seq> out;
  int i = 0;
  for (auto [prompt, generated] : {std::pair{50, 14}, {9, 20}, {70, 6}}) {
    Seq s;
    s.prompt = prompt;
    for (int t = 0; t < prompt + generated; ++t, ++i)
      s.tokens.push_back(int32_t(3 + (i * 97 + 13) % 250));
    out.push_back(s);
  }
  return out;
}

// Small blocks and windows, so that every sequence crosses several of them.
struct Kind {
  const char* name;
  kv::KeyCacheConfig keys;
  double tol;  // relative error of all logits against the f32 cache's
};
std::vector<Kind> kinds() {
  auto k = [](kv::KeyType t) {
    kv::KeyCacheConfig c;
    c.type = t;
    c.kivi_group = 8;
    c.kivi_window = 16;
    c.svdq.group_size = 8;
    c.svdq.min_fit_tokens = 40;
    return c;
  };
  kv::KeyCacheConfig cal = k(kv::KeyType::Svdq);
  cal.svdq.basis = kv::BasisSource::Calibrated;
  auto kv_ = [&](kv::KeyType t, kv::ValueType v) {
    kv::KeyCacheConfig c = k(t);
    c.value_type = v;
    return c;
  };
  using K = kv::KeyType;
  using V = kv::ValueType;
  return {{"f16", k(K::F16), 2e-3},
          {"q8_0", k(K::Q8_0), 1e-2},
          {"q4_0", k(K::Q4_0), 1e-1},
          {"q8_0-rot", k(K::Q8_0Rot), 1e-2},
          {"q4_0-rot", k(K::Q4_0Rot), 1e-1},
          {"kivi2", k(K::Kivi2), 4e-1},
          {"svdq", k(K::Svdq), 4e-1},
          {"svdq calibrated", cal, 4e-1},
          {"f32 keys, q8_0 values", kv_(K::F32, V::Q8_0), 1e-2},
          {"f16 keys, q4_0-rot values", kv_(K::F16, V::Q4_0Rot), 1e-1},
          {"q4_0 keys and values", kv_(K::Q4_0, V::Q4_0), 2e-1}};
}

// The tiny model with a calibrated key basis in its file.
Model calibrated_model(const test::TempDir& t) {
  const std::string path = test::write_tiny(t, spec(), "tiny.gguf");
  Model m = load_model(path, DType::F32);
  save_with_key_calibration(m, test::calibrate_tiny_keys(m, t), t.file("cal.gguf"), "test");
  return load_model(t.file("cal.gguf"), std::nullopt);
}

AllLogits run_batched(const Model& m, const kv::KeyCacheConfig& keys, int threads, bool together,
                      int most, uint64_t seed, int verify = 1) {
  BackendOptions o;
  o.ctx = 128;
  o.cpu.n_threads = threads;
  o.keys = keys;
  auto batch = make_cpu_batch_backend(m.weights, o, 3, 192);
  return test::run_batch(*batch, seqs(), together, most, seed, verify);
}

// Every position's logits, all sequences, in one vector.
std::vector<float> flat(const AllLogits& a) {
  std::vector<float> out;
  for (const auto& s : a)
    for (const auto& p : s) out.insert(out.end(), p.begin(), p.end());
  return out;
}

TEST(BatchKeys, EveryKindIgnoresTheStepsOtherRows) {
  test::TempDir t;
  const Model m = calibrated_model(t);
  for (const Kind& k : kinds()) {
    SCOPED_TRACE(k.name);
    for (int threads : {1, 2}) {
      SCOPED_TRACE(threads);
      // A token per step: alone, then beside the other sequences' tokens.
      const AllLogits alone = run_batched(m, k.keys, threads, false, 1, 0);
      expect_same_bits(run_batched(m, k.keys, threads, true, 1, 0), alone);
    }
  }
}

TEST(BatchKeys, HowAPromptIsCutDoesNotChangeTheBits) {
  test::TempDir t;
  const Model m = calibrated_model(t);
  for (const Kind& k : kinds()) {
    if (k.keys.type == kv::KeyType::Svdq && k.keys.svdq.basis == kv::BasisSource::Sequence)
      continue;  // its basis is fitted on the keys cached when a chunk ends past min_fit_tokens
    SCOPED_TRACE(k.name);
    for (int threads : {1, 2}) {
      SCOPED_TRACE(threads);
      const AllLogits want = run_batched(m, k.keys, threads, false, 1, 0);
      expect_same_bits(run_batched(m, k.keys, threads, true, 4, 1), want);
      expect_same_bits(run_batched(m, k.keys, threads, true, 17, 2), want);
      expect_same_bits(run_batched(m, k.keys, threads, false, 7, 3), want);
      expect_same_bits(run_batched(m, k.keys, threads, true, 64, 4), want);
      // Generated tokens verified up to 5 at a time, every token's logits.
      expect_same_bits(run_batched(m, k.keys, threads, true, 17, 5, /*verify=*/5), want);
    }
  }
}

// Each kind's batched logits lie from the f32 cache's as a session's do
// (tests/model/test_key_cache.cpp's tolerances), and are not the f32
// cache's: the batch really stores the kind.
TEST(BatchKeys, EveryKindTracksTheF32Cache) {
  test::TempDir t;
  const Model m = calibrated_model(t);
  const std::vector<float> ref = flat(run_batched(m, {}, 2, true, 9, 5));
  for (const Kind& k : kinds()) {
    SCOPED_TRACE(k.name);
    const double e = test::rel_err(flat(run_batched(m, k.keys, 2, true, 9, 5)), ref);
    EXPECT_LT(e, k.tol);
    EXPECT_GT(e, 0.0);
  }
}

// A slot rewound to a shorter prefix (a server's next request sharing
// part of the last one's prompt) gives the bits of a slot that only ever
// held that prefix: anywhere for keys stored a token at a time, at a
// window's end for KIVI and SVDq (inside a block, the kept positions of it
// return as their reconstruction).
TEST(BatchKeys, ARewoundSlotIsAFreshOne) {
  test::TempDir t;
  const Model m = calibrated_model(t);
  const Seq s = seqs()[0];
  const int vocab = m.weights->cfg.vocab;
  for (const Kind& k : kinds()) {
    if (k.keys.type == kv::KeyType::Svdq && k.keys.svdq.basis == kv::BasisSource::Sequence)
      continue;  // a kept prefix keeps the basis fitted on the longer prompt
    SCOPED_TRACE(k.name);
    BackendOptions o;
    o.ctx = 128;
    o.keys = k.keys;
    auto used = make_cpu_batch_backend(m.weights, o, 1, 64);
    auto fresh = make_cpu_batch_backend(m.weights, o, 1, 64);
    std::vector<float> a(static_cast<size_t>(vocab)), b(a.size());
    used->step({{0, s.tokens.data(), 60, true}}, a.data());
    const bool blocks = k.keys.type == kv::KeyType::Kivi2 || k.keys.type == kv::KeyType::Svdq;
    const int cut = blocks ? 16 : 21;
    used->rewind(0, cut);
    fresh->step({{0, s.tokens.data(), cut, true}}, b.data());
    for (int p = cut; p < 40; ++p) {
      used->step({{0, &s.tokens[size_t(p)], 1, true, true}}, a.data());
      fresh->step({{0, &s.tokens[size_t(p)], 1, true, true}}, b.data());
      ASSERT_EQ(a, b) << "at position " << p;
    }
  }
}

// Speculative decoding's rollback: a verification chunk of the generated
// token and three wrong drafted ones, every token's logits, then the slot
// rewound past the wrong ones and the right tokens verified: every row is
// the bits of decoding one token a step. Every kind stored a token at a
// time (f32, f16, q8_0, q4_0); KIVI and SVDq keep a rewound block's
// positions as their reconstruction (above).
TEST(BatchKeys, ARejectedDraftIsRolledBack) {
  test::TempDir t;
  const Model m = calibrated_model(t);
  const Seq s = seqs()[0];  // a prompt of 50, 14 generated
  const int vocab = m.weights->cfg.vocab;
  std::vector<kv::KeyCacheConfig> kinds_ = {{}};
  for (const Kind& k : kinds())
    if (k.keys.type != kv::KeyType::Kivi2 && k.keys.type != kv::KeyType::Svdq)
      kinds_.push_back(k.keys);
  for (const kv::KeyCacheConfig& keys : kinds_) {
    SCOPED_TRACE(kv::key_type_name(keys.type));
    BackendOptions o;
    o.ctx = 128;
    o.keys = keys;
    auto plain = make_cpu_batch_backend(m.weights, o, 1, 64);
    auto spec = make_cpu_batch_backend(m.weights, o, 1, 64);
    std::vector<float> want(static_cast<size_t>(vocab)), got(4 * static_cast<size_t>(vocab));
    auto row = [&](int r) {
      return std::vector<float>(&got[size_t(r * vocab)], &got[size_t((r + 1) * vocab)]);
    };
    plain->step({{0, s.tokens.data(), 50, true}}, want.data());
    spec->step({{0, s.tokens.data(), 50, true}}, got.data());
    ASSERT_EQ(row(0), want);
    // Draft 3 wrong tokens after the generated token at 50.
    std::vector<int32_t> chunk = {s.tokens[50], 7, 8, 9};
    spec->step({{0, chunk.data(), 4, true, true, true}}, got.data());
    plain->step({{0, &s.tokens[50], 1, true, true}}, want.data());
    ASSERT_EQ(row(0), want);
    spec->rewind(0, 51);
    // Then drafts that are right: positions 51..53 in one chunk, 54..57 in the next.
    for (auto [from, n] : {std::pair{51, 3}, {54, 4}}) {
      spec->step({{0, &s.tokens[size_t(from)], n, true, true, true}}, got.data());
      for (int i = 0; i < n; ++i) {
        plain->step({{0, &s.tokens[size_t(from + i)], 1, true, true}}, want.data());
        ASSERT_EQ(row(i), want) << "at position " << from + i;
      }
    }
    EXPECT_EQ(spec->n_past(0), 58);
  }
}

}  // namespace
}  // namespace lr
