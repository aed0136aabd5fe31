// Block-format weights (Q4_0 .. Q5_1, Q2_K .. Q6_K) repacked for the decode products: 16
// rows interleaved per panel, so one 512-bit multiply-add (vpdpbusd) takes 4 values of each of 16
// rows against 4 input bytes broadcast to every lane, and a row's sums stay in one lane from the
// first block to the last. The file's own layout keeps each row's values together, so a decode
// kernel over it sums along the row and pays per block for the scales' shuffles and the lanes'
// reduction; over panels that work is per 16 rows (as llama.cpp's CPU repack of Q4_K does).
//
// Layout (panel p of rows 16p .. 16p + 15, super-block b; panels one after
// another, each one's super-blocks in order). Q4_K, kPanelBytesQ4K = 16 x 148:
//   [0, 2048)     values: group g (0..31) of 64 bytes holds bytes 4g .. 4g + 3
//                 of each row's 128 quant bytes, row i at 4i (low nibbles:
//                 chunk 2 (g / 8), high: chunk 2 (g / 8) + 1, values 4 (g % 8) ..)
//   [2048, 2176)  chunk scales: chunk c's 16 rows' 6-bit scales at 16c
//   [2176, 2304)  mins, as pairs: for chunks 2k and 2k + 1, row i's two at 32k + 2i
//   [2304, 2336)  d, f16 per row;  [2336, 2368) dmin, f16 per row
// 148 bytes per row and super-block against the file's 144 (the scales
// unpacked to bytes). Q5_K, kPanelBytesQ5K = 16 x 180 (the file's 176):
// Q4_K's layout from byte 512 on, except that [0, 1024) holds, for j = 0..7,
// qh bytes 4j .. 4j + 3 of each row (bit c: chunk c's fifth bit) and then
// nibble group j of chunks 0 and 1, in the kernel's reading order (the qh
// groups apart from the nibbles streamed at 19-20 GB/s from DRAM). Q6_K, kPanelBytesQ6K = 16 x 210
// (the file's size):
//   [0, 3072)     in the order the kernel reads them, for h = 0, 1 and
//                 j = 0..7, 192 bytes: qh bytes 32h + 4j .. + 3 of each row
//                 (row i at 4i), then ql bytes 64h + 4j .. and 64h + 32 + 4j ..
//                 (ql and qh as separate regions streamed at half the rate
//                 from DRAM: 14.7 against 30-41 GB/s on 2 threads, Zen 4)
//   [3072, 3328)  int8 scales as pairs: sub-blocks 2k, 2k + 1 of row i at 32k + 2i
//   [3328, 3360)  d, f16 per row
// Q2_K, kPanelBytesQ2K = 16 x 84 (the file's size):
//   [0, 1024)     for h = 0, 1 and j = 0..7, 64 bytes: qs bytes 32h + 4j .. + 3
//                 of each row (four chunks' 2-bit values in each byte)
//   [1024, 1280)  scale bytes (scale | min << 4) as pairs: sub-blocks 2k, 2k + 1
//                 of row i at 32k + 2i
//   [1280, 1312)  d, f16 per row;  [1312, 1344) dmin
// Q3_K, kPanelBytesQ3K = 16 x 114 (the file's 110, the scales unpacked):
//   [0, 1536)     for h and j, 96 bytes: the qs group as Q2_K's, then the
//                 high bits of its four chunks (hmask bits 4h .. 4h + 3 of
//                 bytes 4j .. 4j + 3) as nibbles, 32 bytes: byte b < 16 holds
//                 the group's byte b (low nibble) and b + 16 (high); byte
//                 16 + b holds 32 + b and 48 + b (so 8 rows' half is 16 bytes)
//   [1536, 1792)  int8 scales (k3_scales, minus 32) as pairs, as Q2_K's
//   [1792, 1824)  d, f16 per row
// Q4_0, Q4_1, Q5_0, Q5_1 (blocks of 32 values, the file's size), per block:
//   Q5 only: 64 bytes of high bits, one byte per lane byte (row i, p = 0..3
//            at 4i + p): bit 2g = value 4g + p's, bit 2g + 1 = 16 + 4g + p's
//   4 groups of 64 bytes: qs bytes 4g .. 4g + 3 of each row (low nibbles:
//   values 4g + p, high: 16 + 4g + p); then d, f16 per row; then m (Q4_1, Q5_1)
// The values are the file's, bit for bit.
//
// The product of a row with an input quantized per 256 (block_input.h) is
// integer up to each super-block's end. Q4_K: S = sum_c sc_c sum(u q), M =
// sum_c mn_c sum(q), then in f32 acc = fma(d dx, S, acc) and acc -= (dmin dx)
// M (one fused step), y = acc. Q6_K (u = q + 32, scales per 16): S = sum_g
// sc_g sum(u q), M = sum_g sc_g sum(q), acc = fma(d dx, S - 32 M, acc).
// Q2_K as Q4_K with scales and mins per 16; Q3_K as Q6_K with u = q + 4 and
// S - 4 M. The 32-value formats per block: acc = fma(d dx, S, acc), then acc
// -= d2 (dx sum(q)) with d2 = off d (Q4_0: 8, Q5_0: 16) or -m (Q4_1, Q5_1).
// Both instruction-set paths and the scalar twin (matvec_panel_twin) do
// exactly that, so all three give the same bits, and a batch of inputs gets
// each input's bits alone. These are also the f32 steps of the prompt kernels
// on AVX-512 VNNI (kernels_blocks_gemm.cpp) over the same integer sums, so
// there a token's products are the same bits in a prompt as in decode, and
// prompts of a few tokens can take the panels directly (matmul_panels).
#pragma once

