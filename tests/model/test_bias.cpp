// Biased linear maps and NEOX RoPE (what Qwen2 GGUFs carry) on synthetic
// models: a dense and a low-rank synth model rewritten as architecture
// "qwen2" with q/k/v biases. The fast CPU path and the scalar plan executor
// must equal the independent reference (which adds the biases and permutes
// the NEOX rows its own way: through the loader into interleaved order), and
// a model saved by lowrank keeps its biases. The real Qwen2.5-Coder files are
// checked against llama.cpp in test_real_models.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "../error_of.h"
#include "format/gguf.h"
#include "format/gguf_source.h"
#include "model/load.h"
#include "model/plan_transforms.h"
#include "model_test_util.h"
#include "model/save.h"
#include "runtime/model.h"
#include "runtime/session.h"

namespace lr {
namespace {

void expect_close(const std::vector<float>& a, const std::vector<float>& b, double tol, const char* what) {
  ASSERT_EQ(a.size(), b.size());
  double worst = 0, mag = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, double(std::fabs(a[i] - b[i]))), mag = std::max(mag, double(std::fabs(b[i])));
  EXPECT_LE(worst, tol * std::max(1.0, mag)) << what;
}

std::vector<float> logits(const Model& m, ExecPath p, const std::vector<int32_t>& toks) {
  auto b = make_session(m, p, test::backend_options(64, 2));
  std::vector<float> out(toks.size() * size_t(m.weights->cfg.vocab));
  b->forward(toks.data(), int(toks.size()), out.data(), true);
  // and one decode step after the prompt
  std::vector<float> one(static_cast<size_t>(m.weights->cfg.vocab));
  const int32_t next = 5;
  b->forward(&next, 1, one.data(), false);
  out.insert(out.end(), one.begin(), one.end());
  return out;
}

TEST(Bias, Qwen2SynthFastAndPlanMatchReference) {
  for (double keep : {1.0, 0.5}) {
    test::TempDir t;
    const std::string path = test::as_qwen2(t, test::write_synth(t, keep), "qwen2.gguf");
    Model m = load_model(path, DType::F32);
    ASSERT_TRUE(m.weights->cfg.rope_neox);
    ASSERT_EQ(m.weights->layers[0].k.b.cols, m.weights->cfg.kv_dim());
    ASSERT_EQ(m.weights->layers[0].o.b.rows, 0);
    const std::vector<int32_t> toks = {1, 17, 42, 99, 3, 250, 7};
    const auto ref = logits(m, ExecPath::Reference, toks);
    expect_close(logits(m, ExecPath::Fast, toks), ref, 1e-4, keep < 1 ? "fast, low-rank" : "fast, dense");
    // Without the biases the logits differ: they are applied.
    Model plain = load_model(test::write_synth(t, keep), DType::F32);
    const auto nob = logits(plain, ExecPath::Reference, toks);
    double diff = 0;
    for (size_t i = 0; i < ref.size(); ++i) diff = std::max(diff, double(std::fabs(ref[i] - nob[i])));
    EXPECT_GT(diff, 1e-2);
  }
}

TEST(Bias, SavedModelKeepsItsBiases) {
  test::TempDir t;
  const std::string path = test::as_qwen2(t, test::write_synth(t, 0.5), "qwen2.gguf");
  Model m = load_model(path, DType::F32);
  const std::string out = t.file("saved.gguf");
  save_gguf(*m.weights, *m.file, GgufSource(m.file), out, SaveOptions{});
  Model back = load_model(out, DType::F32);
  const std::vector<int32_t> toks = {1, 2, 3, 4};
  expect_close(logits(back, ExecPath::Reference, toks), logits(m, ExecPath::Reference, toks), 1e-3, "saved");
  EXPECT_EQ(back.weights->layers[1].q.b.cols, m.weights->cfg.q_dim());
}

// The legacy rung caches k and v as latents and rebuilds them from the
// output factors alone: a biased k or v is refused, not rebuilt without it.
TEST(Bias, LegacyKvRefusesABiasedKeyOrValue) {
  test::TempDir t;
  Model m = load_model(test::as_qwen2(t, test::write_synth(t, 0.5), "qwen2.gguf"), DType::F32);
  ExecOptions e;
  e.kv = KvMode::Legacy;
  e.packed = false;
  e.fused = false;
  const std::string err = test::error_of([&] { derive(*m.weights, {Target::Cpu}, e); });
  EXPECT_NE(err.find("--kv legacy rebuilds k and v from their latents without a bias, but layer "
                     "0's k projection has one (use --kv dense)"),
            std::string::npos)
      << err;
}

}  // namespace
}  // namespace lr
