// Compressed key caches in the decode runtime (--cache-type-k): every type
// against the f32 cache, SVDq's sequence and calibrated bases, determinism,
// one basis per sequence, honest byte accounting, and bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "backend/backend.h"
#include "compress/calibrate_kv.h"
#include "core/error.h"
#include "format/gguf.h"
#include "model_test_util.h"
#include "runtime/model.h"
#include "runtime/session.h"

namespace lr {
namespace {

using test::rel_err;

// 120 tokens: a 48-token prompt, then decode steps across several blocks of 32.
const std::vector<int32_t> kSeq = [] {
  std::vector<int32_t> s;
  for (int i = 0; i < 120; ++i) s.push_back(int32_t(3 + (i * 97 + 13) % 250));
  return s;
}();
constexpr int kPrompt = 48;

test::TinySpec spec() {
  return test::key_cache_spec();
}

kv::KeyCacheConfig keys(kv::KeyType t) {
  kv::KeyCacheConfig k;
  k.type = t;
  k.svdq.min_fit_tokens = 40;  // the prompt fits the basis
  return k;
}

struct Outcome {
  std::vector<float> logits;  // positions kPrompt-1 .. end, [n, vocab]
  KeyCacheStats stats;
  uint64_t cache_bytes = 0;
};

Outcome run(const Model& m, const kv::KeyCacheConfig& k, int threads, int prompt = kPrompt) {
  BackendOptions o;
  o.ctx = 128;
  o.cpu.n_threads = threads;
  o.keys = k;
  auto b = make_session(m, ExecPath::Fast, o);
  const size_t V = size_t(m.weights->cfg.vocab);
  Outcome r;
  r.logits.resize((kSeq.size() - size_t(prompt) + 1) * V);
  b->forward(kSeq.data(), prompt, r.logits.data(), false);
  for (size_t t = size_t(prompt); t < kSeq.size(); ++t)
    b->forward(&kSeq[t], 1, r.logits.data() + (t - size_t(prompt) + 1) * V, false);
  r.stats = b->key_stats();
  r.cache_bytes = b->cache_bytes();
  return r;
}

TEST(KeyCache, EveryTypeTracksTheF32Cache) {
  test::TempDir t;
  Model m = load_model(test::write_tiny(t, spec(), "tiny.gguf"), DType::F32);
  const Outcome ref = run(m, keys(kv::KeyType::F32), 1);
  // Tolerances on the relative error of all logits: f16 rounding; 8-bit and
  // 4-bit blocks; KIVI-2 and SVDq at their default (lossy) settings on
  // random, full-rank keys.
  struct Want {
    kv::KeyType t;
    double tol;
  } wants[] = {{kv::KeyType::F16, 2e-3},
               {kv::KeyType::Q8_0, 1e-2},
               {kv::KeyType::Q4_0, 1e-1},
               {kv::KeyType::Kivi2, 4e-1},
               {kv::KeyType::Svdq, 4e-1}};
  for (const Want& w : wants) {
    SCOPED_TRACE(kv::key_type_name(w.t));
    const Outcome r = run(m, keys(w.t), 2);
    const double e = rel_err(r.logits, ref.logits);
    EXPECT_LT(e, w.tol);
    EXPECT_GT(e, 0.0);  // it really is a different cache
    EXPECT_EQ(r.stats.tokens, int64_t(kSeq.size()));
    EXPECT_EQ(r.stats.streams, 2 * 2);
  }
  // SVDq at full rank with 8-bit latents is close to f16 keys.
  kv::KeyCacheConfig k8 = keys(kv::KeyType::Svdq);
  k8.svdq.energy = 1.0;
  k8.svdq.schedule = {8};
  const Outcome f16 = run(m, keys(kv::KeyType::F16), 2), s8 = run(m, k8, 2);
  EXPECT_LT(rel_err(s8.logits, f16.logits), 1e-2);
  EXPECT_EQ(s8.stats.fitted, 4);
  // The query metric (prefill queries weight the fit) stores projection rows
  // beside the reconstruction rows: twice the basis bytes at the same rank.
  kv::KeyCacheConfig kq = keys(kv::KeyType::Svdq), kk = kq;
  kq.svdq.metric = kv::Metric::Query;
  kq.svdq.rank = kk.svdq.rank = 24;
  kq.svdq.schedule = kk.svdq.schedule = {4, 2};
  const Outcome q = run(m, kq, 2), k = run(m, kk, 2);
  EXPECT_EQ(q.stats.held.basis - 4 * 32 * 4, 2 * (k.stats.held.basis - 4 * 32 * 4));
  EXPECT_LT(rel_err(q.logits, ref.logits), 4e-1);
  EXPECT_NE(q.logits, k.logits);
}

TEST(KeyCache, AccountingMatchesTheAllocations) {
  test::TempDir t;
  Model m = load_model(test::write_tiny(t, spec(), "tiny.gguf"), DType::F32);
  for (kv::KeyType type : {kv::KeyType::F16, kv::KeyType::Q8_0, kv::KeyType::Q4_0,
                           kv::KeyType::Kivi2, kv::KeyType::Svdq}) {
    SCOPED_TRACE(kv::key_type_name(type));
    const Outcome r = run(m, keys(type), 2);
    const KeyCacheStats& s = r.stats;
    // Values: f16 for the whole context (128 positions x 2 layers x 2 heads x 32).
    EXPECT_EQ(s.value_bytes, 128u * 2 * 2 * 32 * 2);
    EXPECT_EQ(r.cache_bytes, s.allocated.total() + s.value_bytes);
    EXPECT_DOUBLE_EQ(s.true_bits(), double(s.held.total()) * 8 / (120.0 * 32 * 4));
  }
  // Exact figures for f16 keys: 120 positions x 32 x 2 bytes per stream.
  const Outcome f = run(m, keys(kv::KeyType::F16), 1);
  EXPECT_EQ(f.stats.held.total(), 4u * 120 * 32 * 2);
  EXPECT_DOUBLE_EQ(f.stats.true_bits(), 16.0);
  const Outcome q = run(m, keys(kv::KeyType::Q4_0), 1);
  EXPECT_DOUBLE_EQ(q.stats.true_bits(), 4.5);
}

// Rotated keys and typed values (kv/row_codec.h) in a session: each within
// its type's tolerance of the f32 cache and not equal to it, the values'
// bytes exact for the whole context (128 positions x 2 layers x 2 heads of 32).
TEST(KeyCache, ValueTypesAndRotatedKeysTrackTheF32Cache) {
  test::TempDir t;
  Model m = load_model(test::write_tiny(t, spec(), "tiny.gguf"), DType::F32);
  const Outcome ref = run(m, keys(kv::KeyType::F32), 1);
  using K = kv::KeyType;
  using V = kv::ValueType;
  struct Want {
    K k;
    V v;
    double tol;
    uint64_t row_bytes;  // of a value row of 32
  } wants[] = {{K::Q8_0Rot, V::F16, 1e-2, 64}, {K::Q4_0Rot, V::F16, 1e-1, 64},
               {K::F32, V::Q8_0, 1e-2, 34},    {K::F32, V::Q4_0, 1e-1, 18},
               {K::F16, V::Q8_0Rot, 1e-2, 34}, {K::F16, V::Q4_0Rot, 1e-1, 18},
               {K::F32, V::F16, 2e-3, 64}};
  for (const Want& w : wants) {
    kv::KeyCacheConfig c = keys(w.k);
    c.value_type = w.v;
    SCOPED_TRACE(
        fmt::format("{} keys, {} values", kv::key_type_name(w.k), kv::value_type_name(w.v)));
    const Outcome r = run(m, c, 2);
    const double e = rel_err(r.logits, ref.logits);
    EXPECT_LT(e, w.tol);
    EXPECT_GT(e, 0.0);
    EXPECT_EQ(r.stats.value_type, w.v);
    EXPECT_EQ(r.stats.value_bytes, 128u * 2 * 2 * w.row_bytes);
    EXPECT_EQ(r.cache_bytes, r.stats.allocated.total() + r.stats.value_bytes);
  }
  // f32 keys and values named: the dense cache, the same bits as the default.
  kv::KeyCacheConfig f32 = keys(K::F32);
  f32.value_type = V::F32;
  EXPECT_EQ(run(m, f32, 1).logits, ref.logits);
}

TEST(KeyCache, SvdqIsDeterministicAcrossThreadCounts) {
  test::TempDir t;
  Model m = load_model(test::write_tiny(t, spec(), "tiny.gguf"), DType::F32);
  const Outcome a = run(m, keys(kv::KeyType::Svdq), 1), b = run(m, keys(kv::KeyType::Svdq), 3);
  EXPECT_EQ(a.stats.held.total(), b.stats.held.total());
  EXPECT_EQ(a.stats.mean_rank, b.stats.mean_rank);
  EXPECT_LT(rel_err(a.logits, b.logits), 1e-5);  // only the attention's summation order differs
}

TEST(KeyCache, EachSequenceFitsItsOwnBasis) {
  test::TempDir t;
  Model m = load_model(test::write_tiny(t, spec(), "tiny.gguf"), DType::F32);
  BackendOptions o;
  o.ctx = 128;
  o.keys = keys(kv::KeyType::Svdq);
  const size_t V = size_t(m.weights->cfg.vocab);
  std::vector<int32_t> other(64);
  for (size_t i = 0; i < other.size(); ++i) other[i] = int32_t(5 + (i * 31) % 200);
  auto first = [&](Backend& b, const std::vector<int32_t>& p) {
    std::vector<float> l(V);
    b.forward(p.data(), int(p.size()), l.data(), false);
    int32_t next = 7;
    for (int i = 0; i < 40; ++i) b.forward(&next, 1, l.data(), false);
    return l;
  };
  const std::vector<int32_t> prompt(kSeq.begin(), kSeq.begin() + 64);
  auto alone = make_session(m, ExecPath::Fast, o);
  const auto la = first(*alone, prompt);
  // The same session after another sequence (rewind(0) forgets its basis).
  auto reused = make_session(m, ExecPath::Fast, o);
  const auto lo = first(*reused, other);
  reused->rewind(0);
  const auto lb = first(*reused, prompt);
  EXPECT_EQ(la, lb);
  EXPECT_NE(la, lo);
}

TEST(KeyCache, CalibratedBasisRoundTripsThroughTheModelFile) {
  test::TempDir t;
  const std::string path = test::write_tiny(t, spec(), "tiny.gguf");
  Model m = load_model(path, DType::F32);
  const Weights::KeyCalibration cal = test::calibrate_tiny_keys(m, t);
  ASSERT_EQ(cal.mean.size(), 2u * 2 * 32);
  ASSERT_EQ(cal.vectors.size(), 2u * 2 * 32 * 32);
  EXPECT_EQ(cal.n_keys, 256);
  for (int i = 0; i < 4; ++i)  // descending singular values per stream
    EXPECT_TRUE(std::is_sorted(cal.sigma.begin() + i * 32, cal.sigma.begin() + (i + 1) * 32,
                               std::greater<float>()));
  const std::string out = t.file("tiny-kvcal.gguf");
  save_with_key_calibration(m, cal, out, "test");
  Model c = load_model(out, DType::F32);
  EXPECT_EQ(c.weights->key_calibration.mean, cal.mean);
  EXPECT_EQ(c.weights->key_calibration.vectors, cal.vectors);
  EXPECT_EQ(c.weights->key_calibration.n_keys, 256);
  EXPECT_EQ(c.weights->key_calibration.q_proj, cal.q_proj);  // the query-aware fit too
  ASSERT_EQ(cal.q_vectors.size(), 2u * 2 * 32 * 32);
  // The weights are unchanged: same logits with the f32 cache.
  EXPECT_EQ(run(c, keys(kv::KeyType::F32), 1).logits, run(m, keys(kv::KeyType::F32), 1).logits);
  // A calibrated basis is there from the first token: even a 1-token prompt
  // gets compressed blocks, and the ranks follow the stored spectrum.
  kv::KeyCacheConfig k = keys(kv::KeyType::Svdq);
  k.svdq.basis = kv::BasisSource::Calibrated;
  const Outcome r = run(c, k, 2, 1);
  EXPECT_EQ(r.stats.fitted, 4);
  EXPECT_GT(r.stats.held.codes, 0u);
  EXPECT_LT(rel_err(r.logits, run(c, keys(kv::KeyType::F32), 2, 1).logits), 4e-1);
  k.svdq.metric = kv::Metric::Query;  // the query-aware calibrated fit
  const Outcome rq = run(c, k, 2, 1);
  EXPECT_EQ(rq.stats.fitted, 4);
  EXPECT_NE(rq.logits, r.logits);
  k.svdq.metric = kv::Metric::Key;
  // Without a calibration the model says so.
  try {
    run(m, k, 1);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no calibrated key basis (run lowrank calibrate-kv"),
              std::string::npos)
        << e.what();
  }
}

TEST(KeyCache, BadCalibrationTensorsAndModesAreClearErrors) {
  test::TempDir t;
  Model m = load_model(test::write_tiny(t, spec(), "tiny.gguf"), DType::F32);
  BackendOptions o;
  o.exec.kv = KvMode::Static;
  o.keys = keys(kv::KeyType::Svdq);
  try {
    make_session(m, ExecPath::Fast, o);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("--cache-type-k svdq --cache-type-v f16 run with --kv dense"),
        std::string::npos)
        << e.what();
  }
  // A calibration tensor of the wrong shape names the tensor.
  Weights w = *m.weights;
  w.key_calibration.n_keys = 10;
  w.key_calibration.mean.assign(2 * 2 * 32, 0.f);
  w.key_calibration.sigma.assign(2 * 2 * 32, 1.f);
  w.key_calibration.vectors.assign(2 * 2 * 32 * 32, 0.f);
  const std::string good = t.file("cal.gguf");
  save_with_key_calibration(m, w.key_calibration, good, "test");
  auto f = gguf::File::open(good);
  gguf::Writer bad;
  for (const auto& [key, value] : f->metadata()) bad.set(key, value);
  for (const gguf::TensorInfo& ti : f->tensors()) {
    std::vector<uint64_t> shape = ti.shape;
    if (ti.name == "kv_calib.sigma") shape = {16, 8};  // same bytes, wrong shape
    bad.add_tensor(ti.name, ti.dtype, shape, ti.data, ti.nbytes);
  }
  const std::string bad_path = t.file("bad.gguf");
  bad.write(bad_path);
  try {
    load_model(bad_path, DType::F32);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("tensor 'kv_calib.sigma' has shape [16, 8], expected [32, 4]"),
        std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace lr
