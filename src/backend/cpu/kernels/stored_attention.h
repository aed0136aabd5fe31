// Attention over key and value rows stored as f16, q8_0 or q4_0 (the KV
// row formats) through the dense cache's tiles, as key_kernels.cpp's
// attend_keys_partial and attend_keys_rows use it.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "kv/row_codec.h"

namespace lr::cpu {

// Whether keys and values of these row types are read by attend_stored: f16,
// q8_0 or q4_0 each (the quantized ones in whole blocks of 32 along head_dim).
bool stored_tiles(DType k, DType v, int d);
// The online-softmax steps of g query heads q [g, d] over positions [j0, j1)
// of key rows K and value rows V, carried on from what m, l and acc hold:
// whole blocks of 32 from j0 through attention_kernels.h attend_tiles,
// converted in registers, the rest decoded into f32 rows (exact) for
// attend_block. The bits attend_partial gives f32 rows holding the stored
// values. q is in the stored keys' space (rotated as they are).
void attend_stored(const kv::Rows& K, const kv::Rows& V, const float* q, int g, int d, int64_t j0,
                   int64_t j1, float scale, float* m, float* l, float* acc);
// Values summed rotated (kv/row_codec.h): the g heads' outputs rotated back
// (they are linear in them).
void rotate_back(const kv::Rows& V, int g, int d, float* acc);

}  // namespace lr::cpu
