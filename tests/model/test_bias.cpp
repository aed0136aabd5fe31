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

#include "format/gguf.h"
#include "format/gguf_source.h"
#include "model/load.h"
#include "model_test_util.h"
#include "model/save.h"
#include "runtime/model.h"

namespace lr {
namespace {

// The synth model at `path` as a qwen2 GGUF with random q/k/v biases.
std::string as_qwen2(const test::TempDir& t, const std::string& path, const std::string& name) {
  auto f = gguf::File::open(path);
  gguf::Writer w;
  for (const auto& [key, value] : f->metadata()) {
    std::string k = key;
    if (k.rfind("llama.", 0) == 0) k = "qwen2." + k.substr(6);
    if (k == "general.architecture") {
      w.set_string(k, "qwen2");
      continue;
    }
    w.set(k, value);
  }
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 0.5f);
  for (const auto& ti : f->tensors()) {
    w.add_tensor(ti.name, ti.dtype, ti.shape, ti.data, ti.nbytes);
    for (const char* kind : {"attn_q", "attn_k", "attn_v"}) {
      const auto dot = ti.name.find('.', 4);
      if (ti.name.rfind("blk.", 0) != 0 || dot == std::string::npos) continue;
      const std::string base = ti.name.substr(0, dot) + "." + kind;
      // One bias per map, added next to its dense weight or its output factor.
      if (ti.name != base + ".weight" && ti.name != base + ".lr_out") continue;
      const uint64_t rows = ti.shape[1];
      std::vector<float> b(rows);
      for (auto& v : b) v = nd(rng);
      w.add_tensor(base + ".bias", DType::F32, {rows}, b.data(), rows * 4);
    }
  }
  const std::string out = t.file(name);
  w.write(out);
  return out;
}

void expect_close(const std::vector<float>& a, const std::vector<float>& b, double tol, const char* what) {
  ASSERT_EQ(a.size(), b.size());
  double worst = 0, mag = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, double(std::fabs(a[i] - b[i]))), mag = std::max(mag, double(std::fabs(b[i])));
  EXPECT_LE(worst, tol * std::max(1.0, mag)) << what;
}

std::vector<float> logits(const Model& m, ExecPath p, const std::vector<int32_t>& toks) {
  auto b = make_backend(m, p, {64, 2});
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
    const std::string path = as_qwen2(t, test::write_synth(t, keep), "qwen2.gguf");
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
  const std::string path = as_qwen2(t, test::write_synth(t, 0.5), "qwen2.gguf");
  Model m = load_model(path, DType::F32);
  const std::string out = t.file("saved.gguf");
  save_gguf(*m.weights, *m.file, GgufSource(m.file), out, SaveOptions{});
  Model back = load_model(out, DType::F32);
  const std::vector<int32_t> toks = {1, 2, 3, 4};
  expect_close(logits(back, ExecPath::Reference, toks), logits(m, ExecPath::Reference, toks), 1e-3, "saved");
  EXPECT_EQ(back.weights->layers[1].q.b.cols, m.weights->cfg.q_dim());
}

}  // namespace
}  // namespace lr
