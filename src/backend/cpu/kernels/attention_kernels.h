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
// The same over f16 keys and values: the bits of f32 rows holding the same
// values.
void attend_partial(const float* q, int g, int d, const uint16_t* K, const uint16_t* V,
                    int64_t stride, int64_t j0, int64_t j1, float scale, float* m, float* l,
                    float* acc);

// One block of attend_partial: the online-softmax step of g heads over nb
// <= 32 keys and values (rows `stride` elements apart), updating m, l and
// acc; f16 rows give the bits of f32 rows holding the same values.
void attend_block(const float* q, int g, int d, const float* K, const float* V, int64_t stride,
                  int nb, float scale, float* m, float* l, float* acc);
void attend_block(const float* q, int g, int d, const uint16_t* K, const uint16_t* V,
                  int64_t stride, int nb, float scale, float* m, float* l, float* acc);

// The two halves of one block of attend_partial, for callers whose keys are
// not dense f32 rows (kv/attend_keys.h):
// s[h * lds + b] = scale * q_h . K[b * stride] for h < g, b < nb;
void scores_tile(const float* q, int g, int d, const float* K, int64_t stride, int nb, float scale,
                 float* s, int64_t lds);
// then, from the scores s of nb positions (overwritten with their weights) and
// their values V + b * stride, the online-softmax update of m, l and acc.
void softmax_update(int g, int d, float* s, int64_t lds, int nb, const float* V, int64_t stride,
                    float* m, float* l, float* acc);

// Causal attention of n consecutive query rows over one KV head, as a
// prompt's rows see the cache: row t (g query heads [g, d] at q + t *
// q_stride) over keys [0, n0 + t). Writes, per row t and head h, at
// m[t * ml_stride + h], l[...] and acc + (t * ml_stride + h) * d, what
// attend_partial(q_t, g, d, K, V, stride, 0, n0 + t, ...) writes, bit for
// bit: the keys and values of a block every row of a tile sees whole are
// loaded once for the tile's causal_tile_rows(g) rows (flash attention's
// tiles; a block stays in L1 while the tile uses it); the diagonal runs row
// by row.
void attend_causal(const float* q, int64_t q_stride, int n, int64_t n0, int g, int d,
                   const float* K, const float* V, int64_t stride, float scale, float* m, float* l,
                   float* acc, int64_t ml_stride);
// The same over f16 keys and values: the bits of f32 rows holding the same
// values.
void attend_causal(const float* q, int64_t q_stride, int n, int64_t n0, int g, int d,
                   const uint16_t* K, const uint16_t* V, int64_t stride, float scale, float* m,
                   float* l, float* acc, int64_t ml_stride);
// Rows of one tile of attend_causal: query heads (rows x g) up to kCausalRowHeads.
constexpr int kCausalRowHeads = 96;
int causal_tile_rows(int g);

// Combines n partial results of one head (m[p*ml_stride], l[p*ml_stride],
// acc + p*acc_stride)
// into the normalized output out[d]. Parts with l = 0 are skipped.
void attend_merge(int n, const float* m, const float* l, int64_t ml_stride, const float* acc,
                  int64_t acc_stride, int d, float* out);

}  // namespace lr::cpu
