// Speculative decoding in the engine (runtime/engine.h draft_max,
// runtime/drafter.h) on tiny random models: prompt-lookup and greedy drafts
// give plain decoding's very tokens, sampled drafts keep the target's
// distribution (a chi-square test over 27 three-token answers), and drafts
// shorten where the draft is unsure or its guesses were rejected.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "../error_of.h"
#include "engine_test_util.h"
#include "runtime/drafter.h"

namespace lr {
namespace {

using test::expect_same;
using test::greedy;
using test::prompt;
using test::Result;
using test::Tiny;
using test::wait;

// A text that repeats itself, so the n-grams recur.
std::vector<int32_t> repeating_prompt() {
  std::vector<int32_t> p;
  for (int i = 0; i < 4; ++i)
    for (int32_t x : prompt(9, 3)) p.push_back(x);
  return p;
}

// Two greedy requests and two sampled ones.
std::vector<GenParams> mixed_params() {
  std::vector<GenParams> params;
  for (int i = 0; i < 4; ++i) {
    GenParams g = greedy(40);
    if (i % 2) g.sampling.temperature = 0.8f, g.sampling.seed = uint64_t(20 + i);
    params.push_back(g);
  }
  return params;
}

// Another random model of the tiny one's vocabulary (one layer).
Model other_model(Tiny& tiny) {
  test::TinySpec other;
  other.tokenizer = true;
  other.wtype = DType::Q4_0;
  other.ctx_train = 512;
  other.seed = 99;
  other.n_layers = 1;
  return load_model(test::write_tiny(tiny.t, other, "small.gguf"), std::nullopt);
}

BackendOptions options() {
  BackendOptions bo;
  bo.ctx = 128;
  bo.cpu.n_threads = 2;
  return bo;
}

// An engine of `slots` slots over the tiny model, drafting with `drafter`.
std::unique_ptr<Engine> drafting_engine(Tiny& tiny, std::shared_ptr<Drafter> drafter, int slots,
                                        int draft_max, int queue = 16) {
  EngineOptions eo;
  eo.step_tokens = 24;
  eo.queue = queue;
  eo.draft_max = draft_max;
  eo.draft_cost = 0.05;  // (not timed: the same drafts every run)
  eo.drafter = std::move(drafter);
  return std::make_unique<Engine>(make_cpu_batch_backend(tiny.m.weights, options(), slots, 24),
                                  *tiny.m.tokenizer, eo);
}

// The drafts of model `draft` (p_min 0: every token).
std::unique_ptr<Engine> drafting_engine(Tiny& tiny, const Model& draft, int slots, int draft_max,
                                        float p_min = 0.f) {
  return drafting_engine(
      tiny, model_drafter(make_cpu_batch_backend(draft.weights, options(), slots, 24), {p_min}),
      slots, draft_max);
}

// A drafter that samples its model at temperature 2 among its 5 likeliest
// tokens, whatever the answer asks: a distribution that overlaps the
// target's, so that the rule both takes and rejects.
class Widened final : public Drafter {
 public:
  explicit Widened(std::unique_ptr<Drafter> d) : d_(std::move(d)) {}
  void draft(const std::vector<Ask>& asks, std::vector<Draft>& out) override {
    std::vector<Ask> wide = asks;
    for (Ask& a : wide) a.sampling.temperature = 2.f, a.sampling.top_k = 5;
    d_->draft(wide, out);
  }