#include <cstdint>
#include <memory>

#include "backend/cpu/kernels/kernels.h"
#include "core/dtype.h"

namespace lr::cpu {

constexpr int64_t kPanelRows = 16;
constexpr uint64_t kPanelBytesQ4_0 = 16 * 18;  // one block of 32 values of a panel
constexpr uint64_t kPanelBytesQ4_1 = 16 * 20;
constexpr uint64_t kPanelBytesQ5_0 = 16 * 22;
constexpr uint64_t kPanelBytesQ5_1 = 16 * 24;
constexpr uint64_t kPanelBytesQ2K = 16 * 84;  // one super-block of a panel
constexpr uint64_t kPanelBytesQ3K = 16 * 114;
constexpr uint64_t kPanelBytesQ4K = 16 * 148;
constexpr uint64_t kPanelBytesQ5K = 16 * 180;
constexpr uint64_t kPanelBytesQ6K = 16 * 210;
constexpr uint64_t panel_block_bytes(DType t) {
  return t == DType::Q4_0   ? kPanelBytesQ4_0
         : t == DType::Q4_1 ? kPanelBytesQ4_1
         : t == DType::Q5_0 ? kPanelBytesQ5_0
         : t == DType::Q5_1 ? kPanelBytesQ5_1
         : t == DType::Q2_K ? kPanelBytesQ2K
         : t == DType::Q3_K ? kPanelBytesQ3K
         : t == DType::Q6_K ? kPanelBytesQ6K
         : t == DType::Q5_K ? kPanelBytesQ5K
                            : kPanelBytesQ4K;
}

// A matrix's panels as the CPU backend prepared them (exec/cpu_weights.h):
// panel p, rows 16p .. 16p + 15, at data + p * stride; no data: none.
struct Panels {
  const uint8_t* data = nullptr;
  uint64_t stride = 0;
  explicit operator bool() const { return data != nullptr; }
  // Rows [r0, r0 + n): their panels where they are whole panels (r0 and n
  // multiples of 16), else none (the rows as stored are computed from).
  Panels rows(int64_t r0, int64_t n) const {
    if (!data || r0 % 16 != 0 || n % 16 != 0) return {};
    return {data + uint64_t(r0 / 16) * stride, stride};
  }
};

// Whether a matrix of type t and this shape has a panel form (Q4_0 .. Q5_1,
// Q2_K .. Q6_K; rows a multiple of 16, whole blocks).
bool panels_fit(DType t, int64_t rows, int64_t cols);
// The panel form of rows x cols rows of type t, rb bytes each (asserts panels_fit).
std::shared_ptr<const uint8_t[]> repack_panels(DType t, const uint8_t* W, uint64_t rb, int64_t rows,
                                               int64_t cols);
uint64_t panel_bytes(DType t, int64_t rows, int64_t cols);

// Y[k * ldy + r] = row r . X[k * ldx ..] for k < n and rows [r0, r1) (both
// multiples of 16), from the panel form of type t (the f32 steps above).
void matvec_panels_n(DType t, const uint8_t* P, const float* X, int64_t ldx, float* Y, int64_t ldy,
                     int64_t n, int64_t cols, int64_t r0, int64_t r1);

// Rows [r0, r1) (multiples of 16) of the panel form back in the file's
// layout, byte for byte: out holds (r1 - r0) rows of the format's row bytes.
void unpack_panels(DType t, const uint8_t* P, int64_t cols, int64_t r0, int64_t r1, uint8_t* out);

// The prompt products from the panel form (so the rows as stored need not
// stay in memory): a chunk of rows at a time back in the file's layout, then
// matmul_blocks, whose bits these are (the same arguments as it takes); on
// AVX-512 VNNI up to kPanelPromptTokens tokens from the panels directly,
// with the same bits; where AMX runs, from kAmxMinTokens tokens on its tiles
// (kernels_amx.h), the same bits again.
constexpr int64_t kPanelPromptTokens = 128;
void matmul_panels(DType t, const uint8_t* P, const float* X, float* Y, int64_t n, int64_t cols,
                   int64_t ldx, int64_t ldy, int64_t r0, int64_t r1, MatmulPath path);

// The scalar twin, over the file's own rows of type t: the same input
// quantization, integer sums and f32 operations, one value at a time.
void matvec_panel_twin(DType t, const uint8_t* W, uint64_t rb, const float* x, float* y,
                       int64_t cols, int64_t r0, int64_t r1);

}  // namespace lr::cpu
