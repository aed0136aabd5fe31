// Every AVX2 kernel against its scalar twin (backend/cpu/ref_kernels.h) over
// awkward shapes.
//
// f16 weights include subnormals (rand_f16), and one test pushes every finite
// f16 value through the kernels exactly.
//
// Tolerances: dot products (matvec, matmul, dot) must agree with the double
// reference within kTol * sum_c |w_c * x_c| (+ 1e-30): the AVX2 kernels
// accumulate in f32 with a different order, whose error is bounded by about
// cols * 2^-24 of that sum in the worst case and is far smaller in practice.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <tuple>
#include <vector>

#include "backend/cpu/kernels/kernels.h"
#include "backend/cpu/kernels/ref_kernels.h"
#include "core/half.h"
#include "isa_util.h"

namespace {

using lr::bf16_to_f32;
using lr::f16_to_f32;
using lr::f32_to_bf16;
using lr::f32_to_f16;
namespace cpu = lr::cpu;
namespace ref = lr::cpu::ref;

constexpr double kTol = 1e-5;  // relative to sum |w * x|, for all f32-accumulated dot products
constexpr float kSentinel = -12345.0f;

const std::vector<int64_t> kCols = {1, 3, 7, 8, 15, 16, 17, 31, 33, 64, 576, 1536, 1537};

std::vector<float> rand_f32(int64_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<uint16_t> rand_bf16(int64_t n, uint32_t seed) {
  std::vector<float> f = rand_f32(n, seed);
  std::vector<uint16_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = f32_to_bf16(f[size_t(i)]);
  return v;
}

// f16 weights: uniform in [-1, 1) rounded to f16, except that about one in
// `subnormal_every` is a random nonzero subnormal (|w| < 2^-14, either sign).
std::vector<uint16_t> rand_f16(int64_t n, uint32_t seed, int subnormal_every = 5) {
  std::vector<float> f = rand_f32(n, seed);
  std::mt19937 rng(seed ^ 0x9e3779b9u);
  std::vector<uint16_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = rng();
    if (subnormal_every > 0 && u % uint32_t(subnormal_every) == 0) {
      const uint16_t mant = uint16_t(1 + (u >> 8) % 0x3ffu);  // 1..0x3ff
      v[size_t(i)] = uint16_t((u & 0x80u ? 0x8000u : 0u) | mant);
    } else {
      v[size_t(i)] = f32_to_f16(f[size_t(i)]);
    }
  }
  return v;
}

// How a test reads one weight (the element type alone does not say: bf16 and
// f16 are both uint16_t).
float dec_f32(float v) { return v; }
float dec_bf16(uint16_t v) { return bf16_to_f32(v); }
// f16 through a table (lr::f16_to_f32 branches on subnormals, slow with
// random inputs).
const std::vector<float> kF16Table = [] {
  std::vector<float> t(65536);
  for (uint32_t h = 0; h < 65536; ++h) t[h] = f16_to_f32(uint16_t(h));
  return t;
}();
float dec_f16(uint16_t v) { return kF16Table[v]; }

// sum_c |W[r, c] * x[c]|
template <class T>
double abs_dot(const T* W, const float* x, int64_t cols, int64_t r, float (*dec)(T)) {
  double s = 0;
  for (int64_t c = 0; c < cols; ++c) s += std::fabs(double(dec(W[r * cols + c])) * double(x[c]));
  return s;
}

// Row ranges [r0, r1) to try for a matrix of `rows` rows: the whole, and
// ranges starting / ending mid-way.
std::vector<std::pair<int64_t, int64_t>> row_ranges(int64_t rows) {
  std::vector<std::pair<int64_t, int64_t>> v = {{0, rows}};
  if (rows >= 3) v.push_back({1, rows - 1});
  if (rows >= 8) v.push_back({3, rows - 2});
  if (rows >= 20) v.push_back({rows / 2 - 1, rows / 2 + 6});
  return v;
}

// --- matvec ------------------------------------------------------------------

template <class T, class Fast, class Ref>
void check_matvec(const std::vector<T>& W, int64_t rows, int64_t cols, Fast fast, Ref refk,
                  uint32_t seed, float (*dec)(T)) {
  const std::vector<float> x = rand_f32(cols, seed);
  for (auto [r0, r1] : row_ranges(rows)) {
    std::vector<float> y(size_t(rows), kSentinel), yr(size_t(rows), kSentinel);
    fast(W.data(), x.data(), y.data(), cols, r0, r1);
    refk(W.data(), x.data(), yr.data(), cols, r0, r1);
    for (int64_t r = 0; r < rows; ++r) {
      if (r < r0 || r >= r1) {
        ASSERT_EQ(y[size_t(r)], kSentinel) << "row " << r << " outside [" << r0 << "," << r1 << ")";
        continue;
      }
      const double tol = kTol * abs_dot(W.data(), x.data(), cols, r, dec) + 1e-30;
      ASSERT_NEAR(y[size_t(r)], yr[size_t(r)], tol)
          << "rows=" << rows << " cols=" << cols << " r=" << r << " range [" << r0 << "," << r1
          << ")";
    }
  }
}

TEST(Kernels, MatvecF32) {
  for (int64_t cols : kCols)
    for (int64_t rows = 1; rows <= 67; ++rows) {
      const std::vector<float> W = rand_f32(rows * cols, uint32_t(rows * 7919 + cols));
      check_matvec(W, rows, cols, cpu::matvec_f32, ref::matvec_f32, uint32_t(cols), dec_f32);
    }
}

TEST(Kernels, MatvecBf16) {
  for (int64_t cols : kCols)
    for (int64_t rows = 1; rows <= 67; ++rows) {
      const std::vector<uint16_t> W = rand_bf16(rows * cols, uint32_t(rows * 7919 + cols));
      check_matvec(W, rows, cols, cpu::matvec_bf16, ref::matvec_bf16, uint32_t(cols), dec_bf16);
    }
}

TEST(Kernels, MatvecF16) {
  for (int64_t cols : kCols)
    for (int64_t rows = 1; rows <= 67; ++rows) {
      const std::vector<uint16_t> W = rand_f16(rows * cols, uint32_t(rows * 7919 + cols));
      check_matvec(W, rows, cols, cpu::matvec_f16, ref::matvec_f16, uint32_t(cols), dec_f16);
    }
}

// Every weight subnormal: the whole result comes from subnormal inputs, so a
// kernel that flushed them to zero would be off by 100% of sum |w * x|.
TEST(Kernels, MatvecF16AllSubnormal) {
  for (int64_t cols : kCols)
    for (int64_t rows : {1, 5, 17}) {
      const std::vector<uint16_t> W = rand_f16(rows * cols, uint32_t(rows * 31 + cols), 1);
      check_matvec(W, rows, cols, cpu::matvec_f16, ref::matvec_f16, uint32_t(cols + 1), dec_f16);
    }
}

TEST(Kernels, MatvecEmptyRangeWritesNothing) {
  const std::vector<uint16_t> Wb = rand_bf16(4 * 16, 1);
  const std::vector<float> Wf = rand_f32(4 * 16, 2), x = rand_f32(16, 3);
  std::vector<float> y(4, kSentinel);
  cpu::matvec_bf16(Wb.data(), x.data(), y.data(), 16, 2, 2);
  cpu::matvec_f32(Wf.data(), x.data(), y.data(), 16, 2, 2);
  cpu::matvec_f16(Wb.data(), x.data(), y.data(), 16, 2, 2);
  for (float v : y) EXPECT_EQ(v, kSentinel);
}

// --- matmul ------------------------------------------------------------------

// Every row range with each matmul path.
std::vector<std::tuple<int64_t, int64_t, cpu::MatmulPath>> paths_of(const std::vector<std::pair<int64_t, int64_t>>& ranges) {
  std::vector<std::tuple<int64_t, int64_t, cpu::MatmulPath>> out;
  for (auto [r0, r1] : ranges)
    for (auto p : {cpu::MatmulPath::Any, cpu::MatmulPath::Tiles}) out.emplace_back(r0, r1, p);
  return out;
}

template <class T, class Fast, class Ref>
void check_matmul(const std::vector<T>& W, int64_t rows, int64_t cols, int64_t n, Fast fast,
                  Ref refk, uint32_t seed, float (*dec)(T)) {
  // Input rows 3 floats apart past their end (a product reading a segment of a wider buffer).
  const int64_t ldx = cols + 3;
  const std::vector<float> X = rand_f32(n * ldx, seed);
  const int64_t ldy = rows + 5;
  // Both paths: the fastest for n, and the register tiles for any n (a server's prompt rows).
  for (auto [r0, r1, path] : paths_of(row_ranges(rows))) {
    std::vector<float> Y(size_t(n * ldy), kSentinel), Yr(size_t(n * ldy), kSentinel);
    fast(W.data(), X.data(), Y.data(), n, cols, ldx, ldy, r0, r1, path);
    refk(W.data(), X.data(), Yr.data(), n, cols, ldx, ldy, r0, r1);
    for (int64_t t = 0; t < n; ++t)
      for (int64_t r = 0; r < ldy; ++r) {
        const float y = Y[size_t(t * ldy + r)];
        if (r < r0 || r >= r1) {
          ASSERT_EQ(y, kSentinel) << "t=" << t << " r=" << r << " outside [" << r0 << "," << r1
                                  << ")";
          continue;
        }
        const double tol = kTol * abs_dot(W.data(), X.data() + t * ldx, cols, r, dec) + 1e-30;
        ASSERT_NEAR(y, Yr[size_t(t * ldy + r)], tol)
            << "rows=" << rows << " cols=" << cols << " n=" << n << " t=" << t << " r=" << r
            << " range [" << r0 << "," << r1 << ")";
      }
  }
}

const std::vector<int64_t> kMatmulRows = {1, 2, 3, 4, 5, 7, 15, 16, 17, 31, 33, 47, 67};
// Small n uses an inner-product path, n >= 12 the packed path: cover both
// sides of the switch.
const std::vector<int64_t> kMatmulN = {1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 33};

// Every shape of kCols x kMatmulRows x kMatmulN on every kernel path; make(n,
// seed) gives n random weights.
template <class T, class Make, class Fast, class Ref>
void check_matmul_shapes(Make make, Fast fast, Ref refk, float (*dec)(T)) {
  for (lr::Isa isa : lr::test::supported_isas()) {
    SCOPED_TRACE(lr::isa_name(isa));
    lr::test::IsaScope scope(isa);
    for (int64_t cols : kCols)
      for (int64_t rows : kMatmulRows)
        for (int64_t n : kMatmulN) {
          const std::vector<T> W = make(rows * cols, uint32_t(rows * 31 + cols));
          check_matmul(W, rows, cols, n, fast, refk, uint32_t(n * 131 + cols), dec);
        }
  }
}

TEST(Kernels, MatmulF32) {
  check_matmul_shapes<float>([](int64_t n, uint32_t seed) { return rand_f32(n, seed); },
                             cpu::matmul_f32, ref::matmul_f32, dec_f32);
}

TEST(Kernels, MatmulBf16) {
  check_matmul_shapes<uint16_t>([](int64_t n, uint32_t seed) { return rand_bf16(n, seed); },
                                cpu::matmul_bf16, ref::matmul_bf16, dec_bf16);
}

TEST(Kernels, MatmulF16) {
  check_matmul_shapes<uint16_t>([](int64_t n, uint32_t seed) { return rand_f16(n, seed); },
                                cpu::matmul_f16, ref::matmul_f16, dec_f16);
}

TEST(Kernels, MatmulF16AllSubnormal) {
  for (int64_t cols : kCols)
    for (int64_t rows : {3, 17})
      for (int64_t n : {1, 5, 13}) {
        const std::vector<uint16_t> W = rand_f16(rows * cols, uint32_t(rows * 31 + cols), 1);
        check_matmul(W, rows, cols, n, cpu::matmul_f16, ref::matmul_f16,
                     uint32_t(n * 131 + cols), dec_f16);
      }
}

// The AVX-512 prompt tile (32 rows x 12 tokens) does each output's
// multiply-adds in the AVX2 tile's order: the same bits, over panel counts
// odd and even, partial panels and token tails.
TEST(Kernels, MatmulPathsGiveTheSameBits) {
  if (!lr::cpu_supports(lr::Isa::Avx512Vnni))
    GTEST_SKIP() << "this CPU has no AVX-512 path to compare";
  for (int64_t rows : {16, 17, 33, 67, 200})
    for (int64_t n : {12, 13, 25, 40}) {
      const int64_t cols = 577;
      const std::vector<float> W = rand_f32(rows * cols, uint32_t(rows)),
                               X = rand_f32(n * cols, uint32_t(n));
      std::vector<float> Y2(size_t(n * rows), 1.f), Y5(size_t(n * rows), 2.f);
      {
        lr::test::IsaScope scope(lr::Isa::Avx2);
        cpu::matmul_f32(W.data(), X.data(), Y2.data(), n, cols, cols, rows, 0, rows);
      }
      {
        lr::test::IsaScope scope(lr::Isa::Avx512Vnni);
        cpu::matmul_f32(W.data(), X.data(), Y5.data(), n, cols, cols, rows, 0, rows);
      }
      ASSERT_EQ(std::memcmp(Y2.data(), Y5.data(), Y2.size() * 4), 0)
          << "rows " << rows << " n " << n;
    }
}

// Every finite f16 value (subnormals, +-0, the largest 65504) must come out of
// the vector conversion exactly: row p holds pattern p in one column (cycling
// through vector lanes and the scalar / partial tail) and zeros elsewhere, and
// x (or each token of X) is all ones, so y[p] is that one value.
TEST(Kernels, F16AllFiniteValuesExact) {
  const int64_t cols = 23;  // 16 + 7: a full 16-block, then a 7-column tail
  std::vector<uint16_t> pats;
  for (uint32_t h = 0; h < 0x10000u; ++h)
    if (((h >> 10) & 0x1fu) != 0x1fu) pats.push_back(uint16_t(h));
  const int64_t rows = int64_t(pats.size());
  std::vector<uint16_t> W(size_t(rows * cols), 0);
  for (int64_t p = 0; p < rows; ++p) W[size_t(p * cols + p % cols)] = pats[size_t(p)];
  const std::vector<float> x(size_t(13 * cols), 1.0f);
  std::vector<float> y(static_cast<size_t>(rows)), yr(static_cast<size_t>(rows));
  cpu::matvec_f16(W.data(), x.data(), y.data(), cols, 0, rows);
  ref::matvec_f16(W.data(), x.data(), yr.data(), cols, 0, rows);
  for (int64_t p = 0; p < rows; ++p) {
    const float want = f16_to_f32(pats[size_t(p)]);
    ASSERT_EQ(y[size_t(p)], want) << std::hex << "f16 0x" << pats[size_t(p)];
    ASSERT_EQ(yr[size_t(p)], want) << std::hex << "ref, f16 0x" << pats[size_t(p)];
  }
  for (int64_t n : {3, 13}) {  // inner-product path, packed path
    std::vector<float> Y(size_t(n * rows));
    cpu::matmul_f16(W.data(), x.data(), Y.data(), n, cols, cols, rows, 0, rows);
    for (int64_t t = 0; t < n; ++t)
      for (int64_t p = 0; p < rows; ++p)
        ASSERT_EQ(Y[size_t(t * rows + p)], f16_to_f32(pats[size_t(p)]))
            << std::hex << "f16 0x" << pats[size_t(p)] << std::dec << " n=" << n << " t=" << t;
  }
}

// More rows than one block of packed panels (so several blocks, and blocks
// starting mid-panel when the range starts mid-way).
TEST(Kernels, MatmulManyRows) {
  for (lr::Isa isa : lr::test::supported_isas()) {
    SCOPED_TRACE(lr::isa_name(isa));
    lr::test::IsaScope scope(isa);
    struct Shape {
      int64_t rows, cols, n;
    };
    for (Shape s : {Shape{300, 576, 13}, Shape{200, 1536, 14}, Shape{123, 1537, 12}}) {
      const std::vector<uint16_t> Wb = rand_bf16(s.rows * s.cols, 11);
      check_matmul(Wb, s.rows, s.cols, s.n, cpu::matmul_bf16, ref::matmul_bf16, 12, dec_bf16);
      const std::vector<float> Wf = rand_f32(s.rows * s.cols, 13);
      check_matmul(Wf, s.rows, s.cols, s.n, cpu::matmul_f32, ref::matmul_f32, 14, dec_f32);
      const std::vector<uint16_t> Wh = rand_f16(s.rows * s.cols, 15);
      check_matmul(Wh, s.rows, s.cols, s.n, cpu::matmul_f16, ref::matmul_f16, 16, dec_f16);
    }
  }
}

// Matmul rows must agree with matvec on the same token to the same tolerance
// (both the inner-product and the packed path).
template <class Matmul, class Matvec>
void check_matmul_matches_matvec(const std::vector<uint16_t>& W, Matmul mm, Matvec mv,
                                 float (*dec)(uint16_t)) {
  const int64_t rows = 40, cols = 576;
  for (int64_t n : {9, 13}) {
    const std::vector<float> X = rand_f32(n * cols, 22);
    std::vector<float> Y(size_t(n * rows)), y(static_cast<size_t>(rows));
    mm(W.data(), X.data(), Y.data(), n, cols, cols, rows, 0, rows, cpu::MatmulPath::Any);
    for (int64_t t = 0; t < n; ++t) {
      mv(W.data(), X.data() + t * cols, y.data(), cols, 0, rows);
      for (int64_t r = 0; r < rows; ++r)
        ASSERT_NEAR(Y[size_t(t * rows + r)], y[size_t(r)],
                    2 * kTol * abs_dot(W.data(), X.data() + t * cols, cols, r, dec))
            << "n=" << n << " t=" << t << " r=" << r;
    }
  }
}

TEST(Kernels, MatmulMatchesMatvec) {
  check_matmul_matches_matvec(rand_bf16(40 * 576, 21), cpu::matmul_bf16, cpu::matvec_bf16,
                              dec_bf16);
  check_matmul_matches_matvec(rand_f16(40 * 576, 23), cpu::matmul_f16, cpu::matvec_f16, dec_f16);
}

// --- vector ops ------------------------------------------------------------------

const std::vector<int64_t> kLens = {0, 1, 3, 7, 8, 15, 16, 17, 31, 33, 64, 576, 1536, 1537};

TEST(Kernels, Dot) {
  for (int64_t n : kLens) {
    const std::vector<float> a = rand_f32(n, 1), b = rand_f32(n, 2);
    double abs_sum = 0;
    for (int64_t i = 0; i < n; ++i) abs_sum += std::fabs(double(a[size_t(i)]) * b[size_t(i)]);
    EXPECT_NEAR(cpu::dot(a.data(), b.data(), n), ref::dot(a.data(), b.data(), n),
                kTol * abs_sum + 1e-30)
        << "n=" << n;
  }
}

TEST(Kernels, Axpy) {
  for (int64_t n : kLens) {
    const std::vector<float> x = rand_f32(n + 1, 3);
    std::vector<float> y = rand_f32(n + 1, 4), yr = y;
    const float a = 0.37f;
    cpu::axpy(a, x.data(), y.data(), n);
    ref::axpy(a, x.data(), yr.data(), n);
    for (int64_t i = 0; i < n; ++i)  // one f32 rounding (FMA) vs double rounded once
      ASSERT_NEAR(y[size_t(i)], yr[size_t(i)],
                  1e-6 * (std::fabs(yr[size_t(i)]) + std::fabs(a * x[size_t(i)])) + 1e-30)
          << "n=" << n << " i=" << i;
    EXPECT_EQ(y[size_t(n)], yr[size_t(n)]) << "wrote past n=" << n;
  }
}

TEST(Kernels, ScaleAndAddAreExact) {
  for (int64_t n : kLens) {
    const std::vector<float> x = rand_f32(n + 1, 5);
    std::vector<float> y = rand_f32(n + 1, 6), yr = y;
    cpu::scale(-1.7f, y.data(), n);
    ref::scale(-1.7f, yr.data(), n);
    ASSERT_EQ(std::memcmp(y.data(), yr.data(), y.size() * 4), 0) << "scale n=" << n;
    cpu::add(x.data(), y.data(), n);
    ref::add(x.data(), yr.data(), n);
    ASSERT_EQ(std::memcmp(y.data(), yr.data(), y.size() * 4), 0) << "add n=" << n;
  }
}

TEST(Kernels, SiluMul) {
  for (int64_t n : kLens) {
    std::vector<float> g = rand_f32(n + 1, 7, -20.0f, 20.0f), gr = g;
    const std::vector<float> u = rand_f32(n + 1, 8, -3.0f, 3.0f);
    cpu::silu_mul(g.data(), u.data(), n);
    ref::silu_mul(gr.data(), u.data(), n);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_NEAR(g[size_t(i)], gr[size_t(i)], 1e-6 * std::fabs(gr[size_t(i)]) + 1e-30)
          << "n=" << n << " i=" << i;
    EXPECT_EQ(g[size_t(n)], gr[size_t(n)]) << "wrote past n=" << n;
  }
}

// GELU's tanh form (GeGLU, Gemma) against its scalar twin: within 1e-6 of
// |gelu(g) u| plus what 1 + tanh loses where it nears 0 (g < -3: about
// 1e-7 of |g u|).
TEST(Kernels, GeluMul) {
  for (int64_t n : kLens) {
    std::vector<float> g = rand_f32(n + 1, 11, -12.0f, 12.0f), gr = g;
    const std::vector<float> g0 = g, u = rand_f32(n + 1, 12, -3.0f, 3.0f);
    cpu::gelu_mul(g.data(), u.data(), n);
    ref::gelu_mul(gr.data(), u.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const size_t k = size_t(i);
      ASSERT_NEAR(g[k], gr[k], 1e-6 * std::fabs(gr[k]) + 4e-7 * std::fabs(g0[k] * u[k]) + 1e-30)
          << "n=" << n << " i=" << i << " g=" << g0[k];
    }
    EXPECT_EQ(g[size_t(n)], gr[size_t(n)]) << "wrote past n=" << n;
  }
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> g = {0.0f, 1e30f, -1e30f, inf, 50.0f, -50.0f}, u(g.size(), 1.5f), gr = g;
  cpu::gelu_mul(g.data(), u.data(), int64_t(g.size()));
  ref::gelu_mul(gr.data(), u.data(), int64_t(g.size()));
  for (size_t i = 0; i < g.size(); ++i) EXPECT_EQ(g[i], gr[i]) << "g=" << g[i];
}

TEST(Kernels, SiluMulExtremes) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> g = {0.0f,   -0.0f, 1e-30f, -1e-30f, 80.0f,  -80.0f, 87.0f, -87.0f,
                          88.5f, -88.5f, 89.0f,  -89.0f,  100.0f, -100.0f, 1e30f, -1e30f,
                          inf,   3.0f,   -3.0f};
  std::vector<float> u(g.size(), 1.5f), gr = g;
  cpu::silu_mul(g.data(), u.data(), int64_t(g.size()));
  ref::silu_mul(gr.data(), u.data(), int64_t(g.size()));
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isinf(gr[i])) {
      EXPECT_EQ(g[i], gr[i]) << "i=" << i;
    } else {
      EXPECT_NEAR(g[i], gr[i], 2e-6 * std::fabs(gr[i]) + 1e-30) << "i=" << i;
    }
  }
  float nan = std::numeric_limits<float>::quiet_NaN(), one = 1.0f;
  cpu::silu_mul(&nan, &one, 1);
  EXPECT_TRUE(std::isnan(nan));
}