 private:
  std::unique_ptr<Drafter> d_;
};

// Prompt-lookup drafts: the answers are plain decoding's, token for token
// and log-probability for log-probability, greedy and sampled, alone and
// four at a time (steps of 24 tokens leave each slot 5 drafted tokens), and
// drafts were taken.
TEST(Speculative, PromptLookupGivesThePlainAnswers) {
  Tiny tiny;
  const std::vector<int32_t> p = repeating_prompt();
  const std::vector<GenParams> params = mixed_params();
  std::vector<Result> plain;
  for (const GenParams& g : params) plain.push_back(wait(*tiny.engine(1)->submit(p, g)));
  for (int draft : {2, 8}) {
    SCOPED_TRACE(draft);
    auto alone = tiny.engine(1, 128, 16, 24, 128, draft);
    int steps = 0;
    for (size_t i = 0; i < params.size(); ++i) {
      const Result r = wait(*alone->submit(p, params[i]));
      expect_same(plain[i], r);
      EXPECT_GT(r.usage.steps, 0);
      steps += r.usage.steps;
    }
    EXPECT_LT(steps, 4 * 40);  // more than a token a step
    EXPECT_GT(alone->metrics().drafted, 0u);
    EXPECT_GT(alone->metrics().draft_taken, 0u);
    auto four = tiny.engine(4, 128, 16, 24, 128, draft);
    std::vector<std::shared_ptr<Request>> rs;
    for (const GenParams& g : params) rs.push_back(four->submit(p, g));
    for (size_t i = 0; i < rs.size(); ++i) expect_same(plain[i], wait(*rs[i]));
  }
}

// A draft model, the target itself and another random model of the same
// vocabulary, each on a batch of its own: greedy answers are plain
// decoding's; sampled ones run their length (their tokens are the rule's,
// not plain decoding's draws: SampledDraftsKeepTheTargetsDistribution). As
// its own draft the target's guesses are taken (its prompt rows round
// otherwise than its decode rows, so not always), sampled ones too.
TEST(Speculative, ModelDraftsGiveTheGreedyAnswers) {
  Tiny tiny;
  const std::vector<int32_t> p = repeating_prompt();
  const std::vector<GenParams> params = mixed_params();
  std::vector<Result> plain;
  for (const GenParams& g : params) plain.push_back(wait(*tiny.engine(1)->submit(p, g)));
  const Model small = other_model(tiny);
  for (const Model* draft : {static_cast<const Model*>(&tiny.m), &small}) {
    auto e = drafting_engine(tiny, *draft, 4, 4);
    std::vector<std::shared_ptr<Request>> rs;
    for (const GenParams& g : params) rs.push_back(e->submit(p, g));
    for (size_t i = 0; i < rs.size(); ++i) {
      const Result r = wait(*rs[i]);
      if (params[i].sampling.temperature <= 0) {
        expect_same(plain[i], r);
      } else {
        EXPECT_EQ(r.finish, Finish::Length);
        EXPECT_EQ(r.usage.completion_tokens, 40);
      }
    }
    const auto m = e->metrics();
    EXPECT_GT(m.drafted, 0u);
    if (draft == &tiny.m)
      EXPECT_GE(m.draft_taken * 10, m.drafted * 9) << m.draft_taken << " of " << m.drafted;
    else
      EXPECT_LT(m.draft_taken * 2, m.drafted) << m.draft_taken << " of " << m.drafted;
  }
}

// Sampled drafts, of the target itself at another temperature and top-k
// (Widened): the answers' first three tokens follow the target's own
// distribution. Temperature 1 and top-k 3 leave 27
// answers; their probabilities come from the target's logits, computed as
// the engine computes them (the prompt, then one generated token a step);
// 4000 answers of 4 slots that each draft two tokens (both verified by the
// rule: the first token comes from the prompt's logits).
TEST(Speculative, SampledDraftsKeepTheTargetsDistribution) {
  Tiny tiny;
  const std::vector<int32_t> p = prompt(6, 5);
  GenParams g;
  g.sampling.temperature = 1.f;
  g.sampling.top_k = 3;
  g.sampling.top_p = 1.f;
  g.sampling.min_p = 0.f;
  g.max_tokens = 3;
  // The target's probabilities of each answer.
  auto b = make_cpu_batch_backend(tiny.m.weights, options(), 1, 24);
  const int vocab = tiny.m.weights->cfg.vocab;
  std::vector<float> logits(static_cast<size_t>(vocab));
  auto dist = [&](const std::vector<int32_t>& fed, bool generated) {
    b->step({{0, fed.data(), int(fed.size()), true, generated}}, logits.data());
    return Sampler(g.sampling).distribution(logits.data(), vocab, {});
  };
  std::map<std::vector<int32_t>, double> want;
  const TokenDist d1 = dist(p, false);
  const int n_prompt = int(p.size());
  for (size_t i = 0; i < d1.ids.size(); ++i) {
    b->rewind(0, n_prompt);
    const TokenDist d2 = dist({d1.ids[i]}, true);
    for (size_t j = 0; j < d2.ids.size(); ++j) {
      b->rewind(0, n_prompt + 1);
      const TokenDist d3 = dist({d2.ids[j]}, true);
      for (size_t k = 0; k < d3.ids.size(); ++k)
        want[{d1.ids[i], d2.ids[j], d3.ids[k]}] = d1.p[i] * d2.p[j] * d3.p[k];
    }
  }
  ASSERT_EQ(want.size(), 27u);
  constexpr int kAnswers = 4000, kWave = 64;
  auto e = drafting_engine(tiny,
                           std::make_shared<Widened>(model_drafter(
                               make_cpu_batch_backend(tiny.m.weights, options(), 4, 24), {0.f})),
                           4, 2, kWave);
  std::map<std::vector<int32_t>, int> got;
  for (int w = 0; w < kAnswers; w += kWave) {
    std::vector<std::shared_ptr<Request>> rs;
    for (int i = w; i < w + kWave; ++i) {
      g.sampling.seed = uint64_t(1000 + i);
      g.top_logprobs = 0;
      rs.push_back(e->submit(p, g));
    }
    for (auto& r : rs) {
      const Result res = wait(*r);
      std::vector<int32_t> ids;
      for (const TokenOut& t : res.tokens) ids.push_back(t.id);
      ASSERT_EQ(ids.size(), 3u);
      ASSERT_TRUE(want.count(ids)) << "an answer the target's top-3 cannot give";
      ++got[ids];
    }
  }
  double x2 = 0;
  for (const auto& [ids, pr] : want) {
    const double expect = pr * kAnswers;
    x2 += (got[ids] - expect) * (got[ids] - expect) / expect;
  }
  // 26 degrees of freedom: P(chi2 > 62) < 1e-4 when the rule is right.
  EXPECT_LT(x2, 62.0);
  const auto m = e->metrics();
  EXPECT_GT(m.draft_taken, 0u);         // the rule took drafted tokens,
  EXPECT_LT(m.draft_taken, m.drafted);  // and drew others
}

// A draft model's guesses for a greedy answer are its greedy tokens,
// certain (no distributions); for a sampled one, draws with their
// distributions. Its one-token steps are timed (the engine's cost model).
TEST(Speculative, ADraftModelGuessesItsOwnTokens) {
  Tiny tiny;
  const std::vector<int32_t> p = prompt(7, 11);
  const Result plain = wait(*tiny.engine(1)->submit(p, greedy(5)));
  ASSERT_EQ(plain.tokens.size(), 5u);
  auto d = model_drafter(make_cpu_batch_backend(tiny.m.weights, options(), 2, 24), {0.f});
  EXPECT_EQ(d->token_seconds(), 0.0);
  std::mt19937_64 rng(1);
  Drafter::Ask ask{1, p, 4, greedy(5).sampling, &rng};
  ask.hist.push_back(plain.tokens[0].id);  // the token the slot feeds next
  std::vector<Drafter::Draft> out;
  d->draft({ask}, out);
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].tokens.size(), 4u);
  EXPECT_TRUE(out[0].q.empty());
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(out[0].tokens[i], plain.tokens[i + 1].id) << i;
  EXPECT_GT(d->token_seconds(), 0.0);
  ask.sampling.temperature = 1.f;
  ask.sampling.top_k = 3;
  d->draft({ask}, out);
  ASSERT_EQ(out[0].tokens.size(), 4u);
  ASSERT_EQ(out[0].q.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(out[0].q[i].ids.size(), 3u);
    EXPECT_GT(out[0].q[i].prob(out[0].tokens[i]), 0.0);
  }
}

