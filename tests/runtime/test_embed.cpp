// Embeddings (runtime/embed.h) against llama.cpp's (llama-cpp-python
// 0.3.36 with embedding=True, normalize=True; scripts/make_embed_fixtures.py):
// the random-weight fixtures in f32, and the default model as stored.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../error_of.h"
#include "model/load.h"
#include "runtime/embed.h"
#include "runtime/model.h"

namespace lr {
namespace {

const std::string kDir = LOWRANK_SOURCE_DIR "/tests/fixtures/embed/";

nlohmann::json golden(const std::string& file) {
  std::ifstream in(kDir + file);
  return nlohmann::json::parse(in);
}

// Largest |a - b| and the cosine of two vectors.
std::pair<double, double> compare(const std::vector<float>& a, const std::vector<double>& b) {
  double worst = 0, dot = 0, na = 0, nb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(double(a[i]) - b[i]));
    dot += double(a[i]) * b[i];
    na += double(a[i]) * a[i];
    nb += b[i] * b[i];
  }
  return {worst, dot / std::sqrt(na * nb)};
}

void check(const Model& m, const nlohmann::json& cases, double tol, double min_cos) {
  Embedder e(m.weights, 256, 2);
  ASSERT_FALSE(cases.empty());
  for (const auto& c : cases) {
    SCOPED_TRACE(c["pooling"].get<std::string>() + ": " + c["text"].get<std::string>());
    const auto want = c["embedding"].get<std::vector<double>>();
    const std::vector<float> got =
        e.embed(c["tokens"].get<std::vector<int32_t>>(), parse_pooling(c["pooling"]));
    ASSERT_EQ(got.size(), want.size());
    const auto [worst, cos] = compare(got, want);
    EXPECT_LT(worst, tol);
    EXPECT_GT(cos, min_cos);
  }
}

// f32 weights (and llama.cpp's F32 KV cache): within 1e-5 of its unit
// vectors, mean and last pooling.
TEST(Embeddings, FixturesMatchLlamaCpp) {
  const nlohmann::json g = golden("golden.json")["models"];
  for (const char* name : {"llama.gguf", "qwen3.gguf"}) {
    SCOPED_TRACE(name);
    const Model m =
        load_model(std::string(LOWRANK_SOURCE_DIR "/tests/fixtures/arch/") + name, DType::F32);
    check(m, g[name], 1e-5, 1 - 1e-9);
  }
}

TEST(Embeddings, BadInputIsRefusedByName) {
  const Model m = load_model(LOWRANK_SOURCE_DIR "/tests/fixtures/arch/llama.gguf", DType::F32);
  Embedder e(m.weights, 16, 1);
  EXPECT_NE(test::error_of([&] { e.embed({}, Pooling::Mean); }).find("no tokens"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] {
              e.embed(std::vector<int32_t>(17, 5), Pooling::Mean);
            }).find("the input has 17 tokens; embeddings take at most 16"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] {
              e.embed({1, 9999}, Pooling::Last);
            }).find("token id 9999"),
            std::string::npos);
  EXPECT_NE(test::error_of([] { parse_pooling("cls"); }).find("expected mean or last"),
            std::string::npos);
}

// The default model as stored (Q4_1; prompt rows in 8-bit activations, as
// llama.cpp's, rounded apart): cosine above 0.999 (measured: 0.9995 worst).
TEST(DefaultModel, EmbeddingsMatchLlamaCpp) {
  const std::string path = default_model_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not cached";
  const Model m = load_model(path, std::nullopt);
  check(m, golden("golden_smollm2.json")["models"]["SmolLM2-135M-Instruct.Q4_1.gguf"], 2e-2, 0.999);
}

}  // namespace
}  // namespace lr
