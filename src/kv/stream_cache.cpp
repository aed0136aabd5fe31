#include "kv/stream_cache.h"

#include <algorithm>

#include "core/error.h"

namespace lr::kv {

StreamCache::StreamCache(const KeyCacheConfig& cfg, int n_layers, int n_kv_heads, int head_dim,
                         int ctx, const std::vector<double>& rope_freq,
                         const std::vector<std::shared_ptr<const SvdqBasis>>& calibrated,
                         const std::vector<uint8_t>& held)
    : n_kv_heads_(n_kv_heads), d_(head_dim), ctx_(ctx), slot_(size_t(n_layers), -1) {
  LR_ASSERT(held.empty() || held.size() == size_t(n_layers));
  for (int l = 0; l < n_layers; ++l)
    if (held.empty() || held[size_t(l)]) {
      slot_[size_t(l)] = int(layers_.size());
      layers_.push_back(l);
    }
  LR_ASSERT(!layers_.empty());
  const size_t streams = layers_.size() * size_t(n_kv_heads);
  LR_ASSERT(calibrated.empty() || calibrated.size() == streams);
  ks_.reserve(streams);
  for (size_t i = 0; i < streams; ++i)
    ks_.emplace_back(cfg, head_dim, ctx, calibrated.empty() ? nullptr : calibrated[i], rope_freq);
  vtype_ = cfg.values();
  vfmt_ = value_row_format(vtype_, head_dim);
  vrow_ = row_bytes(vfmt_.type, head_dim);
  v_.assign(streams * size_t(ctx) * vrow_);
}

void StreamCache::begin_call(int pos, int n) {
  stage_begin_ = pos;
  stage_n_ = n;
  sk_.assign(ks_.size() * size_t(n) * size_t(d_), 0.f);
  sv_.assign(sk_.size(), 0.f);
}

void StreamCache::end_call(ThreadPool& pool) {
  if (stage_n_ == 0) return;
  const int n = stage_n_;
  stage_n_ = 0;  // append() below encodes
  pool.parallel_for(int64_t(ks_.size()), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const size_t at = size_t(i) * size_t(n) * size_t(d_);
      append(layers_[size_t(i / n_kv_heads_)], int(i % n_kv_heads_), stage_begin_, &sk_[at],
             &sv_[at], n, d_);
    }
  });
  sk_.clear();
  sk_.shrink_to_fit();
  sv_.clear();
  sv_.shrink_to_fit();
}

void StreamCache::append(int l, int h, int pos, const float* k, const float* v, int n,
                         int64_t stride, bool keep_flushed) {
  if (staging()) {
    const int at = pos - stage_begin_;
    LR_ASSERT(at >= 0 && at + n <= stage_n_);
    for (int t = 0; t < n; ++t) {
      std::copy_n(k + t * stride, d_, staged_key(l, h) + size_t(at + t) * size_t(d_));
      std::copy_n(v + t * stride, d_, staged_value(l, h) + size_t(at + t) * size_t(d_));
    }
    return;
  }
  stream(l, h).append(k, n, stride, keep_flushed);
  uint8_t* dst = &v_[(index(l, h) * size_t(ctx_) + size_t(pos)) * vrow_];
  for (int t = 0; t < n; ++t) encode_row(vfmt_, v + t * stride, d_, dst + size_t(t) * vrow_);
}

void StreamCache::drop_flushed() {
  for (KeyStream& s : ks_) s.drop_flushed();
}

void StreamCache::truncate(int n) {
  for (KeyStream& s : ks_)
    if (s.size() > n) s.truncate(n);
}

void StreamCache::release() {
  for (KeyStream& s : ks_) s.release();
  v_.release_from(0);
}

uint64_t StreamCache::bytes() const {
  uint64_t b = 0;
  for (const KeyStream& s : ks_) b += s.allocated().total();
  return b + v_.size();
}

uint64_t StreamCache::resident_bytes() const {
  uint64_t b = 0;
  for (const KeyStream& s : ks_) b += s.resident_bytes();
  return b + v_.resident_bytes();
}

KeyCacheStats StreamCache::stats() const {
  KeyCacheStats st;
  st.type = ks_.front().type();
  st.tokens = ks_.front().size();
  st.head_dim = d_;
  st.streams = int(ks_.size());
  st.value_type = vtype_;
  st.value_bytes = v_.size();
  for (const KeyStream& s : ks_) {
    st.held += s.held();
    st.allocated += s.allocated();
    if (const SvdqBasis* b = s.basis()) {
      ++st.fitted;
      st.degraded += b->degraded ? 1 : 0;
      st.mean_rank += b->rank;
      st.mean_channels += s.channels();
      double bits = 0;
      for (const ChannelGroup& g : b->groups) bits += g.bits;
      st.nominal_bits += bits / double(b->groups.size()) * b->rank / d_;
    }
  }
  if (st.fitted > 0) {
    st.mean_rank /= st.fitted;
    st.mean_channels /= st.fitted;
    st.nominal_bits /= st.fitted;
  }
  return st;
}

}  // namespace lr::kv
