// The legacy low-rank KV cache (the research baseline of --kv legacy, see
// model/plan_transforms.h latent_kv): the cache holds the latents V_k x and
// V_v x of every position, and each step rebuilds the keys (roped) and
// values of the whole history from them into one layer of position-major
// scratch [ctx, kv_dim] before attending.
#pragma once

#include <cstdint>
#include <vector>

namespace lr::kv {

class LatentCache {
 public:
  // ranks: the latent widths of k and v in every layer.
  LatentCache(int ctx, int kv_dim, const std::vector<int64_t>& k_ranks,
              const std::vector<int64_t>& v_ranks);

  // Latents of layer l at position pos ([k_rank(l)] and [v_rank(l)] floats,
  // positions consecutive).
  float* k_latent(int l, int pos) {
    return &pk_[pk_off_[size_t(l)] + size_t(pos) * size_t(rk_[size_t(l)])];
  }
  float* v_latent(int l, int pos) {
    return &pv_[pv_off_[size_t(l)] + size_t(pos) * size_t(rv_[size_t(l)])];
  }
  int64_t k_rank(int l) const { return rk_[size_t(l)]; }
  int64_t v_rank(int l) const { return rv_[size_t(l)]; }
  // The rebuilt history of the current layer: row j is position j, [ctx, kv_dim].
  float* keys() { return k_.data(); }
  float* values() { return v_.data(); }
  const float* keys() const { return k_.data(); }
  const float* values() const { return v_.data(); }
  int kv_dim() const { return kv_dim_; }
  uint64_t bytes() const {
    return (k_.size() + v_.size() + pk_.size() + pv_.size()) * sizeof(float);
  }

 private:
  int kv_dim_;
  std::vector<float> pk_, pv_;           // per layer l [ctx, rank of k (v) in layer l]
  std::vector<size_t> pk_off_, pv_off_;  // where layer l starts
  std::vector<int64_t> rk_, rv_;
  std::vector<float> k_, v_;  // [ctx, kv_dim]
};

inline LatentCache::LatentCache(int ctx, int kv_dim, const std::vector<int64_t>& k_ranks,
                                const std::vector<int64_t>& v_ranks)
    : kv_dim_(kv_dim),
      rk_(k_ranks),
      rv_(v_ranks),
      k_(size_t(ctx) * size_t(kv_dim), 0.f),
      v_(k_.size(), 0.f) {
  for (size_t l = 0; l < rk_.size(); ++l) {
    pk_off_.push_back(pk_.size());
    pv_off_.push_back(pv_.size());
    pk_.resize(pk_.size() + size_t(ctx) * size_t(rk_[l]));
    pv_.resize(pv_.size() + size_t(ctx) * size_t(rv_[l]));
  }
}

}  // namespace lr::kv
