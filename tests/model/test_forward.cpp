// The fast CPU path against the reference on small random models: logits,
// chunked vs whole prefill, KV cache behaviour and input errors.
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <tuple>

#include "backend/backend.h"
#include "backend/cpu/cpu.h"
#include "backend/ref/ref.h"
#include "core/error.h"
#include "format/gguf_source.h"
#include "model/load.h"
#include "sampling/sampler.h"
#include "model_test_util.h"
#include "tiny_model.h"

namespace lr {
namespace {

std::shared_ptr<const Weights> load_tiny(const test::TinySpec& s, DType wtype) {
  auto f = test::make_tiny_file(s);
  return load_weights(config_from_gguf(*f), GgufSource(f), Naming::Gguf, wtype);
}

std::vector<int32_t> some_tokens(int n, int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = int32_t(rng() % uint64_t(vocab));
  return t;
}

using test::rel_err;

std::vector<float> run_all(Backend& b, const std::vector<int32_t>& toks) {
  std::vector<float> logits(toks.size() * size_t(b.weights().cfg.vocab));
  b.forward(toks.data(), int(toks.size()), logits.data(), true);
  return logits;
}

TEST(Forward, FastF32MatchesReference) {
  for (bool tied : {false, true}) {
    test::TinySpec s;
    s.tied = tied;
    auto w = load_tiny(s, DType::F32);
    EXPECT_EQ(w->cfg.tied_output, tied);
    auto toks = some_tokens(37, s.vocab, 7);
    auto ref = make_reference_backend(w, test::backend_options(64, 1));
    for (int threads : {1, 2, 3}) {
      auto fast = make_cpu_backend(w, test::backend_options(64, threads));
      EXPECT_LT(rel_err(run_all(*fast, toks), run_all(*ref, toks)), 1e-5) << threads;
      ref->rewind(0);
    }
  }
}

TEST(Forward, FastBf16WithinTolerance) {
  test::TinySpec s;
  auto w32 = load_tiny(s, DType::F32);
  auto w16 = load_tiny(s, DType::BF16);
  auto toks = some_tokens(20, s.vocab, 3);
  auto ref = make_reference_backend(w32, test::backend_options(64, 1));
  auto fast = make_cpu_backend(w16, test::backend_options(64, 2));
  // bf16 keeps 8 mantissa bits (relative rounding 2^-9 per weight); the stated
  // tolerance for logits of these unit-scale models is 2% of the largest logit.
  EXPECT_LT(rel_err(run_all(*fast, toks), run_all(*ref, toks)), 2e-2);
}

TEST(Forward, TokenByTokenEqualsWholePrompt) {
  test::TinySpec s;
  auto w = load_tiny(s, DType::F32);
  auto toks = some_tokens(25, s.vocab, 11);
  for (bool reference : {true, false}) {
    auto whole = reference ? make_reference_backend(w, test::backend_options(64, 1)) : make_cpu_backend(w, test::backend_options(64, 2));
    auto step = reference ? make_reference_backend(w, test::backend_options(64, 1)) : make_cpu_backend(w, test::backend_options(64, 2));
    auto all = run_all(*whole, toks);
    std::vector<float> one(static_cast<size_t>(s.vocab));
    for (size_t t = 0; t < toks.size(); ++t) {
      step->forward(&toks[t], 1, one.data(), false);
      std::vector<float> expect(all.begin() + long(t) * s.vocab, all.begin() + long(t + 1) * s.vocab);
      ASSERT_LT(rel_err(one, expect), 1e-5) << "token " << t << (reference ? " ref" : " fast");
    }
    EXPECT_EQ(step->n_past(), 25);
  }
}

TEST(Forward, ChunkedPrefillAcrossBatchBoundary) {
  // The fast path runs prompts in chunks of at most 512 tokens.
  test::TinySpec s;
  s.n_layers = 1;
  auto w = load_tiny(s, DType::F32);
  auto toks = some_tokens(530, s.vocab, 5);
  auto ref = make_reference_backend(w, test::backend_options(600, 1));
  auto fast = make_cpu_backend(w, test::backend_options(600, 2));
  EXPECT_LT(rel_err(run_all(*fast, toks), run_all(*ref, toks)), 1e-5);
}

TEST(Forward, RewindRecomputesSameLogits) {
  test::TinySpec s;
  auto w = load_tiny(s, DType::F32);
  auto fast = make_cpu_backend(w, test::backend_options(64, 2));
  auto a = some_tokens(10, s.vocab, 1), b = some_tokens(6, s.vocab, 2);
  std::vector<float> first(static_cast<size_t>(s.vocab)), second(static_cast<size_t>(s.vocab));
  fast->forward(a.data(), 10, first.data(), false);
  fast->forward(b.data(), 6, second.data(), false);
  fast->rewind(10);
  std::vector<float> again(static_cast<size_t>(s.vocab));
  fast->forward(b.data(), 6, again.data(), false);
  EXPECT_EQ(again, second);
  EXPECT_NE(first, second);
}

TEST(Forward, CausalPrefixUnchanged) {
  test::TinySpec s;
  auto w = load_tiny(s, DType::F32);
  auto ref = make_reference_backend(w, test::backend_options(64, 1));
  auto toks = some_tokens(12, s.vocab, 9);
  auto full = run_all(*ref, toks);
  ref->rewind(0);
  std::vector<int32_t> prefix(toks.begin(), toks.begin() + 5);
  auto part = run_all(*ref, prefix);
  std::vector<float> head(full.begin(), full.begin() + long(part.size()));
  EXPECT_EQ(part, head);
}

// Records what a forward shows it: (layer, site, sum of the rows).
class Recorder final : public ActivationObserver {
 public:
  explicit Recorder(int last) : last_(last) {}
  void observe(int layer, Site site, const float* X, int n, int dim) override {
    double sum = 0;
    for (int64_t i = 0; i < int64_t(n) * dim; ++i) sum += X[i];
    seen.push_back({layer, int(site), sum});
  }
  int last_layer() const override { return last_; }
  std::vector<std::tuple<int, int, double>> seen;