TEST(Kernels, RmsNorm) {
  for (int64_t n : kLens) {
    if (n == 0) continue;
    const std::vector<float> x = rand_f32(n + 1, 9, -4.0f, 4.0f), w = rand_f32(n + 1, 10);
    std::vector<float> y(size_t(n + 1), kSentinel), yr(size_t(n + 1), kSentinel);
    cpu::rms_norm(x.data(), w.data(), y.data(), n, 1e-5f);
    ref::rms_norm(x.data(), w.data(), yr.data(), n, 1e-5f);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_NEAR(y[size_t(i)], yr[size_t(i)], 1e-5 * std::fabs(yr[size_t(i)]) + 1e-30)
          << "n=" << n << " i=" << i;
    EXPECT_EQ(y[size_t(n)], kSentinel) << "wrote past n=" << n;

    // In place: y aliases x.
    std::vector<float> xa = x;
    cpu::rms_norm(xa.data(), w.data(), xa.data(), n, 1e-5f);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(xa[size_t(i)], y[size_t(i)]) << "alias n=" << n;
    EXPECT_EQ(xa[size_t(n)], x[size_t(n)]);
  }
}

TEST(Kernels, RmsNormEpsDominates) {
  std::vector<float> x(17, 0.0f), w(17, 2.0f), y(17);
  cpu::rms_norm(x.data(), w.data(), y.data(), 17, 1e-6f);
  for (float v : y) EXPECT_EQ(v, 0.0f);
}

