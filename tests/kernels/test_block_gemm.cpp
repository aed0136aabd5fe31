// The integer prompt kernel of the block formats (matmul_blocks_int8,
// kernels_blocks_gemm.cpp; AVX-512 VNNI only) against its scalar twin:
// ref::matvec_blocks quantizes each token the same way and sums the same
// integer products in double, so only the f32 accumulation order differs and
// the tolerance is 1e-5 of sum |w x|. Also: a token's results do not depend
// on the other tokens of the call, and extreme blocks do not overflow.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/kernels/kernels.h"
#include "backend/cpu/kernels/ref_kernels.h"
#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/half.h"
#include "isa_util.h"
#include "random_blocks.h"

namespace {

using lr::DType;
using lr::test::random_rows;
constexpr auto& kFormats = lr::test::kBlockFormats;
namespace cpu = lr::cpu;
namespace ref = lr::cpu::ref;

bool has_vnni() {
  return lr::cpu_supports(lr::Isa::Avx512Vnni);
}

std::vector<float> random_x(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = d(rng);
  for (int64_t c = 32; c < 64 && c < n; ++c) x[size_t(c)] = 0;  // an all-zero block (scale 0)
  return x;
}

// Checks Y (n tokens, rows [r0, rows), rows ldy apart) against the twin, and
// that nothing outside those rows was written (the fill value).
void expect_twin(DType t, const std::vector<uint8_t>& W, int64_t rows, int64_t cols,
                 const std::vector<float>& X, int64_t ldx, const std::vector<float>& Y, int64_t n,
                 int64_t ldy, int64_t r0, float fill) {
  const uint64_t rb = *lr::row_bytes(t, uint64_t(cols));
  std::vector<float> want(static_cast<size_t>(rows)), w(static_cast<size_t>(cols));
  for (int64_t k = 0; k < n; ++k) {
    const float* x = X.data() + k * ldx;
    ref::matvec_blocks(t, W.data(), rb, x, want.data(), cols, r0, rows);
    for (int64_t r = 0; r < ldy; ++r) {
      const float got = Y[size_t(k * ldy + r)];
      if (r < r0 || r >= rows) {
        ASSERT_EQ(got, fill) << lr::dtype_name(t) << " token " << k << " row " << r << " written";
        continue;
      }
      lr::dequantize(t, W.data() + uint64_t(r) * rb, w.data(), cols);
      double mag = 0;
      for (int64_t c = 0; c < cols; ++c) mag += std::fabs(double(w[size_t(c)]) * x[c]);
      ASSERT_NEAR(got, want[size_t(r)], 1e-5 * mag + 1e-30)
          << lr::dtype_name(t) << " cols " << cols << " token " << k << " row " << r;
    }
  }
}

TEST(BlockGemm, MatchesScalarTwin) {
  if (!has_vnni()) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  for (DType t : kFormats) {
    const int64_t be = lr::dtype_info(t).block_elems;
    // 37 rows from row 3: a full panel and a partial one; 19 tokens: two
    // full 8-token tiles and a tail of 3; rows and inputs padded.
    for (int64_t cols : {be, 3 * be, 1536 / be * be}) {
      const int64_t rows = 37, n = 19, ldx = cols + 7, ldy = rows + 5, r0 = 3;
      const auto W = random_rows(t, rows, cols, uint32_t(cols) + uint32_t(t));
      const auto X = random_x(n * ldx, uint32_t(cols) * 3);
      std::vector<float> Y(size_t(n * ldy), -9.f);
      cpu::matmul_blocks_int8(t, W.data(), *lr::row_bytes(t, uint64_t(cols)), X.data(), Y.data(), n,
                              cols, ldx, ldy, r0, rows);
      expect_twin(t, W, rows, cols, X, ldx, Y, n, ldy, r0, -9.f);
    }
  }
}

// Blocks of all-ones bits (the largest values and scales; for Q6_K's int8
// scales -1) and of 0x80 (Q6_K's scale -128), against inputs of one
// magnitude (every quantized value +-127): the integer sums' worst cases.
TEST(BlockGemm, ExtremeBlocksDoNotOverflow) {
  if (!has_vnni()) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  for (DType t : kFormats) {
    const lr::DTypeInfo info = lr::dtype_info(t);
    const int64_t cols = 2 * info.block_elems, rows = 17, n = 3;
    for (uint8_t fill : {uint8_t(0xff), uint8_t(0x80), uint8_t(0x7f)}) {
      std::vector<uint8_t> W(size_t(rows * cols / info.block_elems * info.block_bytes), fill);
      const uint16_t one = lr::f32_to_f16(1.f);
      for (size_t b = 0; b < W.size(); b += info.block_bytes)
        for (int off : lr::test::f16_fields(t)) std::memcpy(&W[b + size_t(off)], &one, 2);
      std::vector<float> X(size_t(n * cols));
      for (size_t i = 0; i < X.size(); ++i) X[i] = i % 3 == 0 ? -1.f : 1.f;
      for (int64_t c = 0; c < cols; ++c) X[size_t(cols + c)] = 1.f;  // token 1: all +127
      std::vector<float> Y(size_t(n * rows), -9.f);
      cpu::matmul_blocks_int8(t, W.data(), *lr::row_bytes(t, uint64_t(cols)), X.data(), Y.data(), n,
                              cols, cols, rows, 0, rows);
      SCOPED_TRACE(int(fill));
      expect_twin(t, W, rows, cols, X, cols, Y, n, rows, 0, -9.f);
    }
  }
}

// A token's outputs are the same bits alone, first or last among others, in
// any number of tokens (the server's batch invariance for prompt rows).
TEST(BlockGemm, TokenResultsDoNotDependOnTheOthers) {
  if (!has_vnni()) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  for (DType t : kFormats) {
    const int64_t be = lr::dtype_info(t).block_elems, cols = 4 * be, rows = 40, n = 21;
    const auto W = random_rows(t, rows, cols, 300 + uint32_t(t));
    const auto X = random_x(n * cols, 301);
    const uint64_t rb = *lr::row_bytes(t, uint64_t(cols));
    std::vector<float> all(size_t(n * rows));
    cpu::matmul_blocks_int8(t, W.data(), rb, X.data(), all.data(), n, cols, cols, rows, 0, rows);
    for (int64_t first : {int64_t(0), int64_t(5), int64_t(13)}) {
      for (int64_t count : {int64_t(1), int64_t(3), int64_t(8)}) {
        std::vector<float> part(size_t(count * rows));
        cpu::matmul_blocks_int8(t, W.data(), rb, X.data() + first * cols, part.data(), count, cols,
                                cols, rows, 0, rows);
        ASSERT_EQ(std::memcmp(part.data(), all.data() + first * rows, part.size() * 4), 0)
            << lr::dtype_name(t) << " tokens " << first << ".." << first + count;
      }
    }
  }
}

// matmul_blocks takes the integer kernel on the AVX-512 VNNI path and the
// f32 one elsewhere.
TEST(BlockGemm, MatmulBlocksPicksThePathsKernel) {
  for (lr::Isa isa : lr::test::supported_isas()) {
    lr::test::IsaScope scope(isa);
    const DType t = DType::Q4_K;
    const int64_t cols = 512, rows = 32, n = 13;
    const auto W = random_rows(t, rows, cols, 9);
    const auto X = random_x(n * cols, 10);
    const uint64_t rb = *lr::row_bytes(t, uint64_t(cols));
    std::vector<float> got(size_t(n * rows)), want(size_t(n * rows));
    cpu::matmul_blocks(t, W.data(), rb, X.data(), got.data(), n, cols, cols, rows, 0, rows);
    if (isa == lr::Isa::Avx512Vnni)
      cpu::matmul_blocks_int8(t, W.data(), rb, X.data(), want.data(), n, cols, cols, rows, 0, rows);
    else
      cpu::matmul_blocks_f32(t, W.data(), rb, X.data(), want.data(), n, cols, cols, rows, 0, rows);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0) << lr::isa_name(isa);
  }
}

}  // namespace
