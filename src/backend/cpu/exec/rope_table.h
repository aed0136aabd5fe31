// RoPE as the CPU executor applies it: cos/sin tabulated once per session.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"

namespace lr::cpu {

// cos/sin of pos * inv_freq[i] (model/scalar_ops.h), for pos < ctx, i < head_dim/2.
struct RopeTable {
  int half = 0;
  std::vector<float> cos, sin;  // [ctx, head_dim/2]
  RopeTable(const Config& c, int ctx, int set = 0);  // set: scalar::rope_inv_freq's
  // Rotates the pairs (x[2i], x[2i+1]) of n_heads consecutive heads.
  void apply(float* x, int n_heads, int head_dim, int pos) const;
  // The same for rows [r0, r1) of consecutive heads (r0 and r1 even).
  void apply_rows(float* x, int64_t r0, int64_t r1, int head_dim, int pos) const;
};

}  // namespace lr::cpu
