// The engine's memory (runtime/engine.h) on a tiny random model: prompt
// prefixes shared across slots (copied, or stored once in the prompt cache
// and mapped by reference) and the KV pool's admission. Every answer is
// the one it gives alone, bit for bit.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "../error_of.h"
#include "core/zero_pages.h"
#include "engine_test_util.h"
#include "runtime/engine.h"

namespace lr {
namespace {

using namespace std::chrono_literals;
using namespace test;  // Tiny, prompt, greedy, wait, expect_same

// Four prompts that begin with the same n tokens (a system prompt, drawn
// with `seed`), then 5, 6, 7 and 8 tokens of their own.
std::vector<std::vector<int32_t>> sharing(int n, uint32_t seed) {
  const auto shared = prompt(n, seed);
  std::vector<std::vector<int32_t>> ps;
  for (uint32_t i = 0; i < 4; ++i) {
    ps.push_back(shared);
    const auto own = prompt(5 + int(i), seed + 10 + i);
    ps.back().insert(ps.back().end(), own.begin(), own.end());
  }
  return ps;
}

// Requests whose prompts share a 60-token prefix (a system prompt): the
// first evaluates it; two arriving with it wait for it and copy it into
// their slots (steps of 24 tokens: it takes three); one arriving while the
// first decodes, with only an empty slot free, copies it from the busy
// slot. Each answers as it does alone, bit for bit, with f32 and f16 caches.
TEST(Engine, SlotsShareAPromptPrefix) {
  for (kv::KeyType keys : {kv::KeyType::F32, kv::KeyType::F16}) {
    Tiny tiny;
    tiny.keys = keys;
    const auto ps = sharing(60, 21);
    for (size_t i = 1; i < ps.size(); ++i) ASSERT_NE(ps[i][60], ps[0][60]);  // they part at 60
    std::vector<Result> alone;
    for (const auto& p : ps) alone.push_back(wait(*tiny.engine(1, 4096)->submit(p, greedy(8))));
    auto e = tiny.engine(4, 4096);
    auto first = e->submit(ps[0], greedy(8));
    auto second = e->submit(ps[1], greedy(8));
    auto third = e->submit(ps[2], greedy(8));
    expect_same(alone[0], wait(*first));
    for (auto [r, i] : {std::pair{second, 1}, std::pair{third, 2}}) {
      const Result got = wait(*r);
      expect_same(alone[size_t(i)], got);
      EXPECT_EQ(got.usage.cached_tokens, 60) << "request " << i;
    }
    EXPECT_EQ(e->metrics().cached_prompt_tokens, 120u);

    auto two = tiny.engine(2, 4096);
    auto busy = two->submit(ps[0], greedy(4000));  // decodes until cancelled
    for (int i = 0; i < 500 && busy->take(10ms).tokens.empty(); ++i) {
    }
    const Result late = wait(*two->submit(ps[3], greedy(8)));
    expect_same(alone[3], late);
    EXPECT_EQ(late.usage.cached_tokens, 60);
    busy->cancel();
    EXPECT_EQ(wait(*busy).finish, Finish::Cancelled) << "the first ended before the last came";
  }
}

// With a prompt cache, a shared prefix of 200 tokens is stored once when a
// second request needs it: the slots that use it (the first's too) map its
// pages, the cache holds exactly its pages, and a request after every slot
// has moved on to other prompts still finds it there. Every answer is its
// answer alone, bit for bit (f32 and f16 caches). Without the cache, the
// last request evaluates its prompt.
TEST(Engine, StoredPrefixesAreSharedAndOutliveTheSlots) {
  for (kv::KeyType keys : {kv::KeyType::F32, kv::KeyType::F16}) {
    for (uint64_t budget : {uint64_t(64) << 20, uint64_t(0)}) {
      Tiny tiny;
      tiny.keys = keys;
      const Config& c = tiny.m.weights->cfg;
      const auto ps = sharing(200, 41);
      for (size_t i = 1; i < ps.size(); ++i) ASSERT_NE(ps[i][200], ps[0][200]);
      std::vector<Result> alone;
      for (const auto& p : ps) alone.push_back(wait(*tiny.engine(1, 4096)->submit(p, greedy(20))));
      tiny.prompt_cache = budget;
      auto e = tiny.engine(4, 4096);
      std::vector<std::shared_ptr<Request>> rs;
      for (size_t i = 0; i < 3; ++i) rs.push_back(e->submit(ps[i], greedy(20)));
      for (size_t i = 0; i < 3; ++i) {
        const Result got = wait(*rs[i]);
        expect_same(alone[i], got);
        EXPECT_EQ(got.usage.cached_tokens, i == 0 ? 0 : 200) << "request " << i;
      }
      // Other prompts in every slot, then the fourth.
      std::vector<std::shared_ptr<Request>> others;
      for (uint32_t i = 0; i < 4; ++i) others.push_back(e->submit(prompt(30, 90 + i), greedy(2)));
      for (auto& r : others) EXPECT_EQ(wait(*r).usage.cached_tokens, 0);
      const Result last = wait(*e->submit(ps[3], greedy(20)));
      expect_same(alone[3], last);
      const auto m = e->metrics();
      if (budget == 0) {
        EXPECT_EQ(last.usage.cached_tokens, 0);
        EXPECT_EQ(m.kv.prompt_cache_prefixes, 0);
        continue;
      }
      EXPECT_EQ(last.usage.cached_tokens, 200);
      EXPECT_EQ(m.kv.prompt_cache_prefixes, 1);
      const uint64_t page = page_bytes(), elem = keys == kv::KeyType::F16 ? 2 : 4;
      const uint64_t per_head = (200 * uint64_t(c.head_dim) * elem + page - 1) / page * page;
      EXPECT_EQ(m.kv.prompt_cache_bytes, 2 * per_head * uint64_t(c.n_layers * c.n_kv_heads));
    }
  }
}

// A KV pool of 150 positions' bytes: a request reaching 100 (a 60-token
// prompt, max_tokens 40) runs alone, the next waits until it has ended
// (then the first's idle slot gives its pages and cached prompt back);
// one reaching more than the pool is refused at submit. Both answers are
// their answers alone.
TEST(Engine, TheKvPoolAdmitsWhatFits) {
  Tiny tiny;
  const auto a = prompt(60, 71), b = prompt(60, 72);
  const Result alone_a = wait(*tiny.engine(1, 256)->submit(a, greedy(40)));
  const Result alone_b = wait(*tiny.engine(1, 256)->submit(b, greedy(40)));
  const Config& c = tiny.m.weights->cfg;  // f32 keys and values, every layer
  const double per_position = 2.0 * c.n_layers * c.n_kv_heads * c.head_dim * sizeof(float);
  tiny.kv_pool = uint64_t(150 * per_position);
  auto e = tiny.engine(2, 256);
  EXPECT_EQ(error_of([&] { e->submit(prompt(100, 1), greedy(60)); }),
            "the request reaches 160 positions (100 prompt tokens and max_tokens 60): " +
                fmt::format("{:.1f}", 160 * per_position / (1 << 20)) +
                " MiB of KV cache, more than the pool's " +
                fmt::format("{:.1f}", double(tiny.kv_pool) / (1 << 20)) + " MiB (--kv-pool)");
  auto ra = e->submit(a, greedy(40));
  auto rb = e->submit(b, greedy(40));
  std::vector<char> order;  // 'a': a ended; 'b': b's first token
  Result got_a, got_b;
  for (int i = 0; i < 20000 && order.size() < 2; ++i) {
    if (std::find(order.begin(), order.end(), 'a') == order.end()) {
      Request::News n = ra->take(0ms);
      got_a.tokens.insert(got_a.tokens.end(), n.tokens.begin(), n.tokens.end());
      got_a.text += n.text;
      if (n.done) order.push_back('a');
    }
    if (std::find(order.begin(), order.end(), 'b') == order.end()) {
      Request::News n = rb->take(0ms);
      got_b.tokens.insert(got_b.tokens.end(), n.tokens.begin(), n.tokens.end());
      got_b.text += n.text;
      if (!n.tokens.empty()) order.push_back('b');
    }
  }
  EXPECT_EQ(order, (std::vector<char>{'a', 'b'})) << "b ran beside a in a pool for one";
  const Result rest_b = wait(*rb);
  got_b.tokens.insert(got_b.tokens.end(), rest_b.tokens.begin(), rest_b.tokens.end());
  got_b.text += rest_b.text;
  EXPECT_EQ(got_a.text, alone_a.text);
  EXPECT_EQ(got_b.text, alone_b.text);
  // a's slot gave its pages back for b: a again evaluates its prompt.
  EXPECT_EQ(wait(*e->submit(a, greedy(4))).usage.cached_tokens, 0);
  const auto m = e->metrics();
  EXPECT_EQ(m.kv.pool_bytes, tiny.kv_pool);
  EXPECT_LE(double(m.kv.pool_used_bytes), double(tiny.kv_pool));
}

}  // namespace
}  // namespace lr
