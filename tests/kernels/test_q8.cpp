// Q8_0 kernels (int8 weights, a scale per 32 along a row) against their scalar
// twins over awkward column counts (not multiples of 32, a single column,
// ranks like 209), and against f32 arithmetic within the quantization error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/kernels/kernels.h"
#include "backend/cpu/kernels/ref_kernels.h"
#include "core/cpu_features.h"
#include "core/half.h"
#include "isa_util.h"

namespace {

namespace cpu = lr::cpu;
namespace ref = lr::cpu::ref;

const std::vector<int64_t> kCols = {1, 7, 31, 32, 33, 64, 144, 209, 576, 1537};

std::vector<float> rand_f32(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Weights as the runtime holds Q8_0 (model/weights.h): f16 scales.
struct Q8 {
  std::vector<int8_t> q;
  std::vector<uint16_t> s;
  int64_t nb;
};

Q8 quantize(const std::vector<float>& w, int64_t rows, int64_t cols) {
  Q8 m{std::vector<int8_t>(size_t(rows * cols)), {}, (cols + 31) / 32};
  std::vector<float> s(size_t(rows * m.nb));
  for (int64_t r = 0; r < rows; ++r)
    ref::quantize_q8_row(&w[size_t(r * cols)], &m.q[size_t(r * cols)], &s[size_t(r * m.nb)], cols);
  for (float v : s) m.s.push_back(lr::f32_to_f16(v));
  return m;
}

TEST(Q8Kernels, QuantizeRowMatchesReferenceBitExactly) {
  for (int64_t n : kCols) {
    auto x = rand_f32(size_t(n), 1);
    x[0] = 0.f;
    std::vector<int8_t> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
    std::vector<float> sa(size_t((n + 31) / 32)), sb(sa.size());
    cpu::quantize_q8_row(x.data(), a.data(), sa.data(), n);
    ref::quantize_q8_row(x.data(), b.data(), sb.data(), n);
    EXPECT_EQ(a, b) << n;
    EXPECT_EQ(sa, sb) << n;
    // Every value within half a step of its block's scale.
    for (int64_t c = 0; c < n; ++c)
      EXPECT_LE(std::fabs(sa[size_t(c / 32)] * a[size_t(c)] - x[size_t(c)]), 0.5f * sa[size_t(c / 32)] * 1.0001f);
  }
  std::vector<float> zero(40, 0.f);
  std::vector<int8_t> q(40, 9);
  std::vector<float> s(2, 9.f);
  cpu::quantize_q8_row(zero.data(), q.data(), s.data(), 40);
  for (int8_t v : q) EXPECT_EQ(v, 0);
  EXPECT_EQ(s[0], 0.f);
}

TEST(Q8Kernels, MatvecMatchesReference) {
  const int64_t rows = 37;
  for (lr::Isa isa : lr::test::supported_isas()) {
  lr::test::IsaScope scope(isa);
  for (int64_t cols : kCols) {
    SCOPED_TRACE(std::string(lr::isa_name(isa)) + " cols " + std::to_string(cols));
    auto w = rand_f32(size_t(rows * cols), 2);
    auto x = rand_f32(size_t(cols), 3);
    Q8 m = quantize(w, rows, cols);
    std::vector<float> y(rows, -1.f), yr(rows, -1.f), yf(rows);
    cpu::matvec_q8_0(m.q.data(), m.s.data(), x.data(), y.data(), cols, 1, rows);
    ref::matvec_q8_0(m.q.data(), m.s.data(), x.data(), yr.data(), cols, 1, rows);
    EXPECT_EQ(y[0], -1.f);  // outside [r0, r1)
    ref::matvec_f32(w.data(), x.data(), yf.data(), cols, 0, rows);
    for (int64_t r = 1; r < rows; ++r) {
      // Same integer sums; only the order of the per-block f32 terms differs.
      EXPECT_NEAR(y[size_t(r)], yr[size_t(r)], 1e-5 * (1 + std::fabs(yr[size_t(r)])));
      // Weights and activations each within half a step: the product error of
      // a row stays well under 3% of sum |w x| for these sizes.
      double mag = 0;
      for (int64_t c = 0; c < cols; ++c) mag += std::fabs(w[size_t(r * cols + c)] * x[size_t(c)]);
      EXPECT_NEAR(y[size_t(r)], yf[size_t(r)], 0.03 * mag + 1e-6);
    }
  }
  }
}

// The AVX-512 VNNI path gives the AVX2 path's bits, also on the tails.
TEST(Q8Kernels, EveryKernelPathGivesTheSameBits) {
  if (!lr::cpu_supports(lr::Isa::Avx512Vnni)) GTEST_SKIP() << "this CPU has no AVX-512 VNNI path to compare";
  const int64_t rows = 39;
  for (int64_t cols : kCols) {
    auto w = rand_f32(size_t(rows * cols), 4);
    auto x = rand_f32(size_t(cols), 5);
    Q8 m = quantize(w, rows, cols);
    std::vector<float> y2(rows), y512(rows);
    {
      lr::test::IsaScope scope(lr::Isa::Avx2);
      cpu::matvec_q8_0(m.q.data(), m.s.data(), x.data(), y2.data(), cols, 0, rows);
    }
    {
      lr::test::IsaScope scope(lr::Isa::Avx512Vnni);
      cpu::matvec_q8_0(m.q.data(), m.s.data(), x.data(), y512.data(), cols, 0, rows);
    }
    EXPECT_EQ(0, std::memcmp(y2.data(), y512.data(), y2.size() * sizeof(float))) << "cols " << cols;
  }
}

// A batch of decode inputs (a server step's generated rows): each input's
// outputs are matvec_q8_0's alone, bit for bit, on every path, for 1 to 6
// inputs (the 4-input body and the single tail), over row ranges that cross
// the 64-row blocks and end in a partial group of 4 rows; nothing outside the
// range is written.
TEST(Q8Kernels, BatchedMatvecIsEachMatvecBitForBit) {
  for (lr::Isa isa : lr::test::supported_isas()) {
    lr::test::IsaScope scope(isa);
    const int64_t rows = 150, r0 = 3;
    for (int64_t cols : {int64_t(33), int64_t(576), int64_t(1537)}) {
      for (int64_t n : {int64_t(1), int64_t(4), int64_t(6)}) {
        auto w = rand_f32(size_t(rows * cols), 6);
        const int64_t ldx = cols + 2, ldy = rows + 1;
        auto X = rand_f32(size_t(n * ldx), 7 + uint32_t(n));
        Q8 m = quantize(w, rows, cols);
        std::vector<float> Y(size_t(n * ldy), -5.f);
        cpu::matvec_q8_0_n(m.q.data(), m.s.data(), X.data(), ldx, Y.data(), ldy, n, cols, r0, rows);
        for (int64_t t = 0; t < n; ++t) {
          std::vector<float> y(size_t(rows), -5.f);
          cpu::matvec_q8_0(m.q.data(), m.s.data(), X.data() + t * ldx, y.data(), cols, r0, rows);
          y.push_back(-5.f);  // the padding column of Y
          EXPECT_EQ(0, std::memcmp(y.data(), Y.data() + t * ldy, size_t(ldy) * sizeof(float)))
              << lr::isa_name(isa) << " cols " << cols << " n " << n << " input " << t;
        }
      }
    }
  }
}

TEST(Q8Kernels, MatmulEqualsDequantizedF32Product) {
  const int64_t rows = 35, n = 13;
  for (int64_t cols : {int64_t(1), int64_t(33), int64_t(209), int64_t(576)}) {
    SCOPED_TRACE(cols);
    auto w = rand_f32(size_t(rows * cols), 4);
    auto X = rand_f32(size_t(n * cols), 5);
    Q8 m = quantize(w, rows, cols);
    std::vector<float> deq(size_t(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        deq[size_t(r * cols + c)] =
            lr::f16_to_f32(m.s[size_t(r * m.nb + c / 32)]) * m.q[size_t(r * cols + c)];
    const int64_t ldy = rows + 3;
    std::vector<float> Y(size_t(n * ldy), -1.f), Yr(size_t(n * ldy), -1.f);
    cpu::matmul_q8_0(m.q.data(), m.s.data(), X.data(), Y.data(), n, cols, cols, ldy, 2, rows);
    ref::matmul_f32(deq.data(), X.data(), Yr.data(), n, cols, cols, ldy, 2, rows);
    for (int64_t t = 0; t < n; ++t)
      for (int64_t r = 0; r < ldy; ++r)
        EXPECT_NEAR(Y[size_t(t * ldy + r)], Yr[size_t(t * ldy + r)], 1e-4 * (1 + std::fabs(Yr[size_t(t * ldy + r)])));
  }
}

}  // namespace
