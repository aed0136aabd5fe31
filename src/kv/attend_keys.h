// The scalar twin of decode attention over a compressed key stream
// (backend/cpu/key_kernels.h attend_keys_partial): every key reconstructed
// (KeyStream::reconstruct), scores and softmax in double. q8_0 and q4_0 keys
// are scored as the kernels score them (backend/cpu/kernels/quant_scores.h):
// the query rounded to q8_0 blocks, against the rows as stored.
#pragma once

#include <cstdint>

#include "kv/key_stream.h"
#include "kv/row_codec.h"

namespace lr::kv {

// g query heads q [g, d] over positions [j0, j1) of the stream, the value
// rows V (each reconstructed: decoded and rotated back); out [g, d] normalized.
void attend_keys_reference(const KeyStream& ks, const Rows& V, const float* q, int g, int64_t j0,
                           int64_t j1, float scale, float* out);

}  // namespace lr::kv
