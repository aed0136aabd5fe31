// The fast CPU batch (backend/batch.h): one session (threads, RoPE table),
// one executor whose rows are computed as decode steps, a dense cache per slot.
#include <algorithm>
#include <memory>

#include "backend/batch.h"
#include "backend/cpu/exec/cpu_weights.h"
#include "backend/cpu/exec/executor.h"
#include "backend/cpu/exec/session.h"
#include "core/error.h"
#include "model/plan_transforms.h"

namespace lr {

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
      fail("a batch keeps dense f32 keys (--cache-type-k {} runs in one slot: -np 1)",
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
