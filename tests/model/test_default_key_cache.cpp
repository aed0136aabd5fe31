// The compressed key caches on the default model: perplexity of one window
// of wiki.eval.raw (ctx 1024, first half as the prompt, second half decoded
// against the compressed cache) for each type, against the f32 cache.
// Bounds: measured values (README's table) with a margin.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "model/load.h"
#include "runtime/model.h"
#include "runtime/session.h"
#include "runtime/perplexity.h"

namespace lr {
namespace {

double ppl_with(const Model& m, const std::vector<int32_t>& toks, const kv::KeyCacheConfig& k) {
  BackendOptions o;
  o.ctx = 1024;
  o.cpu.n_threads = 2;
  o.keys = k;
  auto b = make_session(m, ExecPath::Fast, o);
  PerplexityOptions p;
  p.ctx = 1024;
  p.max_chunks = 1;
  p.decode = true;
  p.bos = m.tokenizer->bos_id();
  p.add_bos = m.tokenizer->add_bos() && p.bos >= 0;
  return perplexity(*b, toks, p).ppl;
}

TEST(DefaultModel, KeyCacheTypesPerplexity) {
  const std::string path = default_model_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "default model not cached at " << path;
  Model m = load_model(path, DType::F16);
  std::ifstream in(LOWRANK_SHARED_DIR "/data/wiki.eval.raw", std::ios::binary);
  ASSERT_TRUE(in) << "wiki.eval.raw missing";
  std::stringstream ss;
  ss << in.rdbuf();
  std::vector<int32_t> toks = m.tokenizer->encode(ss.str().substr(0, 20000), m.tokenizer->add_bos());
  ASSERT_GE(toks.size(), 1024u);
  auto cfg = [](kv::KeyType t) {
    kv::KeyCacheConfig k;
    k.type = t;
    return k;
  };
  const double f32 = ppl_with(m, toks, cfg(kv::KeyType::F32));
  const double f16 = ppl_with(m, toks, cfg(kv::KeyType::F16));
  const double q8 = ppl_with(m, toks, cfg(kv::KeyType::Q8_0));
  const double kivi = ppl_with(m, toks, cfg(kv::KeyType::Kivi2));
  kv::KeyCacheConfig sq = cfg(kv::KeyType::Svdq);
  sq.svdq.metric = kv::Metric::Query;
  sq.svdq.energy = 1.0;
  sq.svdq.schedule = {4, 4, 2, 2, 2, 1, 1, 0};
  const double svdq_query = ppl_with(m, toks, sq);
  sq.svdq.spread = true;
  const double svdq_spread = ppl_with(m, toks, sq);
  sq.svdq.spread = false;
  sq.svdq.metric = kv::Metric::Key;
  const double svdq_key = ppl_with(m, toks, sq);
  RecordProperty("ppl_f32", std::to_string(f32));
  std::printf("ppl f32 %.4f f16 %.4f q8_0 %.4f kivi2 %.4f svdq(query) %.4f svdq(query, spread) %.4f "
              "svdq(key) %.4f\n", f32, f16, q8, kivi, svdq_query, svdq_spread, svdq_key);
  EXPECT_NEAR(f16 / f32, 1.0, 5e-4);
  EXPECT_NEAR(q8 / f32, 1.0, 5e-3);
  EXPECT_GT(kivi / f32, 1.0);
  EXPECT_LT(kivi / f32, 1.25);
  // The query-aware basis beats the key-only one at the same rank and schedule.
  EXPECT_LT(svdq_query, svdq_key);
  EXPECT_LT(svdq_query / f32, 1.15);
  // Fitting as if the prompt's keys appeared at every position helps the
  // decoded half, whose positions the prompt never reached.
  EXPECT_LT(svdq_spread, svdq_query);
  EXPECT_LT(svdq_spread / f32, 1.08);
}

}  // namespace
}  // namespace lr
