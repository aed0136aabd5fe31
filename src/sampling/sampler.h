// Token sampling: repetition penalty, top-k, top-p, min-p, temperature, seeded
// RNG; temperature <= 0 means greedy (argmax).
#pragma once

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace lr {

struct SamplerParams {
  float temperature = 0.8f;  // <= 0: greedy
  int top_k = 40;            // <= 0: off
  float top_p = 0.95f;       // >= 1: off
  float min_p = 0.05f;       // <= 0: off
  float repeat_penalty = 1.0f;  // 1: off (llama.cpp semantics: divide positive logits, multiply negative)
  int repeat_last_n = 64;
  // OpenAI's: logit -= presence * [count > 0] + frequency * count, counting
  // the token among the generated tokens (history after its prompt), as vLLM does.
  float presence_penalty = 0.f;
  float frequency_penalty = 0.f;
  uint64_t seed = 0;
  // OpenAI's logit_bias: added to a token's logit before sampling (-100 bans it, 100 all but forces
  // it).
  std::vector<std::pair<int32_t, float>> logit_bias;
};

// A token and its log-probability under softmax(logits).
struct TokenLogprob {
  int32_t id;
  float logprob;
};
// log softmax(logits)[id]; with top > 0, the `top` most likely tokens too
// (descending, lowest id first on ties) into *top_out.
float token_logprob(const float* logits, int n, int32_t id, int top = 0,
                    std::vector<TokenLogprob>* top_out = nullptr);

// Index of the largest logit (lowest index on ties).
int32_t argmax(const float* logits, int n);

class Sampler {
 public:
  explicit Sampler(const SamplerParams& p);
  // Picks the next token from logits [n]. `history`: the tokens so far, its
  // first n_prompt the prompt's. The repetition penalty looks at the last
  // repeat_last_n of them, prompt included (llama.cpp, vLLM); the presence
  // and frequency penalties at the generated ones. logits are not modified.
  // allowed (optional, [n]): tokens with 0 cannot be drawn (a grammar's
  // mask); at least one must be allowed.
  int32_t sample(const float* logits, int n, const std::vector<int32_t>& history,
                 size_t n_prompt = 0, const uint8_t* allowed = nullptr);

 private:
  SamplerParams p_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> cand_;
};

}  // namespace lr
