// What a key cache holds, in bytes and bits: a stream's bytes by kind and a
// session's totals, as backends, perplexity, bench and the server report them.
#pragma once

#include <cstdint>

#include "kv/key_config.h"

namespace lr::kv {

// Bytes a key stream holds, by kind.
struct KeyBytes {
  uint64_t codes = 0;   // quantized codes (f16 keys: the keys)
  uint64_t scales = 0;  // per-block scales and minimums
  uint64_t window = 0;  // the f16 window (its allocation)
  uint64_t basis = 0;   // SVDq basis (f16 [channels, d]) and mean (f32 [d])
  uint64_t total() const { return codes + scales + window + basis; }
  KeyBytes& operator+=(const KeyBytes& o) {
    codes += o.codes, scales += o.scales, window += o.window, basis += o.basis;
    return *this;
  }
};

// What a session's key cache holds.
struct KeyCacheStats {
  KeyType type = KeyType::F32;
  int64_t tokens = 0;  // cached positions
  int head_dim = 0;
  int streams = 0;           // layers x KV heads
  KeyBytes held;             // bytes held for the cached positions
  KeyBytes allocated;        // bytes reserved for the whole context
  ValueType value_type = ValueType::F32;
  uint64_t value_bytes = 0;  // the values, whole context
  double mean_rank = 0;      // SVDq: mean rank and stored channels over fitted streams
  double mean_channels = 0;
  double nominal_bits = 0;  // SVDq: mean over streams of mean(schedule) x rank / head_dim
  int fitted = 0, degraded = 0;
  // Bits per key element of what is held: all key bytes x 8 / (tokens x head_dim x streams).
  double true_bits() const {
    return tokens > 0 ? double(held.total()) * 8.0 / (double(tokens) * head_dim * streams) : 0;
  }
};

}  // namespace lr::kv
