// What guesses the tokens speculative decoding verifies (runtime/engine.h
// EngineOptions::draft_max): the text's own repeats (prompt lookup,
// ngram_draft.h) or a smaller model with the same vocabulary. A guess costs
// only speed: the engine keeps a drafted token only where the answer
// sampled it itself.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/batch.h"
#include "runtime/ngram_draft.h"

namespace lr {

class Drafter {
 public:
  // Slot `slot` wants at most k tokens to follow hist (the tokens in its
  // cache and the one it feeds next).
  struct Ask {
    int slot = 0;
    std::vector<int32_t> hist;
    int k = 0;
  };
  virtual ~Drafter() = default;
  // out[i]: the guesses for asks[i] (at most its k; none is fine).
  virtual void draft(const std::vector<Ask>& asks, std::vector<std::vector<int32_t>>& out) = 0;
};

std::unique_ptr<Drafter> ngram_drafter(const NgramDraft& o);
// A draft model's greedy tokens, run on `draft` (a slot per engine slot,
// the same context): each call feeds a slot what its cache lacks of hist
// (cut back to their common prefix first), then one token a step.
std::unique_ptr<Drafter> model_drafter(std::unique_ptr<BatchBackend> draft);

}  // namespace lr
