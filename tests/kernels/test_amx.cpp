// The AMX-INT8 prompt kernels over panels (kernels_amx.h) against the VNNI
// panel kernel (matvec_panels_n), the VNNI prompt kernel (matmul_blocks_int8)
// and the scalar twin (matvec_panel_twin), bit for bit, for every format
// they take; and a token's outputs the same bits whatever the number of
// tokens in the call. Where AMX does not run, the kernel runs on its
// software model of the tile unit (every step but the tile instructions)
// and the hardware's own test is skipped, saying why.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/kernels/kernels.h"
#include "backend/cpu/kernels/kernels_amx.h"
#include "backend/cpu/kernels/panels.h"
#include "core/cpu_features.h"
#include "core/dtype.h"
#include "isa_util.h"
#include "random_blocks.h"

namespace {

using lr::DType;
namespace cpu = lr::cpu;
namespace detail = lr::cpu::detail;

constexpr DType kAmxTypes[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                               DType::Q4_K, DType::Q5_K, DType::Q6_K};

// Why the AMX kernels cannot run here, or "" when they can.
std::string amx_missing() {
  if (!lr::cpu_supports(lr::Isa::Avx512Vnni)) return "no AVX-512 VNNI on this host";
  if (lr::amx_status() != lr::Amx::Usable)
    return std::string("AMX on this host: ") + lr::amx_status_name(lr::amx_status());
  lr::test::IsaScope scope(lr::Isa::Avx512Vnni);
  detail::set_amx_prompts(true);
  return detail::amx_prompts_ready() ? "" : "CPUID does not list AMX-INT8";
}
#define SKIP_WITHOUT_AMX()                 \
  do {                                     \
    const std::string why = amx_missing(); \
    if (!why.empty()) GTEST_SKIP() << why; \
  } while (0)

// The kernel on the tile unit: the hardware's where AMX runs, and
// everywhere with AVX-512 VNNI its software model (every step of the kernel
// but the tile instructions).
using AmxFn = bool (*)(DType, const uint8_t*, const detail::Acts*, int64_t, float*, int64_t,
                       int64_t, int64_t, int64_t);
struct Unit {
  const char* name;
  AmxFn fn;
};
std::vector<Unit> units() {
  std::vector<Unit> out;
  if (lr::cpu_supports(lr::Isa::Avx512Vnni))
    out.push_back({"emulated tiles", detail::matmul_panels_amx_emulated});
  if (amx_missing().empty()) out.push_back({"AMX", detail::matmul_panels_amx});
  return out;
}
#define SKIP_WITHOUT_UNITS()                                                                   \
  do {                                                                                         \
    if (units().empty()) GTEST_SKIP() << "no AVX-512 VNNI on this host (nor AMX)";             \
    if (!amx_missing().empty())                                                                \
      std::printf("AMX tiles not run (%s): the emulated tiles only\n", amx_missing().c_str()); \
  } while (0)

using lr::test::bits;
using lr::test::random_x;

// Y [n, ldy] from the AMX kernel over the panels' rows [r0, r1) (the rest -9).
std::vector<float> amx_product(const Unit& u, DType t, const uint8_t* P,
                               const std::vector<float>& X, int64_t ldx, int64_t n, int64_t cols,
                               int64_t ldy, int64_t r0, int64_t r1) {
  const auto& in =
      detail::quantize_block_inputs(X.data(), cols, n, ldx, int(lr::dtype_info(t).block_elems));
  std::vector<float> Y(static_cast<size_t>(n * ldy), -9.f);
  EXPECT_TRUE(u.fn(t, P, in.data(), n, Y.data(), ldy, cols, r0, r1)) << u.name;
  return Y;
}

// Every format, column counts of one to nine super-blocks (across the
// kernel's 1024-column blocks), row ranges of one to five panels, token
// counts 16 .. 130 (tiles of 16 and pairs of them, whole and not): the VNNI
// panel kernel's bits and, for some tokens, the twin's. (Weight rows come
// in panels of 16, so a call's rows are always whole tiles.)
TEST(Amx, PanelsAreTheVnniAndTwinBits) {
  SKIP_WITHOUT_UNITS();
  lr::test::IsaScope scope(lr::Isa::Avx512Vnni);
  struct Shape {
    int64_t rows, cols, r0, r1;
  };
  for (const Unit& u : units())
    for (DType t : kAmxTypes) {
      const bool k = lr::dtype_info(t).block_elems == 256;
      const Shape shapes[] = {{16, k ? 256 : 64, 0, 16},
                              {64, k ? 1280 : 1088, 16, 64},
                              {80, k ? 2304 : 2080, 0, 80},
                              {48, k ? 768 : 896, 16, 32}};
      for (const Shape& s : shapes) {
        const uint64_t rb = *lr::row_bytes(t, uint64_t(s.cols));
        const auto W = lr::test::random_rows(t, s.rows, s.cols, uint32_t(s.cols + s.rows));
        const auto P = cpu::repack_panels(t, W.data(), rb, s.rows, s.cols);
        for (int64_t n : {16, 17, 31, 32, 33, 48, 77, 128, 130}) {
          const int64_t ldx = s.cols + 3, ldy = s.rows + 5;
          const auto X = random_x(n * ldx, uint32_t(n + s.cols));
          const auto got = amx_product(u, t, P.get(), X, ldx, n, s.cols, ldy, s.r0, s.r1);
          std::vector<float> want(got.size(), -9.f), twin(static_cast<size_t>(s.rows));
          cpu::matvec_panels_n(t, P.get(), X.data(), ldx, want.data(), ldy, n, s.cols, s.r0, s.r1);
          for (int64_t i = 0; i < n * ldy; ++i)
            ASSERT_EQ(bits(got[size_t(i)]), bits(want[size_t(i)]))
                << u.name << " " << lr::dtype_name(t) << " cols " << s.cols << " rows [" << s.r0
                << ", " << s.r1 << ") tokens " << n << " token " << i / ldy << " row " << i % ldy
                << ": " << got[size_t(i)] << " vs " << want[size_t(i)];
          for (int64_t tok : {int64_t(0), n / 2, n - 1}) {
            cpu::matvec_panel_twin(t, W.data(), rb, X.data() + tok * ldx, twin.data(), s.cols, s.r0,
                                   s.r1);
            for (int64_t r = s.r0; r < s.r1; ++r)
              ASSERT_EQ(bits(got[size_t(tok * ldy + r)]), bits(twin[size_t(r)]))
                  << u.name << " " << lr::dtype_name(t) << " twin: cols " << s.cols << " tokens "
                  << n << " token " << tok << " row " << r;
          }
        }
      }
    }
}

// Row ranges of many panels: the kernel unpacks 8 passes (one panel, or two
// of the 32-value formats) at a time, the last group partial, an odd panel
// last; every output the VNNI panel kernel's bits.
TEST(Amx, ManyPanelsInGroups) {
  SKIP_WITHOUT_UNITS();
  lr::test::IsaScope scope(lr::Isa::Avx512Vnni);
  for (const Unit& u : units())
    for (DType t : kAmxTypes) {
      const bool k = lr::dtype_info(t).block_elems == 256;
      const int64_t rows = k ? 320 : 560, cols = k ? 512 : 128, r0 = 16, r1 = k ? 304 : 544;
      const uint64_t rb = *lr::row_bytes(t, uint64_t(cols));
      const auto W = lr::test::random_rows(t, rows, cols, 3);
      const auto P = cpu::repack_panels(t, W.data(), rb, rows, cols);
      for (int64_t n : {16, 35}) {
        const int64_t ldy = rows + 1;
        const auto X = random_x(n * cols, uint32_t(n));
        const auto got = amx_product(u, t, P.get(), X, cols, n, cols, ldy, r0, r1);
        std::vector<float> want(got.size(), -9.f);
        cpu::matvec_panels_n(t, P.get(), X.data(), cols, want.data(), ldy, n, cols, r0, r1);
        ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0)
            << u.name << " " << lr::dtype_name(t) << " tokens " << n;
      }
    }
}

