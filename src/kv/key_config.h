// What the KV cache stores for keys (--cache-type-k) and values
// (--cache-type-v), and the SVDq settings.
//
//   f32    f32 (keys and values both f32: the dense K/V cache)  32 bits / element
//   f16    as f16                                          16
//   q8_0   blocks of 32 along head_dim: f16 scale, int8     8.5
//   q4_0   blocks of 32 along head_dim: f16 scale, 4-bit    4.5
//   q8_0-rot, q4_0-rot  the same after a Hadamard rotation of each row
//          (kv/row_codec.h; keys over the head, values over blocks of 64,
//          as llama.cpp rotates its quantized caches)       8.5, 4.5
//   kivi2  KIVI: per channel over blocks of 32 tokens, 2-bit codes, f16 scale and
//          min; the newest tokens (up to `kivi_window`) stay f16   3 (+ window)
//   svdq   keys projected on a per-(layer, KV head) basis, latent channels
//          quantized with a mixed-bit schedule (kv/svdq.h)  ~1-1.5 (+ window, basis)
// Keys take every type; values f32, f16, q8_0, q4_0 and the rotated forms.
// Without --cache-type-v the values are f32 beside f32 keys and f16 beside
// any other key type. docs/kv-cache.md has the details.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "kv/row_codec.h"

namespace lr::kv {

enum class KeyType { F32, F16, Q8_0, Q4_0, Kivi2, Svdq, Q8_0Rot, Q4_0Rot };
enum class ValueType { F32, F16, Q8_0, Q4_0, Q8_0Rot, Q4_0Rot };

// "f32" | "f16" | "q8_0" | "q4_0" | "q8_0-rot" | "q4_0-rot" | "kivi2" | "svdq";
// throws lr::Error naming them.
KeyType parse_key_type(const std::string& name);
const char* key_type_name(KeyType t);
// The value types: kivi2 and svdq are key types only (lr::Error naming the rest).
ValueType parse_value_type(const std::string& name);
const char* value_type_name(ValueType t);

// How a type that encodes each position alone stores a row (every key type
// but kivi2 and svdq; every value type).
RowFormat key_row_format(KeyType t, int head_dim);
RowFormat value_row_format(ValueType t, int head_dim);

// Rank by energy: the smallest r whose leading singular values reach `energy`
// of the total, measured on sigma (VeloxQuant's rule, the default) or sigma^2
// (variance, the usual PCA rule; keeps far fewer channels).
enum class EnergyMode { Sigma, Sigma2 };
enum class BasisSource {
  Sequence,    // fitted on the first keys of each sequence (its prefill)
  Calibrated,  // fitted offline (lowrank calibrate-kv), stored in the model file
};

// What the basis minimizes: the keys' reconstruction error (SVDq), or the
// error of the attention scores q.k, weighting key directions by the
// queries' second moment E[q q^T] seen while fitting (query-aware; see
// docs/kv-cache.md).
enum class Metric { Key, Query };

struct SvdqConfig {
  int rank = 0;         // > 0: this rank; 0: by energy
  double energy = 0.95;
  EnergyMode energy_mode = EnergyMode::Sigma;
  // Bit widths of the latent channel groups, most significant first; 0 drops
  // the group. The rank's channels are split into schedule.size() contiguous
  // groups (svdq.h: group_slices).
  std::vector<int> schedule = {8, 4, 2, 1, 1, 0, 0, 0};
  int group_size = 32;       // tokens per quantization block (one scale and min per channel)
  int min_fit_tokens = 64;   // a sequence basis is fitted once this many keys are cached
  BasisSource basis = BasisSource::Sequence;
  Metric metric = Metric::Key;
  // Fit as if the fitted keys (and queries) appeared at every position of the
  // context (kv/svdq.h rope_spread), not only where they were seen.
  bool spread = false;

  // Below this rank a schedule with 0-bit groups drops channels that still
  // carry signal (each group is only a few channels wide).
  int min_safe_rank() const { return 4 * int(schedule.size()); }
  // Throws lr::Error for an empty schedule, a width outside [0, 8], a
  // group_size <= 0, an energy outside (0, 1], a negative rank, or an explicit
  // rank below min_safe_rank() with 0-bit groups in the schedule.
  void validate() const;
};

struct KeyCacheConfig {
  KeyType type = KeyType::F32;
  // The values' type; none: f32 beside f32 keys, f16 beside the others.
  std::optional<ValueType> value_type;
  SvdqConfig svdq;
  int kivi_group = 32;    // KIVI token block
  int kivi_window = 128;  // KIVI: the f16 window is quantized when it holds this many tokens

  ValueType values() const {
    return value_type ? *value_type : type == KeyType::F32 ? ValueType::F32 : ValueType::F16;
  }
  // Keys and values both f32: the dense cache (no stream, no encoding).
  bool dense() const { return type == KeyType::F32 && values() == ValueType::F32; }
  // Keys and values both f16 (the CPU's default cache): held as the dense
  // cache holds f32 rows (kv/dense_cache.h), rounded as they are put.
  bool half() const { return type == KeyType::F16 && values() == ValueType::F16; }
  // Bytes per value of the dense rings that hold a sliding-window layer's
  // keys and values beside this cache (kv/dense_cache.h): 2 (f16, as the
  // default cache holds them) unless the keys or the values are f32.
  int ring_elem_bytes() const { return type == KeyType::F32 || values() == ValueType::F32 ? 4 : 2; }
  // Throws lr::Error naming the type and head_dim where blocks of 32 do not
  // divide head_dim, and for bad KIVI or SVDq settings.
  void validate(int head_dim) const;
};

// "8,4,2,1,1,0,0,0" -> widths; throws lr::Error on anything but integers.
std::vector<int> parse_schedule(const std::string& s);

}  // namespace lr::kv
