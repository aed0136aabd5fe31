// What guesses the tokens speculative decoding verifies (runtime/engine.h
// EngineOptions::draft_max): the text's own repeats (prompt lookup,
// ngram_draft.h) or a smaller model with the same vocabulary. A guess costs
// only speed: the engine keeps a drafted token only where speculative
// sampling's rule takes it (sampling/sampler.h Sampler::verify), so the
// answer is distributed as plain decoding's.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "backend/batch.h"
#include "runtime/ngram_draft.h"
#include "sampling/sampler.h"

namespace lr {

class Drafter {
 public:
  // Slot `slot` wants at most k tokens to follow hist (the tokens in its
  // cache and the one it feeds next), for an answer sampled with `sampling`.
  struct Ask {
    int slot = 0;
    std::vector<int32_t> hist;
    int k = 0;
    SamplerParams sampling;
    std::mt19937_64* rng = nullptr;  // the slot's draws of drafted tokens
  };
  // Drafted tokens, and where they were sampled, the distribution each was
  // drawn from (q[i] for tokens[i]). Without q the guesses are certain (all
  // of a draft's mass on each): the answer then samples as plain decoding
  // and keeps a guess it drew itself, which is the same rule and gives plain
  // decoding's very tokens.
  struct Draft {
    std::vector<int32_t> tokens;
    std::vector<TokenDist> q;
  };
  virtual ~Drafter() = default;
  // out[i]: the draft for asks[i] (at most its k tokens; none is fine).
  virtual void draft(const std::vector<Ask>& asks, std::vector<Draft>& out) = 0;
  // Seconds a drafted position costs: a call's work (feeding the draft the
  // answers' new tokens and drafting; not catching up on a prompt) over the
  // most tokens it drafted for a slot. A decayed average; 0: free or not
  // timed yet.
  virtual double token_seconds() const { return 0; }
};

std::unique_ptr<Drafter> ngram_drafter(const NgramDraft& o);

// A draft model's tokens, run on `draft` (a slot per engine slot, the same
// context): each call feeds a slot what its cache lacks of hist (cut back to
// their common prefix first), then one token a step. A greedy answer gets
// the draft's greedy tokens (certain guesses); a sampled one tokens drawn
// from the draft's distribution under the answer's temperature, top-k,
// top-p, min-p and logit bias (penalties left out). Drafting stops at a
// token the draft is not confident of: its largest probability (at
// temperature 1 when greedy) below p_min (llama.cpp's --draft-p-min).
struct ModelDraftOptions {
  float p_min = 0.75f;
};
std::unique_ptr<Drafter> model_drafter(std::unique_ptr<BatchBackend> draft,
                                       const ModelDraftOptions& o = {});

// How many tokens a slot drafts: from how often its drafted tokens were
// taken lately and what a drafted token costs. A geometric run model:
// rate a = P(the next drafted token is taken), from decayed counts of taken
// tokens and of rejections (each verification ends with one unless all were
// taken), starting at 0.8. k drafted tokens give (1 - a^(k+1)) / (1 - a)
// tokens for a step that costs 1 + k c, c a drafted token's cost (drafting
// it and verifying its row) in decode steps; the k of most tokens per cost.
class DraftRate {
 public:
  void add(int drafted, int taken);
  double rate() const { return taken_ / (taken_ + rejected_); }
  // The k in [0, max] of most tokens per cost (0: plain decoding pays
  // best). Where 0 wins 16 steps running, 1 (a probe: the rate may have
  // changed, as where an answer starts copying its prompt).
  int length(int max, double cost);

 private:
  double taken_ = 4, rejected_ = 1;
  int idle_ = 0;  // steps since the last draft
};

}  // namespace lr
