// One cached position's key or value row in a per-token cache type: f32,
// f16, and GGUF's q8_0 and q4_0 blocks of 32 along head_dim (core/dtype.h's
// codecs, bit-exact with the gguf package's), each
// optionally after an orthonormal Walsh-Hadamard rotation of the row (in
// blocks of `rot` values). The rotation spreads a few large channels over
// the block, so a block's scale no longer follows its one outlier. It
// changes no dot product (H is orthonormal and its own inverse), so a query
// rotated the same way scores rotated keys as the plain ones, and an
// attention output summed from rotated values is rotated back once.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace lr::kv {

struct RowFormat {
  DType type = DType::F16;  // F32, F16, Q8_0 or Q4_0
  int rot = 0;              // Hadamard block along the row (a power of two); 0: not rotated
};

// Bytes of one row of d values (d a multiple of 32 for q8_0 and q4_0).
uint64_t row_bytes(DType t, int d);

// A stream's rows as the kernels read them: row j at data + j * bytes.
struct Rows {
  const uint8_t* data = nullptr;
  RowFormat fmt;
  uint64_t bytes = 0;  // per row
  const uint8_t* row(int64_t j) const { return data + uint64_t(j) * bytes; }
};

// x [d] -> dst [row_bytes]: rotated by f.rot first (x itself is unchanged).
void encode_row(const RowFormat& f, const float* x, int d, uint8_t* dst);
// The stored row, still rotated (what the kernels score and sum).
void decode_row(DType t, const uint8_t* src, int d, float* out);
// The row as it was encoded, rotated back (the scalar twins' reference).
void reconstruct_row(const RowFormat& f, const uint8_t* src, int d, float* out);

// x [d] rotated in place by the orthonormal Walsh-Hadamard transform of
// size n (a power of two dividing d) on each block of n values. Applying it
// twice gives x back (to rounding).
void hadamard(float* x, int d, int n);

// The rotation blocks lowrank uses: keys over the largest power of two
// dividing head_dim (the whole head where it is one), values over 64, as
// llama.cpp rotates its quantized caches; where head_dim is a multiple of 32
// but not of 64 (llama.cpp does not rotate those), blocks of 32. 0 where
// head_dim is not a multiple of 32.
int key_rotation(int head_dim);
int value_rotation(int head_dim);

}  // namespace lr::kv
