// The dense KV cache of a session: post-RoPE f32 keys and values,
// preallocated for ctx positions, head-major: the keys of one KV head of one
// layer are contiguous [ctx, head_dim], so attention streams them
// (key(l, h) + j * head_dim is position j).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace lr::kv {

class DenseCache {
 public:
  DenseCache(int n_layers, int n_kv_heads, int head_dim, int ctx)
      : n_kv_heads_(n_kv_heads),
        head_dim_(head_dim),
        ctx_(ctx),
        k_(size_t(n_layers) * size_t(n_kv_heads) * size_t(ctx) * size_t(head_dim), 0.f),
        v_(k_.size(), 0.f) {}

  float* key(int l, int h) { return &k_[offset(l, h)]; }
  float* value(int l, int h) { return &v_[offset(l, h)]; }
  const float* key(int l, int h) const { return &k_[offset(l, h)]; }
  const float* value(int l, int h) const { return &v_[offset(l, h)]; }
  int head_dim() const { return head_dim_; }
  // Writes the keys and values of KV head h at positions [pos, pos + n)
  // (rows `stride` floats apart).
  void append(int l, int h, int pos, const float* k, const float* v, int n, int64_t stride);
  uint64_t bytes() const { return (k_.size() + v_.size()) * sizeof(float); }

 private:
  size_t offset(int l, int h) const {
    return (size_t(l) * size_t(n_kv_heads_) + size_t(h)) * size_t(ctx_) * size_t(head_dim_);
  }
  int n_kv_heads_, head_dim_, ctx_;
  std::vector<float> k_, v_;  // [n_layers, n_kv_heads, ctx, head_dim]
};

inline void DenseCache::append(int l, int h, int pos, const float* k, const float* v, int n,
                               int64_t stride) {
  for (int t = 0; t < n; ++t) {
    std::copy_n(k + t * stride, head_dim_, key(l, h) + int64_t(pos + t) * head_dim_);
    std::copy_n(v + t * stride, head_dim_, value(l, h) + int64_t(pos + t) * head_dim_);
  }
}

}  // namespace lr::kv
