// The fast CPU batch (backend/batch.h): one session (threads, RoPE table),
// one executor whose rows are computed as decode steps, a cache per slot
// (seq_cache.h: dense f32, or the compressed key type of opt.keys).
#include <algorithm>
#include <memory>

#include "backend/batch.h"
#include "backend/cpu/cpu.h"
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
        s_(*weights_, checked(opt), KvMode::Dense, /*own_cache=*/false, cpu::panels_for(weights_)),
        exec_(s_, derive(*weights_, {Target::Cpu, !opt.keys.dense()}, opt.exec), max_step_tokens,
              nullptr, false, cpu::Rows::AsDecode),
        keys_(opt.keys.type) {
    for (int i = 0; i < slots; ++i)
      caches_.push_back(
          cpu::make_seq_cache(*weights_, opt, KvMode::Dense, /*batched=*/true, max_step_tokens));
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
        rows_[size_t(n)] = caches_[size_t(c.slot)].get();
      }
      if (c.every_logits)
        for (int t = c.n; t > 0; --t) head_.push_back(n - t);
      else if (c.logits)
        head_.push_back(n - 1);
      generated += c.generated ? c.n : 0;
    }
    const uint64_t d0 = s_.pool.dispatches(), b0 = s_.pool.barriers();
    exec_.run_rows(tokens_.data(), pos_.data(), rows_.data(), n, generated, head_.data(),
                   int(head_.size()), logits);
    for (const Chunk& c : chunks) {
      n_past_[size_t(c.slot)] += c.n;
      caches_[size_t(c.slot)]->end_step();
    }
    last_ = {n, s_.pool.dispatches() - d0, s_.pool.barriers() - b0};
  }

  StepStats last_step() const override { return last_; }
  bool verifies() const override { return true; }
  bool copies_prefixes() const override { return caches_.front()->copies(); }
  std::shared_ptr<const Stored> store_prefix(int slot, int n) override {
    LR_ASSERT(n > 0 && n <= n_past_.at(size_t(slot)) && can_rewind(slot, n) == n);
    auto p = std::make_shared<CpuStored>();
    p->cache = caches_[size_t(slot)]->store_prefix(n);
    if (!p->cache) return nullptr;
    p->n = n;
    p->bytes = p->cache->resident_bytes();
    return p;
  }
  bool rewinds_exactly() const override {
    return keys_ != kv::KeyType::Kivi2 && keys_ != kv::KeyType::Svdq;
  }

 private:
  void on_rewind(int slot, int n) override { caches_[size_t(slot)]->truncate(n); }
  void do_release(int slot) override { caches_[size_t(slot)]->release(); }
  bool do_copy_prefix(int from, int to, int n, int held) override {
    return caches_[size_t(to)]->copy_prefix(*caches_[size_t(from)], n, held);
  }
  struct CpuStored : Stored {
    std::unique_ptr<cpu::SeqCache> cache;  // the positions, in pages slots map
    int usable(int k) const override { return cache->rewindable(n, k); }
  };
  bool do_load_prefix(const Stored& p, int slot, int n) override {
    const auto* s = dynamic_cast<const CpuStored*>(&p);
    return s && caches_[size_t(slot)]->share_prefix(*s->cache, n);
  }
  uint64_t cache_bytes(int slot) const override { return caches_.at(size_t(slot))->bytes(); }
  uint64_t cache_resident(int slot) const override {
    return caches_.at(size_t(slot))->resident_bytes();
  }
  int can_rewind(int slot, int n) const override {
    return caches_[size_t(slot)]->rewindable(n_past_[size_t(slot)], n);
  }
  static const BackendOptions& checked(const BackendOptions& opt) {
    if (opt.cpu.observer) fail("a batch does not take an activation observer");
    if (opt.exec.kv != KvMode::Dense) fail("a batch runs with dense KV");
    return opt;
  }

  cpu::Session s_;
  cpu::Executor exec_;
  kv::KeyType keys_;
  std::vector<std::unique_ptr<cpu::SeqCache>> caches_;  // [slots]
  std::vector<int32_t> tokens_;                         // [max_step_tokens]: the step's rows
  std::vector<int> pos_;
  std::vector<cpu::SeqCache*> rows_;
  std::vector<int> head_;  // rows whose logits are written
  StepStats last_;
};

}  // namespace

std::unique_ptr<BatchBackend> make_cpu_batch_backend(std::shared_ptr<const Weights> w,
                                                     const BackendOptions& opt, int slots,
                                                     int max_step_tokens) {
  return std::make_unique<CpuBatch>(std::move(w), opt, slots, max_step_tokens);
}

}  // namespace lr
