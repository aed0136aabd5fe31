// The engine tests' tiny random model and their helpers: a request's
// result, waiting for it, a greedy request, comparing two answers bit for bit.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <string>
#include <vector>

#include "../model/model_test_util.h"
#include "backend/cpu/cpu.h"
#include "runtime/engine.h"
#include "runtime/model.h"

namespace lr::test {

using namespace std::chrono_literals;

struct Tiny {
  TempDir t;
  Model m;
  kv::KeyType keys = kv::KeyType::F32;  // the engines' key cache (values: its default)
  uint64_t prompt_cache = 0;            // EngineOptions::prompt_cache
  uint64_t kv_pool = 0;                 // EngineOptions::kv_pool
  Tiny() {
    TinySpec s;
    s.tokenizer = true;  // bytes: every token is text
    s.wtype = DType::Q4_0;
    s.ctx_train = 512;
    m = load_model(write_tiny(t, s, "tiny.gguf"), std::nullopt);
  }
  std::unique_ptr<Engine> engine(int slots, int ctx = 128, int queue = 16, int step_tokens = 24,
                                 int decode_chunk = 128, int draft_max = 0) {
    BackendOptions o;
    o.ctx = ctx;
    o.cpu.n_threads = 2;
    o.keys.type = keys;
    EngineOptions e;
    e.queue = queue;
    e.step_tokens = step_tokens;
    e.decode_chunk = decode_chunk;
    e.draft_max = draft_max;
    e.draft_cost = 0.05;  // (not timed: the same drafts every run)
    e.prompt_cache = prompt_cache;
    e.kv_pool = kv_pool;
    return std::make_unique<Engine>(make_cpu_batch_backend(m.weights, o, slots, step_tokens),
                                    *m.tokenizer, e);
  }
};

inline std::vector<int32_t> prompt(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (auto& x : p) x = int32_t(3 + rng() % 256);
  return p;
}

struct Result {
  std::string text;
  std::vector<TokenOut> tokens;
  Finish finish = Finish::None;
  Usage usage;
  std::string error;
};

inline Result wait(Request& r) {
  Result out;
  for (int i = 0; i < 2000; ++i) {  // 20 s at most
    Request::News n = r.take(10ms);
    out.text += n.text;
    out.tokens.insert(out.tokens.end(), n.tokens.begin(), n.tokens.end());
    if (n.done) {
      out.finish = n.finish;
      out.usage = n.usage;
      out.error = n.error;
      return out;
    }
  }
  ADD_FAILURE() << "request did not finish";
  return out;
}

inline GenParams greedy(int max_tokens) {
  GenParams p;
  p.sampling.temperature = 0;
  p.max_tokens = max_tokens;
  p.top_logprobs = 2;
  return p;
}

inline void expect_same(const Result& a, const Result& b) {
  EXPECT_EQ(a.text, b.text);
  ASSERT_EQ(a.tokens.size(), b.tokens.size());
  for (size_t i = 0; i < a.tokens.size(); ++i) {
    EXPECT_EQ(a.tokens[i].id, b.tokens[i].id);
    EXPECT_EQ(a.tokens[i].logprob, b.tokens[i].logprob) << "token " << i;  // bit for bit
  }
}

}  // namespace lr::test