// Drafting shortens: a draft model stops at a token it is unsure of
// (p_min 1: every token of a random model), and a slot's drafts shrink
// after rejections (DraftRate) and grow back when taken.
TEST(Speculative, UnsureDraftsAndRejectionsShortenDrafts) {
  Tiny tiny;
  auto e = drafting_engine(tiny, other_model(tiny), 1, 4, /*p_min=*/1.f);
  const Result r = wait(*e->submit(repeating_prompt(), greedy(16)));
  EXPECT_EQ(r.usage.completion_tokens, 16);
  EXPECT_EQ(e->metrics().drafted, 0u);
  EXPECT_EQ(r.usage.steps, 16);

  // Tokens per cost, (1 - a^(k+1)) / (1 - a) / (1 + k c), at its largest.
  auto best = [](double a, double c, int max) {
    int k_best = 0;
    double g_best = 1;
    for (int k = 1; k <= max; ++k) {
      const double g = (1 - std::pow(a, k + 1)) / (1 - a) / (1 + k * c);
      if (g > g_best) k_best = k, g_best = g;
    }
    return k_best;
  };
  DraftRate rate;  // starts at 0.8
  EXPECT_DOUBLE_EQ(rate.rate(), 0.8);
  EXPECT_EQ(rate.length(16, 0.05), best(0.8, 0.05, 16));
  EXPECT_EQ(best(0.8, 0.05, 16), 8);  // 3.57 tokens for 1.4 steps
  EXPECT_EQ(rate.length(4, 0.05), 4);
  EXPECT_EQ(rate.length(16, 0.0), 16);         // free drafts: all
  EXPECT_EQ(rate.length(16, 0.9), 0);          // 1.8 tokens for 1.9 steps: plain decoding pays
  for (int i = 0; i < 6; ++i) rate.add(4, 0);  // every guess rejected
  EXPECT_LT(rate.rate(), 0.3);
  EXPECT_EQ(rate.length(16, 0.05), best(rate.rate(), 0.05, 16));
  EXPECT_LE(rate.length(16, 0.05), 2);
  // Drafts that do not pay: none, but a probe every 16 steps.
  int drafts = 0;
  for (int step = 0; step < 32; ++step) drafts += rate.length(16, 0.5);
  EXPECT_EQ(drafts, 2);
  for (int i = 0; i < 20; ++i) rate.add(4, 4);  // every guess taken
  EXPECT_GT(rate.rate(), 0.99);
  EXPECT_EQ(rate.length(16, 0.05), 16);
}