 private:
  int last_;
};

// An observer that wants layers up to l stops the forward after layer l: it
// sees what a whole forward shows it of those layers, in the same order, and
// no logits are written.
TEST(Forward, ObservedForwardStopsAfterTheObserversLastLayer) {
  test::TinySpec s;
  s.n_layers = 3;
  auto w = load_tiny(s, DType::F32);
  const std::vector<int32_t> toks = some_tokens(20, s.vocab, 11);
  Recorder all(INT_MAX), two(1);
  std::vector<float> logits(size_t(s.vocab), -7.0f);
  BackendOptions o = test::backend_options(64, 2);
  o.cpu.observer = &all;
  auto a = make_cpu_backend(w, o);
  a->reset_counters();
  a->forward(toks.data(), int(toks.size()), logits.data(), false);
  EXPECT_NE(logits[0], -7.0f);
  std::fill(logits.begin(), logits.end(), -7.0f);
  o.cpu.observer = &two;
  auto b = make_cpu_backend(w, o);
  b->reset_counters();
  b->forward(toks.data(), int(toks.size()), logits.data(), false);
  // An observed forward runs step by step: a layer's steps fewer, and no head.
  EXPECT_LT(b->counters().dispatches, a->counters().dispatches * 3 / 4);
  std::vector<std::tuple<int, int, double>> want;
  for (const auto& x : all.seen)
    if (std::get<0>(x) <= 1) want.push_back(x);
  EXPECT_EQ(two.seen, want);
  ASSERT_FALSE(want.empty());
  EXPECT_EQ(std::get<0>(all.seen.back()), 2);
  EXPECT_EQ(logits[0], -7.0f);
}

TEST(Forward, ErrorsOnBadInput) {
  test::TinySpec s;
  auto w = load_tiny(s, DType::F32);
  auto fast = make_cpu_backend(w, test::backend_options(8, 1));
  std::vector<float> logits(size_t(s.vocab) * 16);
  std::vector<int32_t> nine(9, 1);
  try {
    fast->forward(nine.data(), 9, logits.data(), false);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("context is full"), std::string::npos) << e.what();
  }
  int32_t bad = s.vocab;
  EXPECT_THROW(fast->forward(&bad, 1, logits.data(), false), Error);
  auto w16 = load_tiny(s, DType::BF16);
  EXPECT_THROW(make_reference_backend(w16, test::backend_options(8, 1)), Error);
}

TEST(Load, MissingTensorShapeAndArchitectureErrors) {
  test::TinySpec s;
  auto expect_error = [](auto&& fn, const std::string& words) {
    try {
      fn();
      FAIL() << "no error, expected: " << words;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  expect_error([&] {
    auto f = gguf::File::from_bytes(test::make_tiny_gguf(s, "blk.1.ffn_up.weight"), "t.gguf");
    load_weights(config_from_gguf(*f), GgufSource(f), Naming::Gguf, DType::F32);
  }, "t.gguf: missing tensor 'blk.1.ffn_up.weight'");
  expect_error([&] {
    auto f = gguf::File::from_bytes(test::make_tiny_gguf(s, "", "gpt2"), "t.gguf");
    config_from_gguf(*f);
  }, "unsupported architecture 'gpt2'");
  expect_error([&] {
    test::TinySpec wrong = s;
    wrong.ffn_dim = 128;
    auto f = gguf::File::from_bytes(test::make_tiny_gguf(wrong), "t.gguf");
    Config c = config_from_gguf(*f);
    c.ffn_dim = 96;  // config says 96, tensors are 128 wide
    load_weights(c, GgufSource(f), Naming::Gguf, DType::F32);
  }, "tensor 'blk.0.ffn_gate.weight' has shape [128, 64], expected [96, 64]");
}

TEST(Load, QuantizedWeightsDequantizeLikeTheFile) {
  for (DType dt : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::F16, DType::BF16}) {
    test::TinySpec s;
    s.wtype = dt;
    s.n_layers = 1;
    auto f = test::make_tiny_file(s);
    auto w = load_weights(config_from_gguf(*f), GgufSource(f), Naming::Gguf, DType::F32);
    const gguf::TensorInfo& t = f->tensor("blk.0.attn_q.weight");
    std::vector<float> expect(size_t(t.elements()));
    dequantize(dt, t.data, expect.data(), int64_t(expect.size()));
    const Matrix& q = w->layers[0].q.w;
    ASSERT_EQ(size_t(q.rows * q.cols), expect.size());
    for (size_t i = 0; i < expect.size(); ++i) ASSERT_EQ(q.f32()[i], expect[i]) << i;
  }
}

// Temperature 1, no top-k or top-p: min-p (0: off) is the only filter.
SamplerParams only_min_p(float min_p, uint64_t seed) {
  SamplerParams p;
  p.top_k = 0;
  p.top_p = 1.f;
  p.min_p = min_p;
  p.temperature = 1.f;
  p.seed = seed;
  return p;
}

TEST(Sampler, GreedyAndFilters) {
  std::vector<float> l = {0.f, 3.f, 1.f, 3.f, -2.f};
  EXPECT_EQ(argmax(l.data(), 5), 1);
  SamplerParams g;
  g.temperature = 0;
  Sampler greedy(g);
  EXPECT_EQ(greedy.sample(l.data(), 5, {}), 1);
  // Plain greedy skips the candidates; through them (a zero bias) it is the same token.
  std::vector<float> last = {0.f, 3.f, 1.f, 3.f, 4.f};
  EXPECT_EQ(greedy.sample(last.data(), 5, {}), 4);
  SamplerParams gb = g;
  gb.logit_bias = {{2, 0.f}};
  Sampler biased(gb);
  EXPECT_EQ(biased.sample(l.data(), 5, {}), 1);
  EXPECT_EQ(biased.sample(last.data(), 5, {}), 4);
  // Repetition penalty demotes token 1 (3/2 = 1.5 < 3), so 3 wins.
  g.repeat_penalty = 2.f;
  Sampler pen(g);
  EXPECT_EQ(pen.sample(l.data(), 5, {1}), 3);
  // It looks at the prompt too (the history's first n_prompt tokens), as llama.cpp does.
  EXPECT_EQ(pen.sample(l.data(), 5, {1}, 1), 3);
  // top-k 1 at any temperature is greedy.
  SamplerParams k1;
  k1.top_k = 1;
  k1.temperature = 5.f;
  Sampler topk(k1);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(topk.sample(l.data(), 5, {}), 1);
  // min-p 0.5: only tokens within half the best probability survive (1 and 3).
  const SamplerParams mp = only_min_p(0.5f, 42);
  Sampler minp(mp);
  int seen1 = 0, seen3 = 0;
  for (int i = 0; i < 200; ++i) {
    int32_t t = minp.sample(l.data(), 5, {});
    ASSERT_TRUE(t == 1 || t == 3) << t;
    (t == 1 ? seen1 : seen3)++;
  }
  EXPECT_GT(seen1, 50);
  EXPECT_GT(seen3, 50);
  // Same seed, same sequence.
  Sampler a(mp), b(mp);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(a.sample(l.data(), 5, {}), b.sample(l.data(), 5, {}));
}

// No filter at all (OpenAI's defaults): tokens drawn in proportion to softmax(l / T).
TEST(Sampler, UnfilteredFollowsTheSoftmax) {
  const std::vector<float> l = {0.f, std::log(2.f), std::log(4.f), -50.f};
  Sampler s(only_min_p(0.f, 7));
  int count[4] = {};
  for (int i = 0; i < 7000; ++i) ++count[s.sample(l.data(), 4, {})];
  EXPECT_NEAR(count[0], 1000, 120);
  EXPECT_NEAR(count[1], 2000, 150);
  EXPECT_NEAR(count[2], 4000, 150);
  EXPECT_EQ(count[3], 0);
  // Presence and frequency penalties (OpenAI's): token 2 seen twice loses 1 + 2 * 1.5 = 4.
  SamplerParams g;
  g.temperature = 0;
  g.presence_penalty = 1.f;
  g.frequency_penalty = 1.5f;
  Sampler greedy(g);
  EXPECT_EQ(greedy.sample(l.data(), 4, {2, 2}), 1);
  // They count generated tokens only: as the prompt's (n_prompt 2), token 2 keeps its lead.
  EXPECT_EQ(greedy.sample(l.data(), 4, {2, 2}, 2), 2);
  EXPECT_EQ(greedy.sample(l.data(), 4, {2, 2}, 1), 1);  // generated once: log 4 - 2.5 < log 2
  // log-probabilities: log(4/7) for token 2, and the top two in order.
  std::vector<TokenLogprob> top;
  EXPECT_NEAR(token_logprob(l.data(), 4, 2, 2, &top), std::log(4.0 / 7.0), 1e-6);
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0].id, 2);
  EXPECT_EQ(top[1].id, 1);
  EXPECT_NEAR(top[1].logprob, std::log(2.0 / 7.0), 1e-6);
}

}  // namespace
}  // namespace lr
