// Q4_0 .. Q5_1 and Q2_K .. Q6_K in panels of 16 rows (backend/cpu/panels.h) against their
// scalar twin over the file's own rows, bit for bit on every instruction-set path, for any number
// of inputs; the twin against the f32 reference product (ref::matvec_blocks: the same input
// quantization, the integer products summed in double) within 1e-5 of sum |w x|.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/kernels/panels.h"
#include "backend/cpu/kernels/kernels.h"
#include "backend/cpu/kernels/ref_kernels.h"
#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/quants.h"
#include "isa_util.h"
#include "random_blocks.h"

namespace {

using lr::DType;
namespace cpu = lr::cpu;

using lr::test::bits;
using lr::test::random_x;

constexpr DType kPanelTypes[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q2_K,
                                 DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K};

TEST(Panels, EveryInputCountIsTheTwinBitForBit) {
  for (lr::Isa isa : lr::test::supported_isas()) {
    lr::test::IsaScope scope(isa);
    for (DType t : kPanelTypes)
      for (int64_t cols : {256, 768, 1536}) {
        const int64_t rows = 48, ldx = cols + 5, ldy = rows + 3;
        const uint64_t rb = *lr::row_bytes(t, uint64_t(cols));
        const auto W = lr::test::random_rows(t, rows, cols, uint32_t(cols));
        ASSERT_TRUE(cpu::panels_fit(t, rows, cols));
        const auto P = cpu::repack_panels(t, W.data(), rb, rows, cols);
        for (int64_t n : {1, 2, 3, 4, 5, 7, 9}) {
          const auto X = random_x(n * ldx, uint32_t(cols + n));
          std::vector<float> Y(static_cast<size_t>(n * ldy), -9.f), want(static_cast<size_t>(rows));
          cpu::matvec_panels_n(t, P.get(), X.data(), ldx, Y.data(), ldy, n, cols, 0, rows);
          for (int64_t k = 0; k < n; ++k) {
            cpu::matvec_panel_twin(t, W.data(), rb, X.data() + k * ldx, want.data(), cols, 0, rows);
            for (int64_t r = 0; r < ldy; ++r) {
              const float got = Y[size_t(k * ldy + r)];
              if (r >= rows) {
                ASSERT_EQ(got, -9.f) << "padding written: input " << k << " row " << r;
                continue;
              }
              ASSERT_EQ(bits(got), bits(want[size_t(r)]))
                  << lr::isa_name(isa) << " " << lr::dtype_name(t) << " cols " << cols << " inputs "
                  << n << " input " << k << " row " << r << ": " << got << " vs "
                  << want[size_t(r)];
            }
          }
        }
      }
  }
}

TEST(Panels, TwinIsTheReferenceProduct) {
  const int64_t rows = 32, cols = 1536;
  for (DType t : kPanelTypes) {
    const uint64_t rb = *lr::row_bytes(t, uint64_t(cols));
    const auto W = lr::test::random_rows(t, rows, cols, 7);
    const auto x = random_x(cols, 8);
    std::vector<float> got(static_cast<size_t>(rows)), want(static_cast<size_t>(rows)),
        w(static_cast<size_t>(cols));
    cpu::matvec_panel_twin(t, W.data(), rb, x.data(), got.data(), cols, 0, rows);
    cpu::ref::matvec_blocks(t, W.data(), rb, x.data(), want.data(), cols, 0, rows);
    for (int64_t r = 0; r < rows; ++r) {
      lr::dequantize(t, W.data() + uint64_t(r) * rb, w.data(), cols);
      double mag = 0;
      for (int64_t c = 0; c < cols; ++c) mag += std::fabs(double(w[size_t(c)]) * x[size_t(c)]);
      ASSERT_GT(mag, 0);
      ASSERT_NEAR(got[size_t(r)], want[size_t(r)], 1e-5 * mag) << lr::dtype_name(t) << " row " << r;
    }
  }
}

// The panel form unpacks to the file's bytes exactly, and the prompt
// products from it are matmul_blocks' bits over the rows as stored, below and
// above the prompt length that takes the panels directly on AVX-512 VNNI.
TEST(Panels, UnpackIsTheFileAndPromptsAreMatmulBlocks) {
  const int64_t rows = 64, cols = 768, ldx = cols + 3, ldy = rows + 2;
  for (DType t : kPanelTypes) {
    const uint64_t rb = *lr::row_bytes(t, uint64_t(cols));
    const auto W = lr::test::random_rows(t, rows, cols, 21);
    const auto P = cpu::repack_panels(t, W.data(), rb, rows, cols);
    std::vector<uint8_t> back(W.size(), 0);
    cpu::unpack_panels(t, P.get(), cols, 0, rows, back.data());
    ASSERT_EQ(back, W) << lr::dtype_name(t);
    cpu::unpack_panels(t, P.get(), cols, 16, 48, back.data());  // a range lands at the start
    ASSERT_EQ(std::memcmp(back.data(), W.data() + 16 * rb, 32 * rb), 0) << lr::dtype_name(t);
    for (int64_t n : {int64_t(1), int64_t(11), cpu::kPanelPromptTokens, cpu::kPanelPromptTokens + 1}) {
      const auto X = random_x(n * ldx, uint32_t(22 + n));
      for (lr::Isa isa : lr::test::supported_isas()) {
        lr::test::IsaScope scope(isa);
        std::vector<float> want(static_cast<size_t>(n * ldy), -9.f), got(want.size(), -9.f);
        cpu::matmul_blocks(t, W.data(), rb, X.data(), want.data(), n, cols, ldx, ldy, 16, rows,
                           cpu::MatmulPath::Tiles);
        cpu::matmul_panels(t, P.get(), X.data(), got.data(), n, cols, ldx, ldy, 16, rows,
                           cpu::MatmulPath::Tiles);
        ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0)
            << lr::isa_name(isa) << " " << lr::dtype_name(t) << " tokens " << n;
      }
    }
  }
}