// Prompts come before drafts (decode_room): a step's tokens beyond one
// per decoding slot are at most decode_chunk while a prompt waits, its
// chunk first. A slot that drafts all it may (the target as its own draft,
// steps of 8 tokens) and a 40-token prompt that arrives meanwhile: the
// prompt runs 2 tokens a step and the slot drafts nothing until it has
// less than a chunk to go (before, the drafts took the whole step and the
// prompt waited for the answer's end); both answers are plain decoding's.
TEST(Speculative, PromptsComeBeforeDrafts) {
  EXPECT_EQ(decode_room(512, 8, 0, 128), 512);   // no prompt waits: the whole step
  EXPECT_EQ(decode_room(512, 8, 300, 128), 8);   // a whole chunk to go: no drafts
  EXPECT_EQ(decode_room(512, 8, 100, 128), 36);  // its last 100 tokens, drafts 28
  EXPECT_EQ(decode_room(20, 8, 100, 128), 20);   // the step's budget first
  EXPECT_EQ(decode_room(6, 8, 0, 128), 8);       // a token per decoding slot, whatever the budget
  EXPECT_EQ(decode_room(512, 0, 100, 128), 28);

  // Records each ask's slot and its history's length, and drafts as asked.
  struct Recording final : Drafter {
    std::unique_ptr<Drafter> d;
    std::vector<std::pair<int, size_t>> asks;
    void draft(const std::vector<Ask>& a, std::vector<Draft>& out) override {
      for (const Ask& x : a) asks.push_back({x.slot, x.hist.size()});
      d->draft(a, out);
    }
  };
  Tiny tiny;
  BackendOptions o = options();
  o.ctx = 512;
  auto rec = std::make_shared<Recording>();
  rec->d = model_drafter(make_cpu_batch_backend(tiny.m.weights, o, 2, 8), {0.f});
  EngineOptions eo;
  eo.step_tokens = 8;
  eo.decode_chunk = 2;
  eo.draft_max = 7;
  eo.draft_cost = 0.05;
  eo.drafter = rec;
  Engine e(make_cpu_batch_backend(tiny.m.weights, o, 2, 8), *tiny.m.tokenizer, eo);
  const std::vector<int32_t> pa = prompt(4, 1), pb = prompt(40, 2);
  std::shared_ptr<Request> a = e.submit(pa, greedy(300));
  Result ra;
  while (ra.tokens.empty()) {  // a decodes
    Request::News n = a->take(std::chrono::milliseconds(10));
    ra.text += n.text;
    ra.tokens.insert(ra.tokens.end(), n.tokens.begin(), n.tokens.end());
    ASSERT_FALSE(n.done);
  }
  const Result rb = wait(*e.submit(pb, greedy(1)));
  const Result rest = wait(*a);
  ra.text += rest.text;
  ra.tokens.insert(ra.tokens.end(), rest.tokens.begin(), rest.tokens.end());
  expect_same(wait(*tiny.engine(1, 512)->submit(pa, greedy(300))), ra);
  expect_same(wait(*tiny.engine(1, 512)->submit(pb, greedy(1))), rb);
  // Slot 0's asks: its history grows by at most 8 tokens a step where it
  // drafts, and across b's prompt by 20 plain steps' tokens (b's 40 tokens
  // in chunks of 2) after its last draft's 1 to 8.
  size_t gap = 0, last = 0;
  int asks = 0;
  for (auto [slot, hist] : rec->asks) {
    ASSERT_EQ(slot, 0);
    if (last) gap = std::max(gap, hist - last);
    last = hist, ++asks;
  }
  EXPECT_GT(asks, 20);
  EXPECT_GE(gap, 21u);
  EXPECT_LE(gap, 28u);
}

// A KIVI key cache cannot cut a rejected draft back exactly: refused.
TEST(Speculative, AKiviCacheIsRefused) {
  Tiny tiny;
  BackendOptions o;
  o.ctx = 128;
  o.keys.type = kv::KeyType::Kivi2;
  EngineOptions eo;
  eo.draft_max = 4;
  const std::string e = test::error_of(
      [&] { Engine(make_cpu_batch_backend(tiny.m.weights, o, 2, 24), *tiny.m.tokenizer, eo); });
  EXPECT_NE(e.find("--draft-max: speculative decoding runs on the CPU's fast path with an f32, "
                   "f16, q8_0 or q4_0 key cache"),
            std::string::npos)
      << e;
}

}  // namespace
}  // namespace lr
