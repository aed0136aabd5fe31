// Llama-3.1 RoPE scaling (per-frequency factors) against llama.cpp: a tiny
// random Llama with rope_scaling "llama3", converted to GGUF by llama.cpp's
// convert_hf_to_gguf.py (which writes the factors as rope_freqs.weight), and
// llama.cpp's logits on it (scripts/make_rope_fixture.py). The factors lowrank
// computes from the config.json must be the converter's, a model saved by
// lowrank keeps them, and a malformed factor tensor is refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../error_of.h"
#include "format/gguf.h"
#include "format/gguf_source.h"
#include "model/config.h"
#include "model/load.h"
#include "model/save.h"
#include "model/scalar_ops.h"
#include "model_test_util.h"
#include "runtime/model.h"
#include "runtime/session.h"

namespace lr {
namespace {

const std::string kDir = LOWRANK_SOURCE_DIR "/tests/fixtures/model/";

nlohmann::json golden() {
  std::ifstream in(kDir + "llama3-rope.json");
  return nlohmann::json::parse(in);
}

// The fixture's GGUF rewritten: rope_freqs.weight dropped, or replaced by `factors`.
std::string rewrite(const test::TempDir& t, const std::string& name,
                    const std::vector<float>* factors) {
  auto f = gguf::File::open(kDir + "llama3-rope.gguf");
  gguf::Writer w;
  for (const auto& [key, value] : f->metadata()) w.set(key, value);
  for (const auto& ti : f->tensors())
    if (ti.name != "rope_freqs.weight")
      w.add_tensor(ti.name, ti.dtype, ti.shape, ti.data, ti.nbytes);
  if (factors)
    w.add_tensor("rope_freqs.weight", DType::F32, {factors->size()}, factors->data(),
                 factors->size() * 4);
  const std::string out = t.file(name);
  w.write(out);
  return out;
}

// max over the golden positions of |logit - llama.cpp's| / max |llama.cpp's|.
double error_vs_llamacpp(const Model& m, ExecPath path, const nlohmann::json& g) {
  const auto toks = g["tokens"].get<std::vector<int32_t>>();
  const int V = m.weights->cfg.vocab;
  auto b = make_session(m, path, test::backend_options(int(toks.size()) + 1, 2));
  std::vector<float> out(toks.size() * size_t(V));
  b->forward(toks.data(), int(toks.size()), out.data(), true);
  double worst = 0, mag = 0;
  for (size_t i = 0; i < g["positions"].size(); ++i) {
    const size_t p = g["positions"][i].get<size_t>();
    const auto want = g["logits"][i].get<std::vector<double>>();
    EXPECT_EQ(want.size(), size_t(V));
    for (int v = 0; v < V; ++v) {
      worst = std::max(worst, std::abs(double(out[p * size_t(V) + size_t(v)]) - want[size_t(v)]));
      mag = std::max(mag, std::abs(want[size_t(v)]));
    }
  }
  return worst / mag;
}

TEST(RopeScaling, Llama3GgufMatchesLlamaCpp) {
  const nlohmann::json g = golden();
  Model m = load_model(kDir + "llama3-rope.gguf", std::nullopt);
  const Config& c = m.weights->cfg;
  ASSERT_EQ(c.rope_freq_factors.size(), size_t(c.head_dim / 2));
  // The first frequency is kept, the last ones are slowed by `factor` (8).
  EXPECT_FLOAT_EQ(c.rope_freq_factors.front(), 1.f);
  EXPECT_FLOAT_EQ(c.rope_freq_factors.back(), 8.f);
  const double fast = error_vs_llamacpp(m, ExecPath::Fast, g);
  const double ref =
      error_vs_llamacpp(load_model(kDir + "llama3-rope.gguf", DType::F32), ExecPath::Reference, g);
  fmt::print("  llama3 RoPE scaling vs llama.cpp: fast {:.1e}, reference {:.1e}\n", fast, ref);
  EXPECT_LT(fast, 1e-4);
  EXPECT_LT(ref, 1e-4);
  // Without the factors the logits are far from llama.cpp's: the test sees them.
  test::TempDir t;
  Model plain = load_model(rewrite(t, "plain.gguf", nullptr), std::nullopt);
  EXPECT_TRUE(plain.weights->cfg.rope_freq_factors.empty());
  EXPECT_GT(error_vs_llamacpp(plain, ExecPath::Fast, g), 1e-2);
}

// transformers 5 writes rope_parameters (the fixture's config.json); earlier
// versions, and Llama-3.1's published config.json, rope_theta and rope_scaling.
TEST(RopeScaling, ConfigJsonGivesTheConvertersFactors) {
  const nlohmann::json g = golden();
  nlohmann::json v5 = g["config_json"], v4 = v5;
  ASSERT_TRUE(v5.contains("rope_parameters"));
  v4["rope_scaling"] = v4["rope_parameters"];
  v4["rope_theta"] = v4["rope_scaling"]["rope_theta"];
  v4["rope_scaling"].erase("rope_theta");
  v4.erase("rope_parameters");
  auto f = gguf::File::open(kDir + "llama3-rope.gguf");
  const Config gg = config_from_gguf(*f);
  test::TempDir t;
  for (const nlohmann::json& j : {v5, v4}) {
    std::ofstream(t.file("config.json")) << j.dump();
    const Config hf = config_from_hf_json(t.file("config.json"));
    EXPECT_EQ(hf.rope_theta, gg.rope_theta);
    ASSERT_EQ(hf.rope_freq_factors.size(), gg.rope_freq_factors.size());
    for (size_t i = 0; i < gg.rope_freq_factors.size(); ++i)
      EXPECT_NEAR(hf.rope_freq_factors[i], gg.rope_freq_factors[i], 1e-6 * gg.rope_freq_factors[i])
          << "frequency " << i;
  }
  const std::vector<double> inv = scalar::rope_inv_freq(gg);
  EXPECT_NEAR(inv.back(), std::pow(10000.0, -2.0 * double(inv.size() - 1) / gg.head_dim) / 8,
              1e-12);
  // Wavelengths 6.3, 19.9, 62.8, ... positions against the original context
  // of 32: the first frequency is kept, the second interpolated, the rest slowed.
  EXPECT_FLOAT_EQ(gg.rope_freq_factors[0], 1.f);
  EXPECT_GT(gg.rope_freq_factors[1], 1.f);
  EXPECT_LT(gg.rope_freq_factors[1], 8.f);
  for (size_t i = 2; i < gg.rope_freq_factors.size(); ++i)
    EXPECT_FLOAT_EQ(gg.rope_freq_factors[i], 8.f);

  nlohmann::json bad = v4;
  bad["rope_scaling"].erase("low_freq_factor");
  std::ofstream(t.file("bad.json")) << bad.dump();
  EXPECT_NE(test::error_of([&] {
              config_from_hf_json(t.file("bad.json"));
            }).find("RoPE scaling type 'llama3' needs a number 'low_freq_factor'"),
            std::string::npos);
}

TEST(RopeScaling, SavedModelKeepsTheFactors) {
  test::TempDir t;
  Model m = load_model(kDir + "llama3-rope.gguf", std::nullopt);
  save_gguf(*m.weights, *m.file, GgufSource(m.file), t.file("saved.gguf"), {});
  Model back = load_model(t.file("saved.gguf"), std::nullopt);
  EXPECT_EQ(back.weights->cfg.rope_freq_factors, m.weights->cfg.rope_freq_factors);
}

TEST(RopeScaling, MalformedFactorsAreRefusedByName) {
  test::TempDir t;
  const std::vector<float> four(4, 2.f), negative = {1, 1, 1, 1, 1, 1, 1, -2};
  EXPECT_NE(test::error_of([&] { load_model(rewrite(t, "short.gguf", &four), std::nullopt); })
                .find("tensor 'rope_freqs.weight' (RoPE frequency factors) is F32 of shape 4, "
                      "expected F32 of shape [8] (rotary dims / 2)"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] {
              load_model(rewrite(t, "neg.gguf", &negative), std::nullopt);
            }).find("RoPE frequency factor -2 must be positive"),
            std::string::npos);
}

}  // namespace
}  // namespace lr
