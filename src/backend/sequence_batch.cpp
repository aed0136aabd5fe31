// A batch of one slot over a single-sequence session (backend/batch.h).
#include <vector>

#include "backend/batch.h"
#include "core/error.h"

namespace lr {

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
