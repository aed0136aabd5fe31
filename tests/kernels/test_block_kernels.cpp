// The block-format kernels (backend/cpu/kernels_blocks.cpp) against their
// scalar twin (ref::matvec_blocks: the weights through the bit-exact scalar
// dequantizer, the input quantized and decoded again, summed in double), for
// every format, over random blocks whose scales and bits cover the formats'
// ranges, and real rows of the default model's Q4_1 tensors when present.
//
// Both sides compute the same exact sum of products of the same quantized
// values; only the f32 accumulation order differs, so the tolerance is
// 1e-5 of sum |w x|. The input quantization's own error is a separate,
// looser check against the f32 product.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/kernels/kernels.h"
#include "backend/cpu/kernels/ref_kernels.h"
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


std::vector<float> random_x(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = d(rng);
  x[3] = 0;  // and one all-zero block (its scale is 0)
  for (int64_t c = 32; c < 64 && c < n; ++c) x[size_t(c)] = 0;
  return x;
}

// sum_c |w_rc x_c| per row, from the dequantized weights.
std::vector<double> abs_sums(DType t, const std::vector<uint8_t>& W, int64_t rows, int64_t cols,
                             const std::vector<float>& x) {
  const uint64_t rb = *lr::row_bytes(t, uint64_t(cols));
  std::vector<float> w(static_cast<size_t>(cols));
  std::vector<double> out(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    lr::dequantize(t, W.data() + r * rb, w.data(), cols);
    for (int64_t c = 0; c < cols; ++c) out[size_t(r)] += std::fabs(double(w[size_t(c)]) * x[size_t(c)]);
  }
  return out;
}

TEST(BlockKernels, MatvecMatchesScalarTwin) {
  for (lr::Isa isa : lr::test::supported_isas()) {
  SCOPED_TRACE(lr::isa_name(isa));
  lr::test::IsaScope scope(isa);
  for (DType t : kFormats) {
    const int64_t be = lr::dtype_info(t).block_elems;
    for (int64_t cols : {be, 2 * be, 3 * be, 1536 / be * be, 4864 / be * be}) {
      if (cols % be) continue;
      const int64_t rows = 37;
      const auto W = random_rows(t, rows, cols, uint32_t(cols) * 7 + uint32_t(t));
      const auto x = random_x(cols, uint32_t(cols));
      const uint64_t rb = *lr::row_bytes(t, uint64_t(cols));
      std::vector<float> got(size_t(rows), -1.f), want(size_t(rows), -2.f);
      cpu::matvec_blocks(t, W.data(), rb, x.data(), got.data(), cols, 0, rows);
      ref::matvec_blocks(t, W.data(), rb, x.data(), want.data(), cols, 0, rows);
      const auto sums = abs_sums(t, W, rows, cols, x);
      for (int64_t r = 0; r < rows; ++r)
        ASSERT_NEAR(got[size_t(r)], want[size_t(r)], 1e-5 * sums[size_t(r)] + 1e-30)
            << lr::dtype_name(t) << " cols " << cols << " row " << r;
    }
  }
  }
}

// The AVX-512 VNNI path computes the AVX2 path's integer sums and f32
// arithmetic: the same bits, on every format, over row counts that use the
// multi-row bodies and the single-row tail.
TEST(BlockKernels, EveryKernelPathGivesTheSameBits) {
  if (!lr::cpu_supports(lr::Isa::Avx512Vnni)) GTEST_SKIP() << "this CPU has no AVX-512 VNNI path to compare";
  for (DType t : kFormats) {
    const int64_t be = lr::dtype_info(t).block_elems, cols = 4864 / be * be, rows = 39;
    const auto W = random_rows(t, rows, cols, 77 + uint32_t(t));
    const auto x = random_x(cols, 78);
    const uint64_t rb = *lr::row_bytes(t, uint64_t(cols));
    std::vector<float> y2(size_t(rows), -1.f), y512(size_t(rows), -2.f);
    {
      lr::test::IsaScope scope(lr::Isa::Avx2);
      cpu::matvec_blocks(t, W.data(), rb, x.data(), y2.data(), cols, 1, rows);
    }
    {
      lr::test::IsaScope scope(lr::Isa::Avx512Vnni);
      cpu::matvec_blocks(t, W.data(), rb, x.data(), y512.data(), cols, 1, rows);
    }
    EXPECT_EQ(y2[0], -1.f);
    EXPECT_EQ(y512[0], -2.f);
    for (int64_t r = 1; r < rows; ++r)
      ASSERT_EQ(std::memcmp(&y2[size_t(r)], &y512[size_t(r)], 4), 0)
          << lr::dtype_name(t) << " row " << r << ": " << y2[size_t(r)] << " vs " << y512[size_t(r)];
  }
}

TEST(BlockKernels, MatvecRowRangeWritesOnlyItsRows) {
  for (DType t : kFormats) {
    const int64_t cols = 256, rows = 9;
    const auto W = random_rows(t, rows, cols, 5);
    const auto x = random_x(cols, 6);
    std::vector<float> y(size_t(rows), -7.f);
    cpu::matvec_blocks(t, W.data(), *lr::row_bytes(t, cols), x.data(), y.data(), cols, 2, 5);
    for (int64_t r = 0; r < rows; ++r) {
      if (r >= 2 && r < 5)
        EXPECT_NE(y[size_t(r)], -7.f) << lr::dtype_name(t);
      else
        EXPECT_EQ(y[size_t(r)], -7.f) << lr::dtype_name(t);
    }
  }
}

