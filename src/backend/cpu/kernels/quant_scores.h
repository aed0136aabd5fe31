// Attention scores over q8_0 and q4_0 keys computed in integers, as llama.cpp
// computes a quantized key cache's: each query row-head is quantized once to
// q8_0 blocks of 32 (QuantQueries), the products of its codes with a key's
// codes are summed exactly in int32 per block of 32, and the score of a key is
//
//   scale * (sum over the key's blocks, in order, of float(isum) * (dq * dk))
//
// (an fma per block from 0, then one multiply), where isum = sum q k for
// q8_0 keys and sum q (c - 8) for q4_0 codes c, dq and dk the query's and the
// key's block scales. Integer sums are the same in any order, so the AVX-512
// VNNI path (vpdpbusd on 16 keys at a time), the AVX2 path (maddubs and madd
// on 8) and the scalar twin in ref:: give the same bits. (Rounding the query
// to 8 bits cost Qwen2.5-Coder-0.5B's decode perplexity with q8_0 keys 0.0%
// beside q8_0 values and 0.4% beside f16 values, against 16-bit codes; the
// 16-bit form, vpdpwssd on the codes' halves, was slower than the f32
// kernel: docs/results/kv-cache.md.)
#pragma once

#include <cstdint>
#include <vector>

#include "backend/cpu/kernels/attention_kernels.h"

namespace lr::cpu {

// One query row-head quantized: codes [d], and per block of 32 its scale and
// the sum of its codes.
struct QuantQuery {
  const int8_t* q;
  const float* d;
  const int32_t* sum;
};

// Query row-heads quantized as core/dtype.h's quantize_q8_blocks rounds
// (scale max |x| / 127 per block of 32, codes x * (127 / max |x|) rounded to
// even), with their storage.
class QuantQueries {
 public:
  // Room for n row-heads of d values (d a multiple of 32, at most 256).
  void reset(int n, int d);
  // Row-head r from x [d].
  void quantize(int r, const float* x);
  const QuantQuery* rows() const { return rows_.data(); }

 private:
  int d_ = 0;
  std::vector<int8_t> q_;
  std::vector<int32_t> sum_;
  std::vector<float> dq_;
  std::vector<QuantQuery> rows_;
};

// s[r * lds + b] = the score above of row-head rows[r] against key row b (its
// d / 32 blocks at K + b * stride), for r < R and b < nb.
void quant_scores(const QuantQuery* rows, int R, int d, const Q8Block* K, int64_t stride, int nb,
                  float scale, float* s, int64_t lds);
void quant_scores(const QuantQuery* rows, int R, int d, const Q4Block* K, int64_t stride, int nb,
                  float scale, float* s, int64_t lds);

namespace ref {
// The scalar twins: one key and one row-head at a time.
void quant_scores(const QuantQuery* rows, int R, int d, const Q8Block* K, int64_t stride, int nb,
                  float scale, float* s, int64_t lds);
void quant_scores(const QuantQuery* rows, int R, int d, const Q4Block* K, int64_t stride, int nb,
                  float scale, float* s, int64_t lds);
}  // namespace ref

}  // namespace lr::cpu
