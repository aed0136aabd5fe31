// Scoring queries against typed key streams (kv/key_stream.h) from their
// stored form, and decode attention over them with value rows of any type
// (kv/row_codec.h): the online-softmax kernel of attention_kernels.h with the
// scores taken from the stored form. SVDq and KIVI blocks are scored in
// latent space (integer codes times per-block folded weights, three query
// heads per pass). f16, q8_0 and q4_0 keys beside f16, q8_0 or q4_0 values
// are read as stored by the dense kernels' tiles (attention_kernels.h
// attend_tiles: f16 keys the bits of f32 rows holding the same values, q8_0
// and q4_0 keys scored in integers against the query rounded to q8_0 blocks,
// quant_scores.h); beside f32 values q8_0 and q4_0 keys are scored the same
// way, other f32 and f16 keys and the f16 window decoded a tile at a time and
// scored densely. Rotated keys are
// scored with a rotated query. Under latent keys f16, q8_0 and q4_0 values
// are summed from registers, f32 ones as stored. Scalar twins:
// KeyStream::reconstruct and kv::attend_keys_reference.
#pragma once

#include <cstdint>

#include "kv/key_stream.h"
#include "kv/row_codec.h"

namespace lr::cpu {

// Floats per query head of a prepared query, and the preparation: g query
// heads q [g, d] scaled by `scale` into the form key_scores reads.
// prep per head: [scale * q (d) | latent types: scale * q~ (channels), scale * q.mean]
int key_prep_floats(const kv::KeyStream& ks);
void prepare_queries(const kv::KeyStream& ks, const float* q, int g, float scale, float* prep);
// s[h * lds + (j - j0)] = scale * q_h . key_j for j in [j0, j1), from the
// stored form (latent channels and per-block constants for SVDq and KIVI).
void key_scores(const kv::KeyStream& ks, const float* prep, int g, int64_t j0, int64_t j1, float* s,
                int64_t lds);

// Same contract as attend_partial: g query heads q [g, d] sharing the
// stream's KV head, positions [j0, j1), the value rows V of those positions
// (rotated ones are summed rotated and acc rotated back). Writes the running
// max m[g], sum l[g] and unnormalized acc [g, d].
void attend_keys_partial(const kv::KeyStream& ks, const kv::Rows& V, const float* q, int g,
                         int64_t j0, int64_t j1, float scale, float* m, float* l, float* acc);
// attend_keys_partial for n query rows of a prompt at once: row t (g query
// heads at q + t * q_stride) over positions [0, n0 + t) (causal) or [0, n0),
// its m, l at m + t * ml_stride and acc at acc + t * ml_stride * head_dim.
// The bits each row gets alone; f16, q8_0 and q4_0 keys and values read the
// blocks every row sees once for a tile of rows (attention_kernels.h
// attend_tiles), other types row by row. Latent types read the stream as it
// is now (a prompt's history; not a batch row's view_at).
void attend_keys_rows(const kv::KeyStream& ks, const kv::Rows& V, const float* q, int64_t q_stride,
                      int n, int g, int64_t n0, bool causal, float scale, float* m, float* l,
                      float* acc, int64_t ml_stride);
// The same over a view of the stream (kv::KeyStream::view_at): positions
// below view.blocks scored from the blocks, the rest from f16 rows.
void attend_keys_partial(const kv::KeyView& view, const kv::Rows& V, const float* q, int g,
                         int64_t j0, int64_t j1, float scale, float* m, float* l, float* acc);

}  // namespace lr::cpu
