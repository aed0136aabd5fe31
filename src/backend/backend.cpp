// The two interfaces' shared parts: a session's checks (backend.h), a
// batch's checks (batch.h), and the batch of one slot over a session.
#include "backend/backend.h"

#include <vector>

#include "backend/batch.h"
#include "core/error.h"

namespace lr {

Backend::Backend(std::shared_ptr<const Weights> w, int ctx) : weights_(std::move(w)), ctx_(ctx) {
  if (ctx <= 0) fail("context size must be positive (got {})", ctx);
}

void require_dense_cache(const BackendOptions& opt, const char* backend) {
  if (!opt.keys.dense())
    fail(
        "{} keeps one KV cache type, the default (--cache-type-k f32 --cache-type-v f32); "
        "--cache-type-k {} --cache-type-v {} run on the CPU's fast path",
        backend, kv::key_type_name(opt.keys.type), kv::value_type_name(opt.keys.values()));
}

void Backend::rewind(int n) {
  LR_ASSERT(n >= 0 && n <= n_past_);
  if (can_rewind(n) != n)
    fail("cannot rewind to {} of {} tokens: the sliding-window layers no longer hold its window", n,
         n_past_);
  on_rewind(n);
  n_past_ = n;
}

int Backend::rewindable(int n) const {
  LR_ASSERT(n >= 0 && n <= n_past_);
  return can_rewind(n);
}

void Backend::check_forward_args(const int32_t* tokens, int n) const {
  if (n <= 0) fail("forward: no tokens to run");
  if (int64_t(n_past_) + n > ctx_)
    fail("context is full: {} cached + {} new tokens exceed the context size {} (raise -c/--ctx)",
         n_past_, n, ctx_);
  for (int t = 0; t < n; ++t)
    if (tokens[t] < 0 || tokens[t] >= weights_->cfg.vocab)
      fail("token id {} is out of range for a vocabulary of {}", tokens[t], weights_->cfg.vocab);
}

BatchBackend::BatchBackend(std::shared_ptr<const Weights> w, int slots, int ctx,
                           int max_step_tokens)
    : weights_(std::move(w)), ctx_(ctx), max_step_tokens_(max_step_tokens) {
  if (slots < 1) fail("a batch needs at least one slot (got {})", slots);
  if (ctx < 1) fail("a batch needs a context of at least one token (got {})", ctx);
  if (max_step_tokens < 1)
    fail("a batch step needs room for at least one token (got {})", max_step_tokens);
  n_past_.assign(size_t(slots), 0);
}

bool BatchBackend::copy_prefix(int from, int to, int n, int held) {
  LR_ASSERT(from >= 0 && from < slots() && to >= 0 && to < slots() && from != to);
  LR_ASSERT(n >= 0 && n <= n_past_[size_t(from)] && can_rewind(from, n) == n);
  LR_ASSERT(held >= 0 && held <= n && held <= n_past_[size_t(to)]);
  if (!do_copy_prefix(from, to, n, held)) return false;
  n_past_[size_t(to)] = n;
  return true;
}

bool BatchBackend::load_prefix(const Stored& p, int slot, int n) {
  LR_ASSERT(slot >= 0 && slot < slots() && n >= 0 && n <= p.n && n <= ctx_);
  if (!do_load_prefix(p, slot, n)) return false;
  n_past_[size_t(slot)] = n;
  return true;
}

void BatchBackend::rewind(int slot, int n) {
  if (slot < 0 || slot >= slots()) fail("slot {} does not exist (the batch has {})", slot, slots());
  if (n < 0 || n > n_past_[size_t(slot)])
    fail("cannot rewind slot {} to {} tokens: it holds {}", slot, n, n_past_[size_t(slot)]);
  if (can_rewind(slot, n) != n)
    fail(
        "cannot rewind slot {} to {} of {} tokens: the sliding-window layers no longer hold its "
        "window",
        slot, n, n_past_[size_t(slot)]);
  on_rewind(slot, n);
  n_past_[size_t(slot)] = n;
}

void BatchBackend::check_step(const std::vector<Chunk>& chunks) const {
  if (chunks.empty()) fail("batch step: no chunks to run");
  std::vector<bool> seen(size_t(slots()), false);
  int64_t total = 0;
  bool prompt_seen = false;
  for (const Chunk& c : chunks) {
    if (c.generated && prompt_seen)
      fail("batch step: slot {}: a generated chunk comes before the prompt chunks", c.slot);
    if (c.generated && c.n != 1 && !verifies())
      fail(
          "batch step: slot {}: a generated chunk holds one token on this backend (drafted "
          "tokens are verified on the CPU batch)",
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

namespace {

class SequenceBatch final : public BatchBackend {
 public:
  SequenceBatch(std::unique_ptr<Backend> session, int max_step_tokens)
      : BatchBackend(session->shared_weights(), 1, session->ctx(), max_step_tokens),
        session_(std::move(session)),
        scratch_(size_t(weights_->cfg.vocab)) {
    LR_ASSERT(session_->n_past() == 0);
  }

  void step(const std::vector<Chunk>& chunks, float* logits) override {
    check_step(chunks);
    const Chunk& c = chunks.front();  // one slot: one chunk
    const ExecCounters before = session_->counters();
    session_->forward(c.tokens, c.n, c.logits ? logits : scratch_.data(), false);
    n_past_[0] += c.n;
    LR_ASSERT(n_past_[0] == session_->n_past());
    const ExecCounters after = session_->counters();
    last_ = {c.n, after.dispatches - before.dispatches, after.barriers - before.barriers};
  }

  StepStats last_step() const override { return last_; }

 private:
  void on_rewind(int /*slot*/, int n) override { session_->rewind(n); }
  int can_rewind(int /*slot*/, int n) const override { return session_->rewindable(n); }
  uint64_t cache_bytes(int /*slot*/) const override { return session_->cache_bytes(); }

  std::unique_ptr<Backend> session_;
  std::vector<float> scratch_;  // the logits of a chunk that asks for none
  StepStats last_;
};

}  // namespace

std::unique_ptr<BatchBackend> make_sequence_batch(std::unique_ptr<Backend> session,
                                                  int max_step_tokens) {
  if (!session) fail("a one-slot batch needs a session");
  return std::make_unique<SequenceBatch>(std::move(session), max_step_tokens);
}

}  // namespace lr