// Above kPanelPromptTokens the VNNI path is the prompt kernel over the rows
// as stored (matmul_blocks_int8): the same bits again; where AMX runs,
// matmul_panels (which then takes it) gives them with AMX on and off.
TEST(Amx, PromptsAreMatmulBlocksBits) {
  SKIP_WITHOUT_UNITS();
  lr::test::IsaScope scope(lr::Isa::Avx512Vnni);
  for (DType t : kAmxTypes) {
    const int64_t rows = 48, cols = lr::dtype_info(t).block_elems == 256 ? 1536 : 1152, n = 200;
    const int64_t ldx = cols + 1, ldy = rows + 2;
    const uint64_t rb = *lr::row_bytes(t, uint64_t(cols));
    const auto W = lr::test::random_rows(t, rows, cols, 5);
    const auto P = cpu::repack_panels(t, W.data(), rb, rows, cols);
    const auto X = random_x(n * ldx, 6);
    std::vector<float> want(static_cast<size_t>(n * ldy), -9.f);
    cpu::matmul_blocks_int8(t, W.data(), rb, X.data(), want.data(), n, cols, ldx, ldy, 0, rows);
    for (const Unit& u : units()) {
      const auto got = amx_product(u, t, P.get(), X, ldx, n, cols, ldy, 0, rows);
      ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0)
          << u.name << " " << lr::dtype_name(t);
    }
    if (!amx_missing().empty()) continue;
    for (bool on : {false, true}) {
      detail::set_amx_prompts(on);
      std::vector<float> got(want.size(), -9.f);
      cpu::matmul_panels(t, P.get(), X.data(), got.data(), n, cols, ldx, ldy, 0, rows,
                         cpu::MatmulPath::Tiles);
      ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0)
          << lr::dtype_name(t) << " AMX " << on;
    }
  }
}

