#include "backend/batch.h"

#include "core/error.h"

namespace lr {

BatchBackend::BatchBackend(std::shared_ptr<const Weights> w, int slots, int ctx,
                           int max_step_tokens)
    : weights_(std::move(w)), ctx_(ctx), max_step_tokens_(max_step_tokens) {
  if (slots < 1) fail("a batch needs at least one slot (got {})", slots);
  if (ctx < 1) fail("a batch needs a context of at least one token (got {})", ctx);
  if (max_step_tokens < 1)
    fail("a batch step needs room for at least one token (got {})", max_step_tokens);
  n_past_.assign(size_t(slots), 0);
}

void BatchBackend::rewind(int slot, int n) {
  if (slot < 0 || slot >= slots()) fail("slot {} does not exist (the batch has {})", slot, slots());
  if (n < 0 || n > n_past_[size_t(slot)])
    fail("cannot rewind slot {} to {} tokens: it holds {}", slot, n, n_past_[size_t(slot)]);
  on_rewind(slot, n);
  n_past_[size_t(slot)] = n;
}

void BatchBackend::check_step(const std::vector<Chunk>& chunks) const {
  if (chunks.empty()) fail("batch step: no chunks to run");
  std::vector<bool> seen(size_t(slots()), false);
  int64_t total = 0;
  bool prompt_seen = false;
  for (const Chunk& c : chunks) {
    if (c.generated && (c.n != 1 || prompt_seen))
      fail(
          "batch step: slot {}: a generated chunk holds one token and comes before the prompt "
          "chunks",
          c.slot);
    prompt_seen |= !c.generated;
    if (c.slot < 0 || c.slot >= slots())
      fail("batch step: slot {} does not exist (the batch has {})", c.slot, slots());
    if (seen[size_t(c.slot)]) fail("batch step: slot {} appears twice", c.slot);
    seen[size_t(c.slot)] = true;
    if (c.n <= 0 || !c.tokens) fail("batch step: slot {} has no tokens", c.slot);
    if (int64_t(n_past_[size_t(c.slot)]) + c.n > ctx_)
      fail("slot {}: context is full: {} cached + {} new tokens exceed the slot's context {}",
           c.slot, n_past_[size_t(c.slot)], c.n, ctx_);
    for (int t = 0; t < c.n; ++t)
      if (c.tokens[t] < 0 || c.tokens[t] >= weights_->cfg.vocab)
        fail("slot {}: token id {} is out of range for a vocabulary of {}", c.slot, c.tokens[t],
             weights_->cfg.vocab);
    total += c.n;
  }
  if (total > max_step_tokens_)
    fail("batch step: {} tokens exceed the step's budget of {}", total, max_step_tokens_);
}

}  // namespace lr
