// Decode attention kernels (one query position against the cache). Scalar
// twins with the same signatures are in ref_kernels.h.
#pragma once

#include <cstdint>

namespace lr::cpu {

// Online-softmax attention of g query heads q [g, d] that share one KV head,
// over cached positions j in [j0, j1) (key j at K + j*stride, value j at
// V + j*stride, d floats each). Writes, per head h, the running maximum
// m[h] of the scores scale * q_h.k_j, the sum l[h] of exp(score - m[h]) and
// the unnormalized output acc[h*d .. h*d+d) = sum_j exp(score_j - m[h]) v_j.
// An empty range gives m = -inf, l = 0, acc = 0.
void attend_partial(const float* q, int g, int d, const float* K, const float* V, int64_t stride,
                    int64_t j0, int64_t j1, float scale, float* m, float* l, float* acc);

// The two halves of one block of attend_partial, for callers whose keys are
// not dense f32 rows (kv/attend_keys.h):
// s[h * lds + b] = scale * q_h . K[b * stride] for h < g, b < nb;
void scores_tile(const float* q, int g, int d, const float* K, int64_t stride, int nb, float scale,
                 float* s, int64_t lds);
// then, from the scores s of nb positions (overwritten with their weights) and
// their values V + b * stride, the online-softmax update of m, l and acc.
void softmax_update(int g, int d, float* s, int64_t lds, int nb, const float* V, int64_t stride,
                    float* m, float* l, float* acc);

// Combines n partial results of one head (m[p*ml_stride], l[p*ml_stride],
// acc + p*acc_stride)
// into the normalized output out[d]. Parts with l = 0 are skipped.
void attend_merge(int n, const float* m, const float* l, int64_t ml_stride, const float* acc,
                  int64_t acc_stride, int d, float* out);

}  // namespace lr::cpu
