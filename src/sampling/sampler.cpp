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

double TokenDist::prob(int32_t id) const {
  const auto it = std::lower_bound(ids.begin(), ids.end(), id);
  return it != ids.end() && *it == id ? p[size_t(it - ids.begin())] : 0.0;
}

double TokenDist::max() const {
  return p.empty() ? 0.0 : *std::max_element(p.begin(), p.end());
}

int32_t draw(const TokenDist& d, std::mt19937_64& rng) {
  LR_ASSERT(!d.ids.empty() && d.ids.size() == d.p.size());
  std::discrete_distribution<size_t> dist(d.p.begin(), d.p.end());
  return d.ids[dist(rng)];
}

int32_t Sampler::sample(const float* logits, int n, const std::vector<int32_t>& history,
                        size_t n_prompt, const uint8_t* allowed) {
  filter(logits, n, history, n_prompt, allowed);
  if (p_.temperature <= 0) return cand_[0].second;  // (greedy draws nothing)
  std::discrete_distribution<size_t> dist(pr_.begin(), pr_.end());
  return cand_[dist(rng_)].second;
}

TokenDist Sampler::distribution(const float* logits, int n, const std::vector<int32_t>& history,
                                size_t n_prompt, const uint8_t* allowed) {
  filter(logits, n, history, n_prompt, allowed);
  std::vector<size_t> order(cand_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  const auto by_id = [&](size_t a, size_t b) { return cand_[a].second < cand_[b].second; };
  if (!std::is_sorted(order.begin(), order.end(), by_id))  // (unfiltered: already in id order)
    std::sort(order.begin(), order.end(), by_id);
  TokenDist d;
  for (size_t i : order) {
    d.ids.push_back(cand_[i].second);
    d.p.push_back(pr_[i]);
  }
  return d;
}

Sampler::Verdict Sampler::verify(const float* logits, int n, const std::vector<int32_t>& history,
                                 size_t n_prompt, const uint8_t* allowed, int32_t drafted,
                                 const TokenDist& q) {
  const double qd = q.prob(drafted);
  LR_ASSERT(qd > 0);  // drafted was drawn from q
  filter(logits, n, history, n_prompt, allowed);
  double pd = 0;
  for (size_t i = 0; i < cand_.size(); ++i)
    if (cand_[i].second == drafted) pd = pr_[i];
  if (pd >= qd) return {drafted, true};
  if (pd > 0 && std::uniform_real_distribution<double>(0.0, 1.0)(rng_) * qd < pd)
    return {drafted, true};
  // Rejected: the rest of p that q did not cover.
  std::vector<double> rest(cand_.size());
  double sum = 0;
  for (size_t i = 0; i < cand_.size(); ++i)
    sum += rest[i] = std::max(0.0, pr_[i] - q.prob(cand_[i].second));
  if (!(sum > 0)) rest = pr_;  // (p <= q everywhere: p == q up to rounding)
  std::discrete_distribution<size_t> dist(rest.begin(), rest.end());
  return {cand_[dist(rng_)].second, false};
}

void Sampler::filter(const float* logits, int n, const std::vector<int32_t>& history,
                     size_t n_prompt, const uint8_t* allowed) {
  LR_ASSERT(n_prompt <= history.size() && n > 0);
  const bool penalties = (p_.repeat_penalty != 1.f && p_.repeat_last_n != 0) ||
                         p_.presence_penalty != 0.f || p_.frequency_penalty != 0.f;
  if (p_.temperature <= 0 && !penalties && p_.logit_bias.empty() && !allowed) {
    // Plain greedy: the largest logit, the lowest id among equals (as the
    // candidates' order below), without building the candidates.
    int best = 0;
    for (int i = 1; i < n; ++i)
      if (logits[i] > logits[best]) best = i;
    cand_.assign(1, {logits[best], best});
    pr_.assign(1, 1.0);
    return;
  }
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
  if (p_.temperature <= 0) {
    cand_ = {*std::min_element(cand_.begin(), cand_.end(), by_logit)};
    pr_.assign(1, 1.0);
    return;
  }

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
    pr_ = probs(p_.temperature);
    return;
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
  pr_ = probs(p_.temperature);
}

}  // namespace lr
