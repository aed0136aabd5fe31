#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"

namespace lr {

int32_t argmax(const float* logits, int n) {
  LR_ASSERT(n > 0);
  int32_t best = 0;
  for (int i = 1; i < n; ++i)
    if (logits[i] > logits[best]) best = i;
  return best;
}

float token_logprob(const float* logits, int n, int32_t id, int top,
                    std::vector<TokenLogprob>* top_out) {
  LR_ASSERT(n > 0 && id >= 0 && id < n);
  const float mx = *std::max_element(logits, logits + n);
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += std::exp(double(logits[i] - mx));
  const double lse = double(mx) + std::log(sum);
  if (top > 0 && top_out) {
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) ids[size_t(i)] = i;
    const size_t k = std::min(size_t(top), ids.size());
    std::partial_sort(ids.begin(), ids.begin() + long(k), ids.end(), [&](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    top_out->clear();
    for (size_t i = 0; i < k; ++i) top_out->push_back({ids[i], float(double(logits[ids[i]]) - lse)});
  }
  return float(double(logits[id]) - lse);
}

Sampler::Sampler(const SamplerParams& p) : p_(p), rng_(p.seed) {
  if (p.top_p <= 0) fail("top-p must be > 0 (got {})", p.top_p);
  if (p.min_p >= 1) fail("min-p must be < 1 (got {})", p.min_p);
  if (p.repeat_penalty <= 0) fail("repeat penalty must be > 0 (got {})", p.repeat_penalty);
}

int32_t Sampler::sample(const float* logits, int n, const std::vector<int32_t>& history,
                        size_t n_prompt, const uint8_t* allowed) {
  LR_ASSERT(n_prompt <= history.size());
  cand_.resize(size_t(n));
  for (int i = 0; i < n; ++i) cand_[size_t(i)] = {logits[i], i};

  if (p_.repeat_penalty != 1.f && p_.repeat_last_n != 0) {
    size_t from = p_.repeat_last_n < 0 || size_t(p_.repeat_last_n) >= history.size()
                      ? 0
                      : history.size() - size_t(p_.repeat_last_n);
    std::unordered_set<int32_t> seen(history.begin() + long(from), history.end());
    for (int32_t id : seen) {
      if (id < 0 || id >= n) continue;
      float& l = cand_[size_t(id)].first;
      l = l > 0 ? l / p_.repeat_penalty : l * p_.repeat_penalty;
    }
  }

  if (p_.presence_penalty != 0.f || p_.frequency_penalty != 0.f) {
    std::unordered_map<int32_t, int> count;
    for (size_t i = n_prompt; i < history.size(); ++i) ++count[history[i]];
    for (auto [id, k] : count)
      if (id >= 0 && id < n)
        cand_[size_t(id)].first -= p_.presence_penalty + p_.frequency_penalty * float(k);
  }

  for (auto [id, bias] : p_.logit_bias)
    if (id >= 0 && id < n) cand_[size_t(id)].first += bias;
  if (allowed) {  // the masked tokens leave the candidates (their order stays the logits')
    size_t k = 0;
    for (size_t i = 0; i < cand_.size(); ++i)
      if (allowed[cand_[i].second]) cand_[k++] = cand_[i];
    LR_ASSERT(k > 0);
    cand_.resize(k);
  }

  auto by_logit = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  if (p_.temperature <= 0) return std::min_element(cand_.begin(), cand_.end(), by_logit)->second;

  size_t keep = cand_.size();
  if (p_.top_k > 0 && size_t(p_.top_k) < keep) keep = size_t(p_.top_k);
  // Softmax over the candidates at `temp` (relative to the largest logit).
  auto probs = [&](float temp) {
    std::vector<double> pr(cand_.size());
    double mx = std::min_element(cand_.begin(), cand_.end(), by_logit)->first, sum = 0;  // the largest
    for (size_t i = 0; i < cand_.size(); ++i) sum += pr[i] = std::exp((cand_[i].first - mx) / temp);
    for (double& v : pr) v /= sum;
    return pr;
  };
  if (keep == cand_.size() && p_.top_p >= 1.f) {
    // Neither top-k nor top-p (OpenAI's defaults): no order is needed, and
    // min-p is a threshold on the logits (p >= min_p p_max at temperature 1),
    // so a server does not sort a 150k vocabulary for every token.
    if (p_.min_p > 0.f) {
      const float cut = std::min_element(cand_.begin(), cand_.end(), by_logit)->first + std::log(p_.min_p);
      cand_.erase(std::remove_if(cand_.begin(), cand_.end(), [&](const auto& c) { return c.first < cut; }),
                  cand_.end());
    }
    const std::vector<double> pr = probs(p_.temperature);
    std::discrete_distribution<size_t> dist(pr.begin(), pr.end());
    return cand_[dist(rng_)].second;
  }
  std::partial_sort(cand_.begin(), cand_.begin() + long(keep), cand_.end(), by_logit);
  cand_.resize(keep);

  // Softmax at temperature 1 for the top-p / min-p filters, as llama.cpp does.
  std::vector<double> pr = probs(1.f);
  if (p_.top_p < 1.f) {
    double cum = 0;
    size_t i = 0;
    while (i < pr.size()) {
      cum += pr[i++];
      if (cum >= p_.top_p) break;
    }
    cand_.resize(std::max<size_t>(1, i));
    pr.resize(cand_.size());
  }
  if (p_.min_p > 0.f) {
    size_t i = 1;
    while (i < pr.size() && pr[i] >= p_.min_p * pr[0]) ++i;
    cand_.resize(i);
  }
  pr = probs(p_.temperature);
  std::discrete_distribution<size_t> dist(pr.begin(), pr.end());
  return cand_[dist(rng_)].second;
}

}  // namespace lr
