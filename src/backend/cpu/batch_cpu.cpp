// The fast CPU batch (backend/batch.h): one session (threads, RoPE table),
// one executor whose rows are computed as decode steps, a dense cache per slot.
#include <algorithm>
#include <memory>

#include "backend/batch.h"
#include "backend/cpu/cpu_weights.h"
#include "backend/cpu/executor.h"
#include "backend/cpu/session.h"
#include "core/error.h"
#include "model/plan_transforms.h"

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

namespace {

class CpuBatch final : public BatchBackend {
 public:
  CpuBatch(std::shared_ptr<const Weights> w, const BackendOptions& opt, int slots,
           int max_step_tokens)
      : BatchBackend(std::move(w), slots, opt.ctx, max_step_tokens),
        s_(*weights_, checked(opt), KvMode::Dense, /*own_cache=*/false),
        exec_(s_, derive(*weights_, {Target::Cpu, false}, opt.exec), max_step_tokens, nullptr,
              false, cpu::Rows::AsDecode) {
    const Config& c = weights_->cfg;
    caches_.reserve(size_t(slots));
    for (int i = 0; i < slots; ++i)
      caches_.emplace_back(c.n_layers, c.n_kv_heads, c.head_dim, opt.ctx);
    tokens_.resize(size_t(max_step_tokens));
    pos_.resize(size_t(max_step_tokens));
    rows_.resize(size_t(max_step_tokens));
  }

  void step(const std::vector<Chunk>& chunks, float* logits) override {
    check_step(chunks);
    int n = 0, generated = 0;
    head_.clear();
    for (const Chunk& c : chunks) {
      for (int t = 0; t < c.n; ++t, ++n) {
        tokens_[size_t(n)] = c.tokens[t];
        pos_[size_t(n)] = n_past_[size_t(c.slot)] + t;
        rows_[size_t(n)] = &caches_[size_t(c.slot)];
      }
      if (c.logits) head_.push_back(n - 1);
      generated += c.generated ? c.n : 0;
    }
    const uint64_t d0 = s_.pool.dispatches(), b0 = s_.pool.barriers();
    exec_.run_rows(tokens_.data(), pos_.data(), rows_.data(), n, generated, head_.data(),
                   int(head_.size()), logits);
    for (const Chunk& c : chunks) n_past_[size_t(c.slot)] += c.n;
    last_ = {n, s_.pool.dispatches() - d0, s_.pool.barriers() - b0};
  }

  StepStats last_step() const override { return last_; }

 private:
  static const BackendOptions& checked(const BackendOptions& opt) {
    if (opt.observer) fail("a batch does not take an activation observer");
    if (opt.keys.type != kv::KeyType::F32)
      fail("a batch keeps dense f32 keys (--cache-type-k {} is single-sequence only)",
           kv::key_type_name(opt.keys.type));
    if (opt.exec.kv != KvMode::Dense) fail("a batch runs with dense KV");
    return opt;
  }

  cpu::Session s_;
  cpu::Executor exec_;
  std::vector<kv::DenseCache> caches_;  // [slots]
  std::vector<int32_t> tokens_;         // [max_step_tokens]: the step's rows
  std::vector<int> pos_;
  std::vector<kv::DenseCache*> rows_;
  std::vector<int> head_;  // rows whose logits are written
  StepStats last_;
};

}  // namespace

std::unique_ptr<BatchBackend> make_cpu_batch_backend(std::shared_ptr<const Weights> w,
                                                     const BackendOptions& opt, int slots,
                                                     int max_step_tokens) {
  return std::make_unique<CpuBatch>(cpu::with_panels(std::move(w)), opt, slots, max_step_tokens);
}

}  // namespace lr
