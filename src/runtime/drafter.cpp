#include "runtime/drafter.h"

#include <algorithm>

#include "core/error.h"

namespace lr {

namespace {

class NgramDrafter final : public Drafter {
 public:
  explicit NgramDrafter(const NgramDraft& o) : o_(o) {}
  void draft(const std::vector<Ask>& asks, std::vector<std::vector<int32_t>>& out) override {
    out.resize(asks.size());
    for (size_t i = 0; i < asks.size(); ++i) out[i] = ngram_draft(asks[i].hist, asks[i].k, o_);
  }

 private:
  NgramDraft o_;
};

class ModelDrafter final : public Drafter {
 public:
  explicit ModelDrafter(std::unique_ptr<BatchBackend> b)
      : b_(std::move(b)), held_(size_t(b_->slots())) {}

  void draft(const std::vector<Ask>& asks, std::vector<std::vector<int32_t>>& out) override {
    out.assign(asks.size(), {});
    std::vector<std::vector<int32_t>> pending(asks.size());
    for (size_t i = 0; i < asks.size(); ++i) {
      const Ask& a = asks[i];
      LR_ASSERT(a.slot >= 0 && a.slot < b_->slots() && !a.hist.empty());
      std::vector<int32_t>& held = held_[size_t(a.slot)];
      // What the draft's cache holds of hist, all but hist's last token at
      // most (its logits are wanted).
      size_t common = size_t(
          std::mismatch(held.begin(), held.begin() + long(std::min(held.size(), a.hist.size() - 1)),
                        a.hist.begin())
              .first -
          held.begin());
      common = size_t(b_->rewindable(a.slot, int(std::min(common, size_t(b_->n_past(a.slot))))));
      b_->rewind(a.slot, int(common));
      held.resize(common);
      // Drafted tokens must fit the draft's context too.
      if (a.k > 0 && int(a.hist.size()) + a.k - 1 <= b_->ctx())
        pending[i].assign(a.hist.begin() + long(common), a.hist.end());
    }
    const size_t vocab = size_t(b_->weights().cfg.vocab);
    for (;;) {
      std::vector<BatchBackend::Chunk> chunks;
      std::vector<size_t> who;
      int budget = b_->max_step_tokens();
      for (size_t i = 0; i < asks.size() && budget > 0; ++i) {
        if (pending[i].empty()) continue;
        const int n = std::min(int(pending[i].size()), budget);
        chunks.push_back({asks[i].slot, pending[i].data(), n, n == int(pending[i].size())});
        who.push_back(i);
        budget -= n;
      }
      if (chunks.empty()) return;
      logits_.resize(chunks.size() * vocab);
      b_->step(chunks, logits_.data());
      const float* row = logits_.data();
      for (size_t c = 0; c < chunks.size(); ++c) {
        const size_t i = who[c];
        std::vector<int32_t>& held = held_[size_t(asks[i].slot)];
        held.insert(held.end(), pending[i].begin(), pending[i].begin() + chunks[c].n);
        pending[i].erase(pending[i].begin(), pending[i].begin() + chunks[c].n);
        if (!chunks[c].logits) continue;
        const int32_t d = int32_t(std::max_element(row, row + vocab) - row);
        row += vocab;
        out[i].push_back(d);
        if (int(out[i].size()) < asks[i].k) pending[i] = {d};
      }
    }
  }

 private:
  std::unique_ptr<BatchBackend> b_;
  std::vector<std::vector<int32_t>> held_;  // [slots] the tokens in the draft's cache
  std::vector<float> logits_;
};

}  // namespace

std::unique_ptr<Drafter> ngram_drafter(const NgramDraft& o) {
  return std::make_unique<NgramDrafter>(o);
}

std::unique_ptr<Drafter> model_drafter(std::unique_ptr<BatchBackend> draft) {
  return std::make_unique<ModelDrafter>(std::move(draft));
}

}  // namespace lr