// The vector dequantizer gives the scalar one's bits (itself bit-exact with
// the gguf package) on every format and path.
TEST(BlockKernels, DequantizeIsTheScalarDequantizerBitForBit) {
  for (lr::Isa isa : lr::test::supported_isas()) {
    lr::test::IsaScope scope(isa);
    for (DType t : kFormats) {
      const int64_t cols = 4 * lr::dtype_info(t).block_elems;
      const auto W = random_rows(t, 3, cols, 90 + uint32_t(t));
      std::vector<float> got(size_t(3 * cols), -1.f), want(size_t(3 * cols), -2.f);
      const uint64_t rb = *lr::row_bytes(t, uint64_t(cols));
      for (int r = 0; r < 3; ++r) {
        cpu::dequantize_blocks(t, W.data() + r * rb, got.data() + r * cols, cols);
        lr::dequantize(t, W.data() + r * rb, want.data() + r * cols, cols);
      }
      ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0) << lr::isa_name(isa) << " " << lr::dtype_name(t);
    }
  }
}

// The f32 prompt kernel: the exact stored weights times the f32 input (not
// quantized), against the same product in double, on every path (the
// integer one, matmul_blocks_int8, is test_block_gemm.cpp's).
TEST(BlockKernels, MatmulF32MatchesDequantizedProduct) {
  for (lr::Isa isa : lr::test::supported_isas()) {
  lr::test::IsaScope scope(isa);
  for (DType t : kFormats) {
    const int64_t cols = 512, rows = 21, n = 19, ldx = cols + 5, ldy = rows + 3;
    const auto W = random_rows(t, rows, cols, 11);
    const auto X = random_x(n * ldx, 12);
    const uint64_t rb = *lr::row_bytes(t, cols);
    std::vector<float> Y(size_t(n * ldy), -3.f), w(static_cast<size_t>(cols));
    cpu::matmul_blocks_f32(t, W.data(), rb, X.data(), Y.data(), n, cols, ldx, ldy, 1, rows);
    for (int64_t r = 0; r < rows; ++r) {
      lr::dequantize(t, W.data() + r * rb, w.data(), cols);
      for (int64_t tok = 0; tok < n; ++tok) {
        if (r == 0) {
          EXPECT_EQ(Y[size_t(tok * ldy)], -3.f);
          continue;
        }
        double want = 0, mag = 0;
        for (int64_t c = 0; c < cols; ++c) {
          want += double(w[size_t(c)]) * X[size_t(tok * ldx + c)];
          mag += std::fabs(double(w[size_t(c)]) * X[size_t(tok * ldx + c)]);
        }
        ASSERT_NEAR(Y[size_t(tok * ldy + r)], want, 1e-5 * mag + 1e-30)
            << lr::isa_name(isa) << " " << lr::dtype_name(t) << " token " << tok << " row " << r;
      }
    }
  }
  }
}

// The input's 8-bit quantization costs little against the f32 product of the
// same dequantized weights: within 1% of sum |w x| for random data.
TEST(BlockKernels, InputQuantizationErrorIsSmall) {
  for (DType t : kFormats) {
    const int64_t cols = 1024, rows = 8;
    const auto W = random_rows(t, rows, cols, 21);
    const auto x = random_x(cols, 22);
    std::vector<float> y(static_cast<size_t>(rows)), w(static_cast<size_t>(cols));
    cpu::matvec_blocks(t, W.data(), *lr::row_bytes(t, cols), x.data(), y.data(), cols, 0, rows);
    const auto sums = abs_sums(t, W, rows, cols, x);
    for (int64_t r = 0; r < rows; ++r) {
      lr::dequantize(t, W.data() + r * *lr::row_bytes(t, cols), w.data(), cols);
      double exact = 0;
      for (int64_t c = 0; c < cols; ++c) exact += double(w[size_t(c)]) * x[size_t(c)];
      EXPECT_NEAR(y[size_t(r)], exact, 0.01 * sums[size_t(r)]) << lr::dtype_name(t);
    }
  }
}

TEST(BlockKernels, QuantizeActsSums) {
  const auto x = random_x(512, 3);
  for (int block : {32, 256}) {
    std::vector<int8_t> q(512);
    std::vector<float> d(size_t(512 / block)), dsum(16);
    std::vector<int16_t> s(32);
    cpu::quantize_acts(x.data(), 512, block, q.data(), d.data(), s.data(), dsum.data());
    if (block == 32) {
      EXPECT_EQ(d[1], 0.f);  // the all-zero block
    }
    for (int b = 0; b < 512 / block; ++b) {
      float amax = 0;
      for (int j = 0; j < block; ++j) amax = std::max(amax, std::fabs(x[size_t(b * block + j)]));
      // GGML's Q8_0 (f16 scale) and Q8_K (1 / inverse scale) input blocks.
      EXPECT_EQ(d[size_t(b)], block == 32 ? lr::f16_to_f32(lr::f32_to_f16(amax / 127.f)) : 1.f / (127.f / amax));
      for (int j = 0; j < block; ++j)
        EXPECT_EQ(q[size_t(b * block + j)], int8_t(std::nearbyint(x[size_t(b * block + j)] * (amax > 0 ? 127.f / amax : 0.f))));
    }
    for (int g = 0; g < 32; ++g) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += q[size_t(16 * g + j)];
      EXPECT_EQ(s[size_t(g)], sum);
    }
    for (int k = 0; k < 16; ++k)
      EXPECT_EQ(dsum[size_t(k)], d[size_t(k * 32 / block)] * float(s[size_t(2 * k)] + s[size_t(2 * k + 1)]));
  }
}

}  // namespace