// On AVX-512 VNNI a token's products are the same bits in a prompt (the
// 8-bit prompt kernel over the file's rows) and in decode (the panels): the
// same integer sums meet the same f32 steps.
TEST(Panels, DecodeIsThePromptKernelsBitsOnVnni) {
  if (!lr::cpu_supports(lr::Isa::Avx512Vnni)) GTEST_SKIP() << "no AVX-512 VNNI on this host";
  lr::test::IsaScope scope(lr::Isa::Avx512Vnni);
  const int64_t rows = 48, cols = 1536, ldx = cols + 1, ldy = rows + 5;
  for (DType t : kPanelTypes) {
    const uint64_t rb = *lr::row_bytes(t, uint64_t(cols));
    const auto W = lr::test::random_rows(t, rows, cols, 31);
    const auto P = cpu::repack_panels(t, W.data(), rb, rows, cols);
    for (int64_t n : {1, 4, 9}) {
      const auto X = random_x(n * ldx, uint32_t(40 + n));
      std::vector<float> prompt(static_cast<size_t>(n * ldy), -9.f), decode(prompt.size(), -9.f);
      cpu::matmul_blocks_int8(t, W.data(), rb, X.data(), prompt.data(), n, cols, ldx, ldy, 0, rows);
      cpu::matvec_panels_n(t, P.get(), X.data(), ldx, decode.data(), ldy, n, cols, 0, rows);
      for (size_t i = 0; i < prompt.size(); ++i)
        ASSERT_EQ(bits(decode[i]), bits(prompt[i]))
            << lr::dtype_name(t) << " inputs " << n << " at " << i << ": " << decode[i] << " vs " << prompt[i];
    }
  }
}

// A row range of panels writes those rows only; extreme blocks (Q4_K: every
// nibble 15, scales and mins 63; Q6_K: every value 63, scales -128; Q2_K and
// Q3_K: every bit of values and scales set; inputs all 127) stay exact in
// int32.
TEST(Panels, RowRangesAndExtremeBlocks) {
  const int64_t rows = 48, cols = 512;
  for (DType t : kPanelTypes) {
    const uint64_t rb = *lr::row_bytes(t, uint64_t(cols));
    auto W = lr::test::random_rows(t, rows, cols, 11);
    lr::test::saturate_rows(t, W, cols, 16, 32);  // rows 16-31: all bits set but d, dmin
    std::vector<float> x(static_cast<size_t>(cols));
    for (int64_t c = 0; c < cols; ++c) x[size_t(c)] = 1.f;  // every input quantizes to 127
    for (lr::Isa isa : lr::test::supported_isas()) {
      lr::test::IsaScope scope(isa);
      const auto P = cpu::repack_panels(t, W.data(), rb, rows, cols);
      std::vector<float> y(static_cast<size_t>(rows), -9.f), want(static_cast<size_t>(rows));
      cpu::matvec_panels_n(t, P.get(), x.data(), cols, y.data(), rows, 1, cols, 16, 32);
      cpu::matvec_panel_twin(t, W.data(), rb, x.data(), want.data(), cols, 16, 32);
      for (int64_t r = 0; r < rows; ++r) {
        if (r < 16 || r >= 32)
          ASSERT_EQ(y[size_t(r)], -9.f) << "row " << r << " outside the range written";
        else
          ASSERT_EQ(bits(y[size_t(r)]), bits(want[size_t(r)])) << lr::isa_name(isa) << " row " << r;
      }
    }
  }
  EXPECT_FALSE(cpu::panels_fit(DType::Q4_K, 40, 256));  // rows not a multiple of 16
  EXPECT_FALSE(cpu::panels_fit(DType::Q8_0, 48, 256));
  EXPECT_FALSE(cpu::panels_fit(DType::Q4_K, 48, 128));  // rows shorter than a super-block
}

}  // namespace