// Batch invariance: token k's outputs are the same bits in calls of 1 ..
// 160 tokens, whichever tile, pair or leftover it falls in: the kernel's
// own (16 tokens and more) and matmul_panels' (the VNNI kernels, or AMX from
// 16 tokens where it runs).
TEST(Amx, TokenOutputsDoNotDependOnTheCallsTokenCount) {
  SKIP_WITHOUT_UNITS();
  lr::test::IsaScope scope(lr::Isa::Avx512Vnni);
  for (DType t : {DType::Q4_K, DType::Q6_K, DType::Q5_0, DType::Q4_1}) {
    const int64_t rows = 32, cols = lr::dtype_info(t).block_elems == 256 ? 1280 : 1088, most = 160;
    const uint64_t rb = *lr::row_bytes(t, uint64_t(cols));
    const auto W = lr::test::random_rows(t, rows, cols, 9);
    const auto P = cpu::repack_panels(t, W.data(), rb, rows, cols);
    const auto X = random_x(most * cols, 10);
    std::vector<float> all(static_cast<size_t>(most * rows));
    cpu::matmul_panels(t, P.get(), X.data(), all.data(), most, cols, cols, rows, 0, rows,
                       cpu::MatmulPath::Tiles);
    for (int64_t n : {1, 5, 15, 16, 17, 33, 47, 64, 100, 129, 160})
      for (int64_t skip :
           {int64_t(0), most - n}) {  // the call's tokens from the start and from the end
        const std::vector<float> Xn(X.begin() + skip * cols, X.begin() + (skip + n) * cols);
        std::vector<float> Y(static_cast<size_t>(n * rows), -9.f);
        cpu::matmul_panels(t, P.get(), Xn.data(), Y.data(), n, cols, cols, rows, 0, rows,
                           cpu::MatmulPath::Tiles);
        ASSERT_EQ(std::memcmp(Y.data(), all.data() + skip * rows, Y.size() * 4), 0)
            << "matmul_panels " << lr::dtype_name(t) << " tokens " << n << " from " << skip;
        if (n < detail::kAmxMinTokens) continue;
        for (const Unit& u : units()) {
          const auto got = amx_product(u, t, P.get(), Xn, cols, n, cols, rows, 0, rows);
          ASSERT_EQ(std::memcmp(got.data(), all.data() + skip * rows, got.size() * 4), 0)
              << u.name << " " << lr::dtype_name(t) << " tokens " << n << " from " << skip;
        }
      }
  }
}

// The extremes of the planes: every value and scale at its largest (Q4_K,
// Q5_K: 63 x 31, Q6_K: 63 and scales -128) against inputs all 127 or
// alternately -127, exact.
TEST(Amx, ExtremeBlocksAreExact) {
  SKIP_WITHOUT_UNITS();
  lr::test::IsaScope scope(lr::Isa::Avx512Vnni);
  const int64_t rows = 32, cols = 512, n = 20;
  for (DType t : kAmxTypes) {
    const uint64_t rb = *lr::row_bytes(t, uint64_t(cols));
    auto W = lr::test::random_rows(t, rows, cols, 11);
    lr::test::saturate_rows(t, W, cols, 16, 32);  // rows 16-31: every bit set but d (and dmin)
    const auto P = cpu::repack_panels(t, W.data(), rb, rows, cols);
    std::vector<float> X(static_cast<size_t>(n * cols), 1.f);  // every input quantizes to 127
    for (int64_t c = 0; c < cols; c += 2) X[size_t(cols + c)] = -1.f;  // token 1: -127 in turn
    std::vector<float> want(static_cast<size_t>(rows));
    for (const Unit& u : units()) {
      const auto got = amx_product(u, t, P.get(), X, cols, n, cols, rows, 0, rows);
      for (int64_t k = 0; k < 2; ++k) {
        cpu::matvec_panel_twin(t, W.data(), rb, X.data() + k * cols, want.data(), cols, 0, rows);
        for (int64_t r = 0; r < rows; ++r)
          ASSERT_EQ(bits(got[size_t(k * rows + r)]), bits(want[size_t(r)]))
              << u.name << " " << lr::dtype_name(t) << " token " << k << " row " << r;
      }
    }
  }
}

