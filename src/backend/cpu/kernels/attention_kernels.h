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

// Blocks of 32 values of a q8_0 or q4_0 row as the KV cache stores them
// (kv/row_codec.h; core/dtype's layout): the f16 scale d, then the codes; a
// value is q d (q8_0) or (q - 8) d (q4_0: values 0-15 in the low nibbles,
// 16-31 in the high ones). A row of head_dim values is head_dim / 32 blocks.
struct Q8Block {
  uint16_t d;
  int8_t qs[32];
};
struct Q4Block {
  uint16_t d;
  uint8_t qs[16];
};
static_assert(sizeof(Q8Block) == 34 && sizeof(Q4Block) == 18);

// The online-softmax steps of n query rows (row t's g heads at q + t *
// q_stride; its m, l at m + t * ml_stride, its acc at acc + t * ml_stride *
// d, carried on from what they hold) over keys and values [0, nk), nk a
// multiple of 32, stored as EK and EV (uint16_t: f16; Q8Block, Q4Block): key
// row b at K + b * k_stride, value row b at V + b * v_stride (in units of EK
// and EV), converted in registers. Each block is read once for a tile of
// causal_tile_rows(g) rows, and each row gets the bits attend_block gives it
// alone over f32 rows holding the same values (a code times its f16 scale
// is exact in f32), except that q8_0 and q4_0 keys are scored in integers
// against the row's query rounded to q8_0 blocks (quant_scores.h), as
// llama.cpp scores them; the values' side is the same. For head_dim a
// multiple of 8 (32 for the block types, at most 256) and g <=
// kCausalRowHeads (attend_tile_ok).
template <typename EK, typename EV>
void attend_tiles(const float* q, int64_t q_stride, int n, int g, int d, const EK* K,
                  int64_t k_stride, const EV* V, int64_t v_stride, int64_t nk, float scale,
                  float* m, float* l, float* acc, int64_t ml_stride);
bool attend_tile_ok(int g, int d);

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