// --- bf16 conversion --------------------------------------------------------------

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

void expect_bf16_exact(const std::vector<float>& x) {
  // Run at several offsets so every value goes through both the vector body
  // and the scalar tail.
  for (size_t off : {size_t(0), size_t(5)}) {
    if (off > x.size()) continue;
    const int64_t n = int64_t(x.size() - off);
    std::vector<uint16_t> y(size_t(n) + 1, 0xabcd);
    cpu::f32_to_bf16_row(x.data() + off, y.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const float v = x[off + size_t(i)];
      ASSERT_EQ(y[size_t(i)], f32_to_bf16(v))
          << std::hex << "input bits 0x" << bits(v) << " (off " << std::dec << off << ")";
    }
    ASSERT_EQ(y[size_t(n)], 0xabcd);
  }
}

TEST(Kernels, F32ToBf16Specials) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {0.0f, -0.0f, 1.0f, -1.0f, inf, -inf,
                          std::numeric_limits<float>::quiet_NaN(),
                          std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::min(),          // smallest normal
                          std::numeric_limits<float>::denorm_min(),   // smallest denormal
                          -std::numeric_limits<float>::denorm_min()};
  for (uint32_t u : {0x7f800001u, 0xff800001u, 0x7fc00000u, 0xffc00000u, 0x7fffffffu, 0xffffffffu,
                     0x7fbfffffu, 0x7f80ffffu, 0x7f810000u,  // NaNs (signalling and quiet)
                     0x007fffffu, 0x807fffffu, 0x00008000u, 0x00018000u, 0x00017fffu,  // denormals
                     0x3f808000u, 0x3f818000u, 0x3f808001u, 0x3f807fffu,  // ties / near ties
                     0x7f7f8000u, 0x7f7fffffu, 0xff7f8000u})                // round to Inf
    x.push_back(from_bits(u));
  expect_bf16_exact(x);
}

