// Decode attention over a compressed key stream (key_stream.h) and f16
// values: the online-softmax kernel of backend/cpu/attention_kernels.h with
// the scores taken from the stored form. SVDq and KIVI blocks are scored in
// latent space (integer codes times per-block folded weights); f16, q8_0 and
// q4_0 keys and the f16 window are decoded a tile at a time and scored densely.
#pragma once

#include <cstdint>

#include "kv/key_stream.h"

namespace lr::kv {

// Same contract as cpu::attend_partial: g query heads q [g, d] sharing the
// stream's KV head, positions [j0, j1), values V [capacity, d] f16. Writes
// the running max m[g], sum l[g] and unnormalized acc [g, d].
void attend_keys_partial(const KeyStream& ks, const uint16_t* V, const float* q, int g, int64_t j0,
                         int64_t j1, float scale, float* m, float* l, float* acc);

// Reference: every key reconstructed (KeyStream::reconstruct), scores and
// softmax in double, out [g, d] normalized.
void attend_keys_reference(const KeyStream& ks, const uint16_t* V, const float* q, int g,
                           int64_t j0, int64_t j1, float scale, float* out);

}  // namespace lr::kv
