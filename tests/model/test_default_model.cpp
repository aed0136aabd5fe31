// The default model (SmolLM2-135M-Instruct) against golden logits from
// llama.cpp (scripts/golden_logits.py) and the fast path against the
// reference. Skipped when the model is not cached (scripts/fetch-model.sh).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/load.h"
#include "runtime/model.h"
#include "sampling/sampler.h"

namespace lr {
namespace {

struct Loaded {
  Model f32, bf16;
};

const Loaded* default_model() {
  static std::unique_ptr<Loaded> m = [] {
    std::unique_ptr<Loaded> l;
    std::string path = default_model_path();
    if (!std::filesystem::exists(path)) return l;
    l = std::make_unique<Loaded>();
    l->f32 = load_model(path, DType::F32);
    l->bf16 = load_model(path, DType::BF16);
    return l;
  }();
  return m.get();
}

#define REQUIRE_MODEL()                                                                  \
  const Loaded* M = default_model();                                                     \
  if (!M) GTEST_SKIP() << "default model not cached at " << default_model_path()         \
                       << " (run scripts/fetch-model.sh)"

nlohmann::json golden() {
  std::ifstream in(LOWRANK_SOURCE_DIR "/tests/fixtures/model/golden_logits.json");
  return nlohmann::json::parse(in);
}

void check_golden(const Model& m, ExecPath path, double id_exact_tol, double logit_tol) {
  for (const auto& c : golden()["cases"]) {
    std::vector<int32_t> toks = c["tokens"].get<std::vector<int32_t>>();
    auto b = make_backend(m, path, {512, 2});
    int vocab = m.weights->cfg.vocab;
    std::vector<float> logits(toks.size() * size_t(vocab));
    b->forward(toks.data(), int(toks.size()), logits.data(), true);
    for (const auto& top : c["top5"]) {
      int pos = top["pos"];
      const float* l = &logits[size_t(pos) * vocab];
      auto ids = top["ids"].get<std::vector<int>>();
      auto want = top["logits"].get<std::vector<double>>();
      // Our own top-5 at this position.
      std::vector<int> order(static_cast<size_t>(vocab));
      for (int i = 0; i < vocab; ++i) order[size_t(i)] = i;
      std::partial_sort(order.begin(), order.begin() + 5, order.end(),
                        [&](int a, int b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
      for (int k = 0; k < 5; ++k) {
        double got = l[ids[size_t(k)]];
        EXPECT_LE(std::fabs(got - want[size_t(k)]), logit_tol * std::max(1.0, std::fabs(want[size_t(k)])))
            << c["prompt"] << " pos " << pos << " rank " << k << " id " << ids[size_t(k)];
        // Ids must match unless the golden logits of neighbouring ranks are closer
        // than the tolerance (then the order is not determined by the tolerance).
        bool tie = (k > 0 && want[size_t(k - 1)] - want[size_t(k)] < id_exact_tol) ||
                   (k < 4 && want[size_t(k)] - want[size_t(k + 1)] < id_exact_tol);
        if (!tie) {
          EXPECT_EQ(order[size_t(k)], ids[size_t(k)]) << c["prompt"] << " pos " << pos << " rank " << k;
        }
      }
    }
  }
}

TEST(DefaultModel, ReferenceMatchesLlamaCppGolden) {
  REQUIRE_MODEL();
  // f32 against f32: top-5 ids exact, logits within 1e-3 relative.
  check_golden(M->f32, ExecPath::Reference, 0.0, 1e-3);
}

TEST(DefaultModel, FastF32MatchesLlamaCppGolden) {
  REQUIRE_MODEL();
  check_golden(M->f32, ExecPath::Fast, 0.0, 1e-3);
}

TEST(DefaultModel, FastBf16MatchesLlamaCppGolden) {
  REQUIRE_MODEL();
  // bf16 weights: logits within 3% relative (stated bf16 tolerance); ids
  // exact where golden neighbours differ by more than 0.5.
  check_golden(M->bf16, ExecPath::Fast, 0.5, 3e-2);
}

const char* kPrompts[20] = {
    "The quick brown fox",
    "Once upon a time, in a small village,",
    "The theory of relativity states that",
    "Python is a programming language that",
    "The best way to learn mathematics is",
    "In the year 2050, cities will",
    "Water boils at a temperature of",
    "The history of the Roman Empire",
    "def add(a, b):\n    return",
    "A recipe for chocolate cake:",
    "The main causes of climate change are",
    "Photosynthesis is the process by which",
    "My favourite book is",
    "The stock market crashed because",
    "To install the package, run",
    "Dear hiring manager,",
    "The planets of the solar system are",
    "Machine learning models are trained by",
    "The first rule of writing is",
    "Summer holidays at the seaside",
};

TEST(DefaultModel, FastGreedyMatchesReference) {
  REQUIRE_MODEL();
  const int kSteps = 64;
  int identical = 0;
  double max_diff = 0, max_logit = 0;
  int vocab = M->f32.weights->cfg.vocab;
  for (const char* p : kPrompts) {
    std::vector<int32_t> prompt = M->f32.tokenizer->encode(p, M->f32.tokenizer->add_bos());
    auto ref = make_backend(M->f32, ExecPath::Reference, {256, 1});
    auto fast = make_backend(M->bf16, ExecPath::Fast, {256, 2});
    std::vector<float> lr_(static_cast<size_t>(vocab)), lf(static_cast<size_t>(vocab));
    ref->forward(prompt.data(), int(prompt.size()), lr_.data(), false);
    fast->forward(prompt.data(), int(prompt.size()), lf.data(), false);
    bool same = true;
    for (int s = 0; s < kSteps; ++s) {
      for (int i = 0; i < vocab; ++i) {
        max_diff = std::max(max_diff, double(std::fabs(lr_[size_t(i)] - lf[size_t(i)])));
        max_logit = std::max(max_logit, double(std::fabs(lr_[size_t(i)])));
      }
      int32_t tr = argmax(lr_.data(), vocab), tf = argmax(lf.data(), vocab);
      same = same && tr == tf;
      // Both continue on the reference's token so logits compare at every step.
      ref->forward(&tr, 1, lr_.data(), false);
      fast->forward(&tr, 1, lf.data(), false);
    }
    identical += same;
  }
  // Stated bf16 tolerance: max |logit diff| over all 20 x 64 steps below 5% of
  // the largest logit magnitude.
  EXPECT_LT(max_diff, 0.05 * max_logit) << "max diff " << max_diff << " max logit " << max_logit;
  EXPECT_GE(identical, 18) << "of 20 greedy continuations identical";
  RecordProperty("identical_continuations", identical);
  RecordProperty("max_logit_diff", std::to_string(max_diff));
  std::printf("greedy 64-token continuations identical: %d/20; max |logit diff| %.4f (max |logit| %.2f)\n",
              identical, max_diff, max_logit);
}

}  // namespace
}  // namespace lr
