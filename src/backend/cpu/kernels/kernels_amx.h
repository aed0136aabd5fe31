// The prompt products of block-format panels (panels.h) on AMX-INT8 tiles
// (kernels_amx.cpp): the VNNI path's integer sums per super-block (or block
// of 32), then its f32 steps in its order, so the same bits as
// matvec_panels_n and matmul_blocks_int8 for every token, whatever the
// number of tokens in the call.
#pragma once

#include <cstdint>

#include "backend/cpu/kernels/block_input.h"
#include "core/dtype.h"

namespace lr::cpu::detail {

// Prompts of at least this many tokens take the AMX kernels (one tile of 16
// tokens; fewer leave most of a tile's rows empty).
constexpr int64_t kAmxMinTokens = 16;

// Whether the AMX kernels run in this process: amx_status() says a tile
// instruction runs (the tile permission is requested there, once per
// process), CPUID lists AMX-INT8, the kernel path is Isa::Avx512Vnni (the
// bits are that path's), and LOWRANK_AMX (read once; any value but "" and
// "0") or set_amx_prompts(true) turned them on.
bool amx_prompts_ready();
// Turns the AMX kernels on (where the CPU has them) or off for the whole
// process, overriding LOWRANK_AMX (tests and benchmarks compare the paths).
void set_amx_prompts(bool on);
// Whether format t has an AMX kernel (Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K).
bool amx_has_format(DType t);

// Y[k * ldy + r] = row r . token k for k < n and rows [r0, r1) (multiples
// of 16) of the panel form P of type t, cols columns, from the tokens
// quantized by quantize_block_inputs (their values cols bytes apart). False,
// nothing written, when it cannot (no AMX here, another format, inputs laid
// out otherwise): the caller then takes the VNNI kernels.
bool matmul_panels_amx(DType t, const uint8_t* P, const Acts* x, int64_t n, float* Y, int64_t ldy,
                       int64_t cols, int64_t r0, int64_t r1);
// The same kernel on a software model of the tile unit (TDPBSSD as the
// instruction set reference defines it), for tests on hosts without AMX:
// every step but the tile instructions themselves. Needs AVX-512 VNNI (false
// without it); slow.
bool matmul_panels_amx_emulated(DType t, const uint8_t* P, const Acts* x, int64_t n, float* Y,
                                int64_t ldy, int64_t cols, int64_t r0, int64_t r1);

}  // namespace lr::cpu::detail
