// Quantizers lowrank writes itself for the GGUF block formats (Q8_0, Q4_0,
// Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K).
//
// Each (sub-)block's scale, and min where the format has one, is chosen by
// search: candidate steps around the one that maps the block's range onto
// the format's integers are each rounded to nearest, refitted by weighted
// least squares, and the candidate with the least weighted squared error is
// kept. The K-quants' sub-block scales are then stored against the
// super-block's f16 scale(s) and the values rounded again against the scales
// as stored. With `importance` (a weight per column, e.g. the diagonal of
// the calibration Gram: the mean square of each input feature) the error is
// weighted by it: activation-weighted quantization, like an importance matrix.
#pragma once

#include <cstdint>
#include <functional>

#include "core/dtype.h"

namespace lr::compress {

// True for the formats quantize_row writes.
bool can_quantize(DType t);

// Encodes one row of n values (a whole number of t's blocks; asserted) into
// row_bytes(t, n) bytes at dst, in GGUF's layout (Q8_0 included).
// importance [n] (nullptr = uniform) must be finite and >= 0.
void quantize_row(DType t, const float* x, const float* importance, uint8_t* dst, int64_t n);

// quantize_row over rows [0, rows) of a matrix with `cols` values per row,
// row r into dst + r * row_bytes(t, cols), on `threads` threads (each row is
// independent: the bytes do not depend on the count). row_of(r, buf) writes
// row r's values into buf [cols].
void quantize_rows(DType t, int64_t rows, int64_t cols,
                   const std::function<void(int64_t, float*)>& row_of, const float* importance,
                   uint8_t* dst, int threads);

}  // namespace lr::compress
