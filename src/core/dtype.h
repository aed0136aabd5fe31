// Element types of stored tensors. Values are GGML's type ids so a GGUF file's
// type field maps directly; quantized types are stored in blocks.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace lr {

enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,   // blocks of 32: f16 scale d, 16 bytes of nibbles; x = d * (q - 8)
  Q4_1 = 3,   // blocks of 32: f16 scale d, f16 min m, 16 bytes of nibbles; x = d * q + m
  Q5_0 = 6,   // blocks of 32: f16 d, 32 high bits, 16 bytes of nibbles; x = d * (q - 16)
  Q5_1 = 7,   // blocks of 32: f16 d, f16 m, 32 high bits, 16 bytes of nibbles; x = d * q + m
  Q8_0 = 8,   // blocks of 32: f16 scale d, 32 int8; x = d * q
  // K-quants: super-blocks of 256 with sub-block scales (core/quants.cpp has the layouts).
  Q2_K = 10,  // 16 x 16 of 2 bits, 4-bit scale and min per 16
  Q3_K = 11,  // 16 x 16 of 3 bits, 6-bit scale per 16
  Q4_K = 12,  // 8 x 32 of 4 bits, 6-bit scale and min per 32
  Q5_K = 13,  // 8 x 32 of 5 bits, 6-bit scale and min per 32
  Q6_K = 14,  // 16 x 16 of 6 bits, int8 scale per 16
  BF16 = 30,
};

// GGUF block formats the runtime computes in as stored (one Matrix row is a
// row of blocks, model/weights.h): every quantized type but Q8_0, which the
// runtime keeps with separate scales.
bool is_block_format(DType t);

struct DTypeInfo {
  std::string_view name;
  int64_t block_elems;  // elements per block (1 for plain types)
  int64_t block_bytes;  // bytes per block
};

// Info for a known dtype; nullopt for ids lowrank does not read.
std::optional<DTypeInfo> dtype_info(uint32_t ggml_type);
DTypeInfo dtype_info(DType t);
std::string_view dtype_name(DType t);

// Bytes of a row of n elements. Returns nullopt when n is not a whole number of
// blocks or the product overflows.
std::optional<uint64_t> row_bytes(DType t, uint64_t n);

// Decode n elements of type t starting at src into f32. n must be a multiple of
// the block size (checked with LR_ASSERT: callers validate shapes first).
// Bit-exact with the `gguf` Python package's gguf.quants.dequantize (the same
// f32 operations in the same order; tests/format/test_quants.cpp).
void dequantize(DType t, const void* src, float* dst, int64_t n);

// The runtime's Q8_0 layout (model/weights.h): x[0..n) as int8 q with one
// scale per block of 32 (the last block may be shorter): scale = max |x| /
// 127 over the block (0 for an all-zero block), q = round-to-even(x / scale).
void quantize_q8_blocks(const float* x, int8_t* q, float* scales, int64_t n);

// Encode n f32 values as type t (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K,
// Q5_K, Q6_K; the other block formats are read only). Used by the GGUF
// writer (low-rank factors) and by tests that build quantized fixtures.
void quantize(DType t, const float* src, void* dst, int64_t n);

}  // namespace lr
