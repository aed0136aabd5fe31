// The engine (runtime/engine.h) on a tiny random model: a request's
// tokens alone and among others, prefix reuse, stop strings, the queue
// bound, cancellation and shutdown.
#include <gtest/gtest.h>

#include <optional>
#include <random>

#include "../error_of.h"
#include "../model/model_test_util.h"
#include "backend/cpu/cpu.h"
#include "engine_test_util.h"
#include "grammar/matcher.h"
#include "runtime/engine.h"
#include "runtime/model.h"
#include "runtime/session.h"

namespace lr {
namespace {

using namespace std::chrono_literals;
using test::expect_same;
using test::greedy;
using test::prompt;
using test::Result;
using test::Tiny;
using test::wait;

// A request alone and among 7 others (sampled ones too) gives the same
// tokens and the same log-probabilities, bit for bit.
TEST(Engine, ARequestGivesTheSameTokensAloneAndAmongOthers) {
  Tiny tiny;
  const auto p = prompt(37, 1);
  Result alone;
  {
    auto e = tiny.engine(4);
    alone = wait(*e->submit(p, greedy(20)));
  }
  EXPECT_EQ(alone.finish, Finish::Length);
  EXPECT_EQ(alone.tokens.size(), 20u);
  EXPECT_EQ(alone.usage.prompt_tokens, 37);
  EXPECT_EQ(alone.usage.completion_tokens, 20);
  auto e = tiny.engine(4);
  std::vector<std::shared_ptr<Request>> others;
  for (int i = 0; i < 7; ++i) {
    GenParams g = greedy(5 + 4 * i);
    g.sampling.temperature = i % 2 ? 0.9f : 0.f;
    g.sampling.seed = uint64_t(i);
    others.push_back(e->submit(prompt(5 + 11 * i, 100 + uint32_t(i)), g));
    if (i == 2) others.push_back(e->submit(p, greedy(20)));  // joins while others run
  }
  Result among = wait(*others[3]);
  expect_same(alone, among);
  for (auto& r : others) wait(*r);
  const auto m = e->metrics();
  EXPECT_EQ(m.finished.at("length"), 8u);
  EXPECT_EQ(m.generated_tokens, 20u + (5 + 9 + 13 + 17 + 21 + 25 + 29));
}

// While a slot decodes, a newcomer's prompt goes in chunks of at most
// decode_chunk tokens, so no step makes the decoding slot wait for a long
// chunk; alone, a prompt takes the whole step. Its tokens are the same.
TEST(Engine, PromptChunksStaySmallWhileOthersDecode) {
  Tiny tiny;
  const auto p = prompt(40, 5);
  auto largest_step = [](const Metrics::Snapshot& m) {
    double top = 0;
    for (size_t i = 0; i < m.step_sizes.counts.size(); ++i)
      if (m.step_sizes.counts[i] > 0)
        top = i < m.step_sizes.bounds.size() ? m.step_sizes.bounds[i] : 1e9;
    return top;  // the bound of the highest bucket observed
  };
  std::vector<Result> newcomer;
  for (int chunk : {3, 128}) {
    // a decodes until it is cancelled, so it outlasts the newcomer's 14
    // chunks however the host schedules the threads; the test checks it did.
    auto e = tiny.engine(2, 4096, 16, 24, chunk);
    auto a = e->submit(prompt(3, 6), greedy(4000));
    for (int i = 0; i < 500 && a->take(10ms).tokens.empty(); ++i) {
    }  // a decodes
    newcomer.push_back(wait(*e->submit(p, greedy(3))));
    a->cancel();
    EXPECT_EQ(wait(*a).finish, Finish::Cancelled) << "a stopped decoding before the newcomer ended";
    const auto m = e->metrics();
    EXPECT_EQ(m.step_sizes.count, m.steps);
    if (chunk == 3)
      EXPECT_LE(largest_step(m), 4) << "a step took more than a's token and 3 prompt tokens";
    else
      EXPECT_GE(largest_step(m), 16) << "alone beside one decoding slot, the prompt fills the step";
  }
  expect_same(newcomer[0], newcomer[1]);
}

// The slot that served a prompt keeps it: a longer prompt that starts with it
// evaluates only the rest, and answers as a fresh engine does.
TEST(Engine, PromptPrefixIsReused) {
  Tiny tiny;
  auto first = prompt(30, 2), second = first;
  const auto more = prompt(9, 3);
  second.insert(second.end(), more.begin(), more.end());
  Result fresh;
  {
    auto e = tiny.engine(2);
    fresh = wait(*e->submit(second, greedy(6)));
  }
  EXPECT_EQ(fresh.usage.cached_tokens, 0);
  auto e = tiny.engine(2);
  wait(*e->submit(first, greedy(6)));
  Result reused = wait(*e->submit(second, greedy(6)));
  EXPECT_EQ(reused.usage.cached_tokens, 30);
  expect_same(fresh, reused);
  // The same prompt again: all but its last token come from the cache.
  Result again = wait(*e->submit(second, greedy(6)));
  EXPECT_EQ(again.usage.cached_tokens, 38);
  expect_same(fresh, again);
  EXPECT_EQ(e->metrics().cached_prompt_tokens, 68u);
}

// Three greedy answers to one prompt, each the same as one alone: the first
// evaluates the prompt, the others copy its cache (all but its last token
// cached). Returns the engine.
std::unique_ptr<Engine> expect_three_answers_share_the_prompt(Tiny& tiny,
                                                              const std::vector<int32_t>& p) {
  Result alone;
  {
    auto e = tiny.engine(4);
    alone = wait(*e->submit(p, greedy(12)));
  }
  auto e = tiny.engine(4);
  std::vector<std::shared_ptr<Request>> three = e->submit(p, greedy(12), 3);
  EXPECT_EQ(three.size(), 3u);
  std::vector<Result> got;
  for (auto& r : three) got.push_back(wait(*r));
  for (const Result& r : got) expect_same(alone, r);
  EXPECT_EQ(got[0].usage.cached_tokens, 0);
  EXPECT_EQ(got[1].usage.cached_tokens, int(p.size()) - 1);
  EXPECT_EQ(got[2].usage.cached_tokens, int(p.size()) - 1);
  return e;
}

// n answers to one prompt: the prompt is evaluated once (the others copy
// the first one's cache: all but its last token cached), greedy answers are
// identical to one alone, bit for bit, and sampled ones draw with seed + i:
// each the same as a lone request with that seed.
TEST(Engine, NAnswersShareOnePromptEvaluation) {
  Tiny tiny;
  const auto p = prompt(41, 5);
  auto e = expect_three_answers_share_the_prompt(tiny, p);
  EXPECT_EQ(e->metrics().cached_prompt_tokens, 80u);

  GenParams sampled = greedy(10);
  sampled.sampling.temperature = 1.0f;
  sampled.sampling.seed = 7;
  auto e2 = tiny.engine(4);
  std::vector<std::shared_ptr<Request>> two = e2->submit(p, sampled, 2);
  const Result s0 = wait(*two[0]), s1 = wait(*two[1]);
  sampled.sampling.seed = 8;
  auto e3 = tiny.engine(2);
  const Result lone8 = wait(*e3->submit(p, sampled));
  expect_same(s1, lone8);
  EXPECT_NE(s0.text, s1.text);
  EXPECT_THROW(e->submit(p, greedy(4), 0), Error);
}

// The same with the CPU's default cache (f16 keys and values, held as the
// dense cache holds f32 rows): the others copy the first answer's prompt.
TEST(Engine, NAnswersShareTheF16Cache) {
  Tiny tiny;
  tiny.keys = kv::KeyType::F16;
  expect_three_answers_share_the_prompt(tiny, prompt(41, 5));
}

// Prompt chunks go to the earliest admitted request first, whatever its
// slot: y, in slot 1, admitted before z, in slot 0, ends its prompt first
// (by slot order z's 120 tokens would take the steps of 2 before y's).
TEST(Engine, PromptsAreEvaluatedInTheOrderAdmitted) {
  Tiny tiny;
  auto e = tiny.engine(2, 256, 16, /*step_tokens=*/2);
  wait(*e->submit(prompt(3, 1), greedy(1)));  // slot 0, now the more recently used
  auto y = e->submit(prompt(120, 2), greedy(1));
  auto z = e->submit(prompt(120, 3), greedy(1));
  std::vector<char> order;
  for (int i = 0; i < 20000 && order.size() < 2; ++i)
    for (auto [r, name] : {std::pair{y.get(), 'y'}, std::pair{z.get(), 'z'}})
      if (std::find(order.begin(), order.end(), name) == order.end() && r->take(0ms).done)
        order.push_back(name);
  EXPECT_EQ(order, (std::vector<char>{'y', 'z'}));
}

// Steps of 2 tokens and 4 requests: prompts take only what decoding leaves,
// so at most two slots decode at once and the others wait; every answer is
// the one it gives alone.
TEST(Engine, MoreDecodingSlotsThanAStepHolds) {
  Tiny tiny;
  const auto p = prompt(5, 4);
  const Result alone = wait(*tiny.engine(1)->submit(p, greedy(6)));
  auto e = tiny.engine(4, 128, 16, /*step_tokens=*/2);
  std::vector<std::shared_ptr<Request>> rs;
  for (int i = 0; i < 4; ++i) rs.push_back(e->submit(p, greedy(6)));
  for (auto& r : rs) expect_same(alone, wait(*r));
}

// A request constrained by a grammar: its answer is a sentence of it, the
// mask comes after the logits, so its tokens are the same alone and among
// others (free and constrained, greedy and sampled), bit for bit; cut by
// max_tokens it finishes with Length.
TEST(Engine, AGrammarConstrainsTheAnswerAndKeepsTheBatchInvariant) {
  Tiny tiny;
  auto g = grammar::Grammar::parse_shared(
      R"(root ::= "{\"n\": " [1-9] [0-9]{0,2} ", \"w\": \"" [a-z]{2,6} "\"}")");
  GenParams p = greedy(40);
  p.grammar = g;
  p.sampling.temperature = 0.7f;
  p.sampling.seed = 11;
  const auto pr = prompt(23, 9);
  Result alone;
  {
    auto e = tiny.engine(4);
    alone = wait(*e->submit(pr, p));
  }
  grammar::Matcher m(g);
  EXPECT_TRUE(m.accept_bytes(alone.text) && m.can_end()) << alone.text;
  EXPECT_EQ(alone.finish, Finish::Stop);
  auto e = tiny.engine(4);
  std::vector<std::shared_ptr<Request>> others;
  for (int i = 0; i < 5; ++i) {
    GenParams o = greedy(6 + i);
    o.sampling.temperature = i % 2 ? 0.9f : 0.f;
    if (i == 3) o.grammar = g;
    others.push_back(e->submit(prompt(9 + 7 * i, 50 + uint32_t(i)), o));
    if (i == 1) others.push_back(e->submit(pr, p));
  }
  expect_same(alone, wait(*others[2]));
  for (auto& r : others) wait(*r);
  GenParams cut = p;
  cut.max_tokens = 3;
  const Result c = wait(*e->submit(pr, cut));
  EXPECT_EQ(c.finish, Finish::Length);
  EXPECT_EQ(c.text, alone.text.substr(0, c.text.size()));
}

// The text ends before the first stop string, which never goes out, even in part.
TEST(Engine, StopStringsEndTheText) {
  Tiny tiny;
  auto e = tiny.engine(1);
  const auto p = prompt(12, 4);
  Result full = wait(*e->submit(p, greedy(40)));
  ASSERT_GE(full.text.size(), 12u) << "the tiny model's greedy text is too short for this test";
  const std::string stop = full.text.substr(full.text.size() / 2, 3);
  GenParams g = greedy(40);
  g.stop = {stop, "never appears \x01\x02"};
  Result cut = wait(*e->submit(p, g));
  EXPECT_EQ(cut.finish, Finish::Stop);
  EXPECT_EQ(cut.text, full.text.substr(0, full.text.find(stop)));
  // A stop token ends it too: the greedy answer's 5th token.
  g = greedy(40);
  g.stop_tokens = {full.tokens[4].id};
  Result tok = wait(*e->submit(p, g));
  EXPECT_EQ(tok.finish, Finish::Stop);
  EXPECT_EQ(tok.usage.completion_tokens, 5);
}

TEST(Engine, FullQueueIsBusyAndBadRequestsAreRefused) {
  Tiny tiny;
  auto e = tiny.engine(1, 4096, /*queue=*/1);
  auto a = e->submit(prompt(8, 5), greedy(4000));  // holds the slot until it is cancelled
  int busy = 0;
  std::vector<std::shared_ptr<Request>> queued;
  for (int i = 0; i < 3; ++i) {
    try {
      queued.push_back(e->submit(prompt(8, 6), greedy(2)));
    } catch (const Engine::Busy& b) {
      EXPECT_STREQ(b.what(), "the request queue is full");
      ++busy;
    }
  }
  EXPECT_GE(busy, 2);
  EXPECT_EQ(test::error_of([&] { e->submit(prompt(4096, 7), greedy(2)); }),
            "the prompt has 4096 tokens; a slot's context holds 4096 (with room for one generated "
            "token; raise -c)");
  EXPECT_EQ(test::error_of([&] { e->submit({}, greedy(2)); }), "the prompt is empty");
  EXPECT_EQ(test::error_of([&] {
              e->submit({1, 300}, greedy(2));
            }),
            "token id 300 is out of range for a vocabulary of 259");
  EXPECT_EQ(test::error_of([&] {
              e->submit({1, 2}, greedy(0));
            }),
            "max_tokens must be at least 1 (got 0)");
  a->cancel();
  EXPECT_EQ(wait(*a).finish, Finish::Cancelled);
  for (auto& r : queued) wait(*r);
  EXPECT_GE(e->metrics().rejected, 2u);
}

// A cancelled request ends within a step and frees its slot for the next.
TEST(Engine, CancelFreesTheSlot) {
  Tiny tiny;
  auto e = tiny.engine(1, 4096);
  auto a = e->submit(prompt(8, 8), greedy(4000));
  auto b = e->submit(prompt(8, 9), greedy(3));
  a->take(5s);  // a runs
  a->cancel();
  Result ra = wait(*a), rb = wait(*b);
  EXPECT_EQ(ra.finish, Finish::Cancelled);
  EXPECT_LT(ra.usage.completion_tokens, 4000);
  EXPECT_EQ(rb.finish, Finish::Length);
  EXPECT_EQ(rb.usage.completion_tokens, 3);
  const auto m = e->metrics();
  EXPECT_EQ(m.finished.at("cancelled"), 1u);
  EXPECT_EQ(m.finished.at("length"), 1u);
}

// Shutdown lets nothing new in and ends what runs once the grace period is over.
TEST(Engine, ShutdownCancelsAfterTheGracePeriod) {
  Tiny tiny;
  BackendOptions o;
  o.ctx = 4096;
  o.cpu.n_threads = 1;
  EngineOptions eo;
  eo.shutdown_grace = 0ms;
  Engine e(make_cpu_batch_backend(tiny.m.weights, o, 2, 16), *tiny.m.tokenizer, eo);
  auto a = e.submit(prompt(8, 10), greedy(4000));
  a->take(5s);
  e.shutdown();
  EXPECT_EQ(wait(*a).finish, Finish::Cancelled);
  EXPECT_THROW(e.submit(prompt(8, 11), greedy(2)), Engine::Busy);
}

}  // namespace
}  // namespace lr

namespace lr {
namespace {

using test::greedy;
using test::prompt;
using test::Result;
using test::Tiny;
using test::wait;

// Greedy tokens and their log-probabilities from a session driven by hand:
// the prompt in chunks of `chunk` tokens, then one token at a time.
Result by_hand(Backend& b, const std::vector<int32_t>& p, int n, int chunk) {
  const int V = b.weights().cfg.vocab;
  std::vector<float> logits(static_cast<size_t>(V));
  for (size_t i = 0; i < p.size(); i += size_t(chunk))
    b.forward(p.data() + i, int(std::min(p.size() - i, size_t(chunk))), logits.data(), false);
  Result r;
  for (int i = 0; i < n; ++i) {
    TokenOut t;
    t.id = argmax(logits.data(), V);
    t.logprob = token_logprob(logits.data(), V, t.id);
    r.tokens.push_back(t);
    if (i + 1 < n) b.forward(&t.id, 1, logits.data(), false);
  }
  return r;
}

// A one-slot engine (make_slots, as run and chat make it) runs the
// single-sequence session, so whatever a session runs runs under the engine:
// the fast path, a compressed key cache with the session's staged prompt,
// the scalar reference. Its tokens are the session's, bit for bit.
TEST(Engine, OneSlotRunsTheSessionAsGenerationByHand) {
  test::TempDir t;
  test::TinySpec s;
  s.tokenizer = true;
  s.ctx_train = 512;
  const std::string path = test::write_tiny(t, s, "tiny.gguf");
  const Model stored = load_model(path, std::nullopt);
  const Model f32 = load_model(path, DType::F32);
  const auto p = prompt(29, 7);
  struct Case {
    const char* name;
    const Model& m;
    ExecPath path;
    kv::KeyType keys;
    std::optional<kv::ValueType> values = std::nullopt;
  };
  for (const Case& c : {Case{"fast", stored, ExecPath::Fast, kv::KeyType::F32},
                        Case{"fast, f16 keys", stored, ExecPath::Fast, kv::KeyType::F16},
                        Case{"fast, f32 keys, f16 values", stored, ExecPath::Fast, kv::KeyType::F32,
                             kv::ValueType::F16},
                        Case{"reference", f32, ExecPath::Reference, kv::KeyType::F32}}) {
    SCOPED_TRACE(c.name);
    BackendOptions o;
    o.ctx = 64;
    o.cpu.n_threads = 2;
    o.keys.type = c.keys;
    o.keys.value_type = c.values;
    EngineOptions eo;
    eo.step_tokens = 8;  // the engine cuts the prompt into chunks of 8
    auto session = make_session(c.m, c.path, o);
    const Result want = by_hand(*session, p, 12, eo.step_tokens);
    GenParams g = greedy(12);
    g.top_logprobs = 0;
    Engine e(make_slots(c.m, c.path, o, 1, eo.step_tokens), *c.m.tokenizer, eo);
    const Result got = wait(*e.submit(p, g));
    ASSERT_EQ(got.tokens.size(), want.tokens.size());
    for (size_t i = 0; i < want.tokens.size(); ++i) {
      EXPECT_EQ(got.tokens[i].id, want.tokens[i].id) << i;
      EXPECT_EQ(got.tokens[i].logprob, want.tokens[i].logprob) << i;  // bit for bit
    }
    EXPECT_GT(got.usage.prompt_s, 0);
    EXPECT_GT(got.usage.decode_s, 0);
  }
  // Several slots run a compressed key cache too (the batch, a cache per
  // slot): two answers made together are each the answer made alone, bit
  // for bit, however the step budget cut their prompts.
  BackendOptions o;
  o.ctx = 64;
  o.cpu.n_threads = 2;
  o.keys.type = kv::KeyType::Kivi2;  // blocks of 4 tokens, quantized 8 at a time
  o.keys.kivi_group = 4;
  o.keys.kivi_window = 8;
  EngineOptions eo;
  eo.step_tokens = 8;
  const auto p2 = prompt(17, 3);
  auto answers = [&](bool together) {
    Engine e(make_slots(stored, ExecPath::Fast, o, 2, eo.step_tokens), *stored.tokenizer, eo);
    auto a = e.submit(p, greedy(10));
    Result first;
    if (!together) first = wait(*a);
    auto b = e.submit(p2, greedy(10));
    if (together) first = wait(*a);
    return std::pair{first, wait(*b)};
  };
  const auto [a1, b1] = answers(false);
  const auto [a2, b2] = answers(true);
  EXPECT_EQ(a1.tokens.size(), 10u);
  EXPECT_EQ(b1.tokens.size(), 10u);
  expect_same(a2, a1);
  expect_same(b2, b1);
  EXPECT_NE(test::error_of([&] {
              make_slots(f32, ExecPath::Reference, BackendOptions{}, 2, 16);
            }).find("the scalar reference runs one sequence"),
            std::string::npos);
}

// A step that throws ends the requests in it as cancelled and hands them
// the error (run and chat report it, rather than an interrupted answer); the
// engine goes on with the next request.
TEST(Engine, AFailedStepEndsItsRequestsWithTheError) {
  Tiny tiny;
  struct Failing final : BatchBackend {
    explicit Failing(std::shared_ptr<const Weights> w) : BatchBackend(std::move(w), 1, 64, 16) {}
    void step(const std::vector<Chunk>& chunks, float*) override {
      check_step(chunks);
      if (++steps == 1) fail("the device went away");
      for (const Chunk& c : chunks) n_past_[size_t(c.slot)] += c.n;
    }
    StepStats last_step() const override { return {}; }
    int steps = 0;
  };
  Engine e(std::make_unique<Failing>(tiny.m.weights), *tiny.m.tokenizer, EngineOptions{});
  const Result failed = wait(*e.submit(prompt(5, 1), greedy(3)));
  EXPECT_EQ(failed.finish, Finish::Cancelled);
  EXPECT_EQ(failed.error, "the device went away");
  const Result next = wait(*e.submit(prompt(5, 2), greedy(3)));
  EXPECT_EQ(next.finish, Finish::Length);  // the logits are zeros: greedy picks token 0 three times
  EXPECT_EQ(next.error, "");
  EXPECT_EQ(next.usage.completion_tokens, 3);
}

}  // namespace
}  // namespace lr