TEST(Kernels, F32ToBf16BitPatternSweep) {
  // Every upper half with the rounding-relevant lower halves, then a strided
  // sweep over all 2^32 patterns (NaNs, Infs and denormals included).
  std::vector<float> x;
  x.reserve(1 << 20);
  for (uint32_t hi = 0; hi < 0x10000u; ++hi)
    for (uint32_t lo : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu})
      x.push_back(from_bits(hi << 16 | lo));
  expect_bf16_exact(x);
  x.clear();
  for (uint64_t u = 0; u < (uint64_t(1) << 32); u += 4099) x.push_back(from_bits(uint32_t(u)));
  expect_bf16_exact(x);
}

TEST(Kernels, Bf16ToF32) {
  for (int64_t n : kLens) {
    std::vector<uint16_t> x(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) x[size_t(i)] = uint16_t(i * 40503u + 7);
    std::vector<float> y(size_t(n) + 1, kSentinel), yr(size_t(n) + 1, kSentinel);
    cpu::bf16_to_f32_row(x.data(), y.data(), n);
    ref::bf16_to_f32_row(x.data(), yr.data(), n);
    for (int64_t i = 0; i <= n; ++i)
      ASSERT_EQ(bits(y[size_t(i)]), bits(yr[size_t(i)])) << "n=" << n << " i=" << i;
  }
  // All 65536 patterns.
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = uint16_t(i);
  std::vector<float> y(65536);
  cpu::bf16_to_f32_row(all.data(), y.data(), 65536);
  for (uint32_t i = 0; i < 65536; ++i) ASSERT_EQ(bits(y[i]), i << 16);
}

TEST(Kernels, Bf16RoundTrip) {
  const std::vector<float> x = rand_f32(1537, 17, -1e3f, 1e3f);
  std::vector<uint16_t> h(x.size());
  std::vector<float> back(x.size());
  cpu::f32_to_bf16_row(x.data(), h.data(), int64_t(x.size()));
  cpu::bf16_to_f32_row(h.data(), back.data(), int64_t(x.size()));
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_LE(std::fabs(back[i] - x[i]), std::ldexp(std::fabs(x[i]), -8)) << i;
}

}  // namespace