// The hardware tiles themselves (skipped, saying why, where AMX does not
// run): the emulated tiles' bits, and matmul_panels takes them from 16
// tokens (the tests above check both against the VNNI kernels).
TEST(Amx, HardwareTilesAreTheEmulatedBits) {
  SKIP_WITHOUT_AMX();
  lr::test::IsaScope scope(lr::Isa::Avx512Vnni);
  const std::vector<Unit> u = units();
  ASSERT_EQ(u.size(), 2u);
  for (DType t : kAmxTypes) {
    const int64_t rows = 64, cols = lr::dtype_info(t).block_elems == 256 ? 2304 : 2080, n = 45;
    const uint64_t rb = *lr::row_bytes(t, uint64_t(cols));
    const auto W = lr::test::random_rows(t, rows, cols, 13);
    const auto P = cpu::repack_panels(t, W.data(), rb, rows, cols);
    const auto X = random_x(n * cols, 14);
    const auto emulated = amx_product(u[0], t, P.get(), X, cols, n, cols, rows, 0, rows);
    const auto hardware = amx_product(u[1], t, P.get(), X, cols, n, cols, rows, 0, rows);
    ASSERT_EQ(std::memcmp(hardware.data(), emulated.data(), emulated.size() * 4), 0)
        << lr::dtype_name(t);
  }
}

// What the kernel declines, writing nothing, so the caller takes the VNNI
// kernels: formats without a kernel, row ranges not in panels, AMX absent
// or turned off, the AVX2 path.
TEST(Amx, DeclinesWhatItCannotTake) {
  if (!lr::cpu_supports(lr::Isa::Avx512Vnni)) GTEST_SKIP() << "no AVX-512 VNNI on this host";
  lr::test::IsaScope scope(lr::Isa::Avx512Vnni);
  EXPECT_FALSE(detail::amx_has_format(DType::Q2_K));
  EXPECT_FALSE(detail::amx_has_format(DType::Q3_K));
  EXPECT_FALSE(detail::amx_has_format(DType::Q8_0));
  const int64_t rows = 32, cols = 256, n = 16;
  const auto W = lr::test::random_rows(DType::Q4_K, rows, cols, 1);
  const auto P =
      cpu::repack_panels(DType::Q4_K, W.data(), *lr::row_bytes(DType::Q4_K, cols), rows, cols);
  const auto X = random_x(n * cols, 2);
  const auto& in = detail::quantize_block_inputs(X.data(), cols, n, cols, 256);
  std::vector<float> Y(static_cast<size_t>(n * rows), -9.f);
  for (const Unit& u : units()) {
    EXPECT_FALSE(u.fn(DType::Q3_K, P.get(), in.data(), n, Y.data(), rows, cols, 0, rows)) << u.name;
    EXPECT_FALSE(u.fn(DType::Q4_K, P.get(), in.data(), n, Y.data(), rows, cols, 8, rows)) << u.name;
  }
  if (!amx_missing().empty()) {  // no AMX: the kernel is never ready and declines every call
    EXPECT_FALSE(detail::amx_prompts_ready());
    EXPECT_FALSE(detail::matmul_panels_amx(DType::Q4_K, P.get(), in.data(), n, Y.data(), rows, cols,
                                           0, rows));
  } else {
    detail::set_amx_prompts(false);
    EXPECT_FALSE(detail::amx_prompts_ready());
    EXPECT_FALSE(detail::matmul_panels_amx(DType::Q4_K, P.get(), in.data(), n, Y.data(), rows, cols,
                                           0, rows));
    detail::set_amx_prompts(true);
    EXPECT_TRUE(detail::amx_prompts_ready());
    lr::test::IsaScope avx2(lr::Isa::Avx2);  // the AVX2 path's bits are f32 products: no AMX there
    EXPECT_FALSE(detail::amx_prompts_ready());
  }
  for (float v : Y) ASSERT_EQ(v, -9.f) << "written when declined";
}

}  // namespace
