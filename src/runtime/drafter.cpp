#include "runtime/drafter.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

#include "core/error.h"

namespace lr {

namespace {

class NgramDrafter final : public Drafter {
 public:
  explicit NgramDrafter(const NgramDraft& o) : o_(o) {}
  void draft(const std::vector<Ask>& asks, std::vector<Draft>& out) override {
    out.assign(asks.size(), {});
    for (size_t i = 0; i < asks.size(); ++i)
      out[i].tokens = ngram_draft(asks[i].hist, asks[i].k, o_);
  }

 private:
  NgramDraft o_;
};

// The draft's sampler for an answer sampled with p: the same filters, no penalties.
SamplerParams draft_sampling(SamplerParams p) {
  p.repeat_penalty = 1.f;
  p.presence_penalty = p.frequency_penalty = 0.f;
  return p;
}

class ModelDrafter final : public Drafter {
 public:
  ModelDrafter(std::unique_ptr<BatchBackend> b, const ModelDraftOptions& o)
      : b_(std::move(b)), o_(o), held_(size_t(b_->slots())) {}

  void draft(const std::vector<Ask>& asks, std::vector<Draft>& out) override {
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
    double timed = 0;  // the call's steps but catching up on a prompt
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
      if (chunks.empty()) break;
      logits_.resize(chunks.size() * vocab);
      const auto t0 = std::chrono::steady_clock::now();
      b_->step(chunks, logits_.data());
      if (std::all_of(chunks.begin(), chunks.end(), [](const auto& c) { return c.n <= 4; }))
        timed += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const float* row = logits_.data();
      for (size_t c = 0; c < chunks.size(); ++c) {
        const size_t i = who[c];
        std::vector<int32_t>& held = held_[size_t(asks[i].slot)];
        held.insert(held.end(), pending[i].begin(), pending[i].begin() + chunks[c].n);
        pending[i].erase(pending[i].begin(), pending[i].begin() + chunks[c].n);
        if (!chunks[c].logits) continue;
        const float* logits = row;
        row += vocab;
        if (std::optional<int32_t> d = next(asks[i], logits, int(vocab), out[i]);
            d && int(out[i].tokens.size()) < asks[i].k)
          pending[i] = {*d};
      }
    }
    size_t positions = 0;  // drafting steps that gave tokens
    for (const Draft& d : out) positions = std::max(positions, d.tokens.size());
    if (timed > 0) {
      const double s = timed / double(std::max<size_t>(positions, 1));
      token_s_ = token_s_ > 0 ? 0.8 * token_s_ + 0.2 * s : s;
    }
  }

  double token_seconds() const override { return token_s_; }

 private:
  // The token drafted after `logits` into d (none when the draft is not confident).
  std::optional<int32_t> next(const Ask& a, const float* logits, int vocab, Draft& d) const {
    if (a.sampling.temperature <= 0) {  // its probability at temperature 1
      const int32_t t = argmax(logits, vocab);
      if (std::exp(token_logprob(logits, vocab, t)) < o_.p_min) return std::nullopt;
      d.tokens.push_back(t);
      return t;
    }
    LR_ASSERT(a.rng);
    TokenDist q = Sampler(draft_sampling(a.sampling)).distribution(logits, vocab, {});
    if (q.max() < o_.p_min) return std::nullopt;
    d.tokens.push_back(draw(q, *a.rng));
    d.q.push_back(std::move(q));
    return d.tokens.back();
  }

  std::unique_ptr<BatchBackend> b_;
  ModelDraftOptions o_;
  std::vector<std::vector<int32_t>> held_;  // [slots] the tokens in the draft's cache
  double token_s_ = 0;                      // token_seconds(): a decayed average
  std::vector<float> logits_;
};

}  // namespace

std::unique_ptr<Drafter> ngram_drafter(const NgramDraft& o) {
  return std::make_unique<NgramDrafter>(o);
}

std::unique_ptr<Drafter> model_drafter(std::unique_ptr<BatchBackend> draft,
                                       const ModelDraftOptions& o) {
  return std::make_unique<ModelDrafter>(std::move(draft), o);
}

void DraftRate::add(int drafted, int taken) {
  LR_ASSERT(drafted > 0 && taken >= 0 && taken <= drafted);
  constexpr double kDecay = 0.8;
  taken_ = kDecay * taken_ + taken;
  rejected_ = kDecay * rejected_ + (taken < drafted ? 1 : 0);
}

int DraftRate::length(int max, double cost) {
  const double a = rate();
  int best = 0;
  double best_gain = 1.0, tokens = 1.0, ak = 1.0;  // k = 0: a token for a step
  for (int k = 1; k <= max; ++k) {
    ak *= a;
    tokens += ak;
    const double gain = tokens / (1.0 + k * cost);
    if (gain > best_gain * (1 + 1e-9)) best = k, best_gain = gain;
  }
  if (best == 0 && ++idle_ >= 16) best = 1;
  if (best > 0) idle_ = 0;
  return best;
}

}  // namespace lr
