// The input of the block-format kernels: each token quantized per block
// (kernels.h quantize_acts) as the decode products (kernels_blocks.cpp) and
// the integer prompt products (kernels_blocks_gemm.cpp) read it.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace lr::cpu::detail {

struct Acts {
  const int8_t* q;
  const float* d;      // per block of the format's kElems
  const int16_t* s16;  // sum of q per 16
  const int16_t* s32;  // sum of q per 32
  const float* dsum;   // d * sum of q per 32
};

// Per-thread quantized copies of n inputs (rows ldx apart) in blocks of
// `block` (32 or 256), in scratch slots 3 (values), 4 (scales and sums per
// 32) and 5 (sums per 16); valid until the thread's next call.
const std::vector<Acts>& quantize_block_inputs(const float* x, int64_t cols, int64_t n, int64_t ldx,
                                               int block);

// matmul_blocks_int8 over n inputs quantized already (quantize_block_inputs
// with the format's block), so a caller's several calls quantize them once.
void matmul_blocks_int8_acts(DType t, const uint8_t* W, uint64_t rb, const Acts* in, float* Y,
                             int64_t n, int64_t cols, int64_t ldy, int64_t r0, int64_t r1);

}  // namespace lr::cpu::detail
