// The default model (SmolLM2-135M-Instruct) against golden logits from
// llama.cpp (scripts/golden_logits.py) and the fast path against the
// reference. Skipped when the model is not cached (scripts/fetch-model.sh).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../kernels/isa_util.h"
#include "model/load.h"
#include "model_test_util.h"
#include "runtime/model.h"
#include "runtime/session.h"
#include "runtime/perplexity.h"
#include "sampling/sampler.h"

namespace lr {
namespace {

struct Loaded {
  Model f32, f16, bf16, stored;  // stored: --wtype auto, the file's Q4_1 blocks (Q8_0 embedding)
};

const Loaded* default_model() {
  static std::unique_ptr<Loaded> m = [] {
    std::unique_ptr<Loaded> l;
    std::string path = default_model_path();
    if (!std::filesystem::exists(path)) return l;
    l = std::make_unique<Loaded>();
    l->f32 = load_model(path, DType::F32);
    l->f16 = load_model(path, DType::F16);
    l->bf16 = load_model(path, DType::BF16);
    l->stored = load_model(path, std::nullopt);
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
  const nlohmann::json g = golden();  // a local: iterating a temporary's member would dangle
  for (const auto& c : g["cases"]) {
    std::vector<int32_t> toks = c["tokens"].get<std::vector<int32_t>>();
    auto b = make_session(m, path, test::backend_options(512, 2));
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
        // Rank 4's lower neighbour (the golden's sixth) is unknown, so its id
        // is checked only where the tolerance is exact.
        bool tie = (k > 0 && want[size_t(k - 1)] - want[size_t(k)] < id_exact_tol) ||
                   (k < 4 && want[size_t(k)] - want[size_t(k + 1)] < id_exact_tol) ||
                   (k == 4 && id_exact_tol > 0);
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

TEST(DefaultModel, FastF16MatchesLlamaCppGolden) {
  REQUIRE_MODEL();
  // f16 weights (the fast path's default): logits within 0.5% relative; ids
  // exact where golden neighbours differ by more than 0.1.
  check_golden(M->f16, ExecPath::Fast, 0.1, 5e-3);
}

TEST(DefaultModel, FastAsStoredMatchesLlamaCppGolden) {
  REQUIRE_MODEL();
  // The file's own Q4_1 blocks (the golden is f32 on the same dequantized
  // weights). The prompt's inputs are exact f32 on the AVX2 path: logits
  // within 2% relative, ids exact where golden neighbours differ by more than
  // 0.3. On AVX-512 VNNI they are quantized to 8 bits per 32 values before
  // each product, as decode's are (matmul_blocks_int8): 3% and 0.5, the
  // bf16 weights' tolerance (measured: 2.4%).
  for (Isa isa : test::supported_isas()) {
    SCOPED_TRACE(isa_name(isa));
    test::IsaScope scope(isa);
    if (isa == Isa::Avx512Vnni)
      check_golden(M->stored, ExecPath::Fast, 0.5, 3e-2);
    else
      check_golden(M->stored, ExecPath::Fast, 0.3, 2e-2);
  }
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

// Greedy decoding, 64 steps from each of 20 prompts, on the reference (f32)
// and the fast path with f16 and bf16 weights. Both fast paths are fed the
// reference's tokens, so logits compare at every step; a continuation counts
// as identical when the fast path's argmax equals the reference's at all 64.
TEST(DefaultModel, FastGreedyMatchesReference) {
  REQUIRE_MODEL();
  const int kSteps = 64;
  const int vocab = M->f32.weights->cfg.vocab;
  struct Fast {
    const Model* model;
    const char* name;
    int identical = 0;
    double max_diff = 0;
  } fast_paths[] = {{&M->f16, "f16"}, {&M->bf16, "bf16"}};
  double max_logit = 0;
  for (const char* p : kPrompts) {
    std::vector<int32_t> prompt = M->f32.tokenizer->encode(p, M->f32.tokenizer->add_bos());
    auto ref = make_session(M->f32, ExecPath::Reference, test::backend_options(256, 1));
    std::vector<std::unique_ptr<Backend>> fast;
    std::vector<std::vector<float>> fast_logits;
    std::vector<bool> same;
    for (auto& f : fast_paths) {
      fast.push_back(make_session(*f.model, ExecPath::Fast, test::backend_options(256, 2)));
      fast_logits.emplace_back(static_cast<size_t>(vocab));
      same.push_back(true);
    }
    std::vector<float> ref_logits(static_cast<size_t>(vocab));
    ref->forward(prompt.data(), int(prompt.size()), ref_logits.data(), false);
    for (size_t k = 0; k < fast.size(); ++k)
      fast[k]->forward(prompt.data(), int(prompt.size()), fast_logits[k].data(), false);
    for (int s = 0; s < kSteps; ++s) {
      for (float v : ref_logits) max_logit = std::max(max_logit, double(std::fabs(v)));
      int32_t want = argmax(ref_logits.data(), vocab);
      for (size_t k = 0; k < fast.size(); ++k) {
        for (int i = 0; i < vocab; ++i)
          fast_paths[k].max_diff = std::max(
              fast_paths[k].max_diff, double(std::fabs(fast_logits[k][size_t(i)] - ref_logits[size_t(i)])));
        same[k] = same[k] && argmax(fast_logits[k].data(), vocab) == want;
        fast[k]->forward(&want, 1, fast_logits[k].data(), false);
      }
      ref->forward(&want, 1, ref_logits.data(), false);
    }
    for (size_t k = 0; k < fast.size(); ++k) fast_paths[k].identical += same[k];
  }
  for (const auto& f : fast_paths)
    std::printf("%s weights: greedy 64-token continuations identical to the reference: %d/20; "
                "max |logit diff| %.4f (max |logit| %.2f)\n",
                f.name, f.identical, f.max_diff, max_logit);
  // The default fast path (f16 weights): at least 18 of 20 identical, logits
  // within 1% of the largest logit magnitude.
  EXPECT_GE(fast_paths[0].identical, 18);
  EXPECT_LT(fast_paths[0].max_diff, 0.01 * max_logit);
  // bf16 weights (8-bit mantissa): logits within the stated 2% tolerance.
  EXPECT_LT(fast_paths[1].max_diff, 0.02 * max_logit);
}

// The default of run (the file's Q4_1 blocks): its decode path quantizes the
// input of every product to 8 bits per 32 values, as llama.cpp's Q4_1 x Q8_1
// does, so its logits are not the f32 reference's step by step; what it
// must keep is the model's quality. Perplexity through the decode path (one
// token per forward) within 1% of the f32 reference's on the same 8 windows
// of 256. The 8-bit inputs move a few windows' perplexity by about 1% either
// way, whichever kernel: the panels (backend/cpu/panels.h) measured +0.74%
// here (+1.0% on the first 2 windows, where the kernels before them had
// +0.3%), and on the file's first windows through the CLI (`lowrank
// perplexity -c 256 --decode`, f32 16.539 on 2 and 18.893 on 8) -0.1% and
// -0.2%, where those before had +1.2% and -0.05%.
TEST(DefaultModel, AsStoredDecodeKeepsPerplexity) {
  REQUIRE_MODEL();
  std::ifstream in(LOWRANK_SHARED_DIR "/data/wiki.eval.raw");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(text.size(), 10000u);
  const auto toks = M->f32.tokenizer->encode(text.substr(0, 20000), M->f32.tokenizer->add_bos());
  PerplexityOptions o;
  o.ctx = 256;
  o.max_chunks = 8;
  o.bos = M->f32.tokenizer->bos_id();
  auto ref = make_session(M->f32, ExecPath::Fast, test::backend_options(256, 2));
  const double want = perplexity(*ref, toks, o).ppl;
  o.decode = true;
  auto fast = make_session(M->stored, ExecPath::Fast, test::backend_options(256, 2));
  const double got = perplexity(*fast, toks, o).ppl;
  std::printf("perplexity: f32 %.4f, as stored through the decode path %.4f\n", want, got);
  EXPECT_NEAR(got, want, 0.01 * want);
}

}  // namespace
}  // namespace lr
