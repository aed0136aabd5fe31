// A KV cache in the types of --cache-type-k and --cache-type-v
// (key_config.h): one KeyStream per (layer, KV head) and the values as rows
// of their type (kv/row_codec.h). A forward call of n tokens stages
// its own keys and values exactly (the call's attention reads them as they
// are) and commits them into the streams when it ends; a call that does not
// stage (a decode step) encodes its key at once, so attention scores it from
// the stored form.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "core/zero_pages.h"
#include "kv/key_stream.h"

namespace lr::kv {

class StreamCache {
 public:
  // calibrated: per (held layer, KV head), layer-major, the basis of a
  // calibrated SVDq cache (empty otherwise). rope_freq: the model's RoPE
  // (KeyStream). held: [n_layers] 1 for each layer this cache holds (empty:
  // all; another cache holds the rest, e.g. sliding-window rings).
  StreamCache(const KeyCacheConfig& cfg, int n_layers, int n_kv_heads, int head_dim, int ctx,
              const std::vector<double>& rope_freq,
              const std::vector<std::shared_ptr<const SvdqBasis>>& calibrated,
              const std::vector<uint8_t>& held = {});

  KeyStream& stream(int l, int h) { return ks_[index(l, h)]; }
  const KeyStream& stream(int l, int h) const { return ks_[index(l, h)]; }
  // The values of KV head h of layer l, a row per position.
  Rows values(int l, int h) const {
    return {&v_[index(l, h) * size_t(ctx_) * vrow_], vfmt_, vrow_};
  }

  void begin_call(int pos, int n);
  void end_call(ThreadPool& pool);
  bool staging() const { return stage_n_ > 0; }
  int stage_begin() const { return stage_begin_; }
  // The staged positions [stage_begin, stage_begin + n) of KV head h, [n, head_dim].
  float* staged_key(int l, int h) { return &sk_[index(l, h) * size_t(stage_n_) * size_t(d_)]; }
  float* staged_value(int l, int h) { return &sv_[index(l, h) * size_t(stage_n_) * size_t(d_)]; }
  const float* staged_key(int l, int h) const {
    return &sk_[index(l, h) * size_t(stage_n_) * size_t(d_)];
  }
  const float* staged_value(int l, int h) const {
    return &sv_[index(l, h) * size_t(stage_n_) * size_t(d_)];
  }
  // Keys and values of KV head h at positions [pos, pos + n), rows `stride`
  // floats apart: staged during a staging call, else encoded now (keeping
  // the rows it encodes readable: KeyStream::append keep_flushed).
  void append(int l, int h, int pos, const float* k, const float* v, int n, int64_t stride,
              bool keep_flushed = false);
  // Lets go of the rows the last appends kept.
  void drop_flushed();
  // Forgets positions >= n.
  void truncate(int n);
  // After truncate(0): the key blocks' and values' pages given back.
  void release();

  KeyCacheStats stats() const;
  // Keys allocated for the whole context and the values.
  uint64_t bytes() const;
  uint64_t resident_bytes() const;  // of them, in RAM (core/zero_pages.h)

 private:
  size_t index(int l, int h) const {
    LR_ASSERT(slot_[size_t(l)] >= 0);
    return size_t(slot_[size_t(l)]) * size_t(n_kv_heads_) + size_t(h);
  }
  int n_kv_heads_, d_, ctx_;
  std::vector<int> slot_;      // [n_layers] a held layer's place among the held, else -1
  std::vector<int> layers_;    // the held layers
  std::vector<KeyStream> ks_;  // [held layers * n_kv_heads]
  ValueType vtype_;            // the values' type
  RowFormat vfmt_;
  uint64_t vrow_ = 0;       // bytes of a value row
  ZeroPages<uint8_t> v_;    // [held layers, n_kv_heads, ctx] value rows (RAM as written)
  int stage_begin_ = 0, stage_n_ = 0;
  std::vector<float> sk_, sv_;  // [held layers, n_kv_heads, stage_n, head_dim]
};

}  // namespace lr::kv
