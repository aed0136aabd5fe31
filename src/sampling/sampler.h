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

// A sampling distribution: the tokens that can be drawn (ascending ids)
// and their probabilities (summing to 1).
struct TokenDist {
  std::vector<int32_t> ids;
  std::vector<double> p;
  double prob(int32_t id) const;  // 0 for a token not in ids
  double max() const;
};
// A token drawn from d.
int32_t draw(const TokenDist& d, std::mt19937_64& rng);

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
  // The distribution sample() draws from (greedy: the argmax, certain).
  TokenDist distribution(const float* logits, int n, const std::vector<int32_t>& history,
                         size_t n_prompt = 0, const uint8_t* allowed = nullptr);
  // Speculative sampling's rule (Leviathan et al. 2023, Chen et al. 2023):
  // `drafted` was drawn from q (q.prob(drafted) > 0). It is taken with
  // probability min(1, p/q) at it, p the distribution sample() would draw
  // from; else a token is drawn from max(0, p - q), renormalized. The token
  // returned is distributed as p, whatever q is. With q certain (all its
  // mass on drafted), sample() itself is that rule: drafts of that kind are
  // verified by sampling and comparing (runtime/engine.h).
  struct Verdict {
    int32_t id;
    bool taken;
  };
  Verdict verify(const float* logits, int n, const std::vector<int32_t>& history, size_t n_prompt,
                 const uint8_t* allowed, int32_t drafted, const TokenDist& q);

 private:
  // The candidates (cand_) and their probabilities (pr_, in cand_'s order)
  // sample() draws from.
  void filter(const float* logits, int n, const std::vector<int32_t>& history, size_t n_prompt,
              const uint8_t* allowed);

  SamplerParams p_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> cand_;
  std::vector<double> pr_;
};

}  // namespace lr
