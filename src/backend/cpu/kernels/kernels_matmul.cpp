// Matrix-matrix products Y[t, r] = sum_c W[r, c] * X[t, c] (prompt processing
// and perplexity).
//
// Large n: W rows are packed, 16 at a time, into column-major f32 panels
// P[c][16] (bf16 / f16 converted once here), a block of panels at a time sized to
// stay in L2. A 16-row x 6-token register tile then does, per column c, two
// aligned panel loads, six broadcasts of X[t, c] and 12 FMAs into 12
// accumulators: every loaded value is reused 6 or 16 times, and the result is
// stored straight into Y (no horizontal sums). The 6-token slice of X (6 *
// cols floats) stays in L1 while it sweeps the panels of the block. On the
// AVX-512 path (kernel_isa()) a 32-row x 12-token tile of 512-bit registers
// covers two panels at once, with the same multiply-adds per output in the
// same order, so both paths give the same bits.
//
// Small n: packing would cost more than it saves, so an inner-product kernel
// does 2 rows x up to 4 tokens straight from W.
//
// Both paths are written once against the weight-format traits of
// kernels_simd.h (F32Weights, Bf16Weights, F16Weights), which differ only in
// how 8 weights are read as f32.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>

#include "backend/cpu/kernels/kernels.h"
#include "backend/cpu/kernels/kernels_simd.h"
#include "core/cpu_features.h"
#include "core/half.h"

namespace lr::cpu {

using namespace detail;

namespace {

constexpr int MR = 16;  // rows per packed panel
constexpr int NR = 6;   // tokens per register tile
// Below this many tokens the inner-product path is used (measured crossover
// on Sapphire Rapids: packing pays off from about 12 tokens).
constexpr int64_t kSmallN = 12;
// Budget for one block of packed panels (floats): 512 KiB.
constexpr int64_t kPackFloats = 128 * 1024;

// --- packing ----------------------------------------------------------------

// P[c * 16 + i] = W[row0 + i, c] as f32 for i < nr; 0 for nr <= i < 16.
template <class Fmt>
void pack_panel(const typename Fmt::T* W, int64_t cols, int64_t row0, int nr, float* P) {
  const typename Fmt::T* w = W + row0 * cols;
  int64_t c = 0;
  if (nr == MR) {
    for (; c + 8 <= cols; c += 8) {
      for (int g = 0; g < 2; ++g) {
        __m256 r[8];
        for (int i = 0; i < 8; ++i) r[i] = Fmt::load8(w + (g * 8 + i) * cols + c);
        transpose8(r);
        for (int j = 0; j < 8; ++j) _mm256_store_ps(P + (c + j) * MR + g * 8, r[j]);
      }
    }
  }
  for (; c < cols; ++c) {
    for (int i = 0; i < nr; ++i) P[c * MR + i] = Fmt::scalar(w[i * cols + c]);
    for (int i = nr; i < MR; ++i) P[c * MR + i] = 0.0f;
  }
}

// --- 16 x NT register tile ----------------------------------------------------

// Y[t, 0..nr) = P^T X[t] for t < NT. P is a packed panel, X rows have stride
// ldx, Y rows stride ldy.
template <int NT>
void tile(const float* __restrict P, const float* __restrict X, int64_t ldx, int64_t cols,
          float* __restrict Y, int64_t ldy, int nr) {
  __m256 lo[NT], hi[NT];
#pragma GCC unroll 6
  for (int t = 0; t < NT; ++t) lo[t] = hi[t] = _mm256_setzero_ps();
  for (int64_t c = 0; c < cols; ++c) {
    const __m256 w0 = _mm256_load_ps(P + c * MR), w1 = _mm256_load_ps(P + c * MR + 8);
#pragma GCC unroll 6
    for (int t = 0; t < NT; ++t) {
      const __m256 xb = _mm256_broadcast_ss(X + t * ldx + c);
      lo[t] = _mm256_fmadd_ps(w0, xb, lo[t]);
      hi[t] = _mm256_fmadd_ps(w1, xb, hi[t]);
    }
  }
  if (nr == MR) {
#pragma GCC unroll 6
    for (int t = 0; t < NT; ++t) {
      _mm256_storeu_ps(Y + t * ldy, lo[t]);
      _mm256_storeu_ps(Y + t * ldy + 8, hi[t]);
    }
  } else {
    // Partial panel: spill the tile (constant indices only, so the
    // accumulators above stay in registers) and copy the valid rows.
    alignas(32) float buf[NT][MR];
#pragma GCC unroll 6
    for (int t = 0; t < NT; ++t) {
      _mm256_store_ps(buf[t], lo[t]);
      _mm256_store_ps(buf[t] + 8, hi[t]);
    }
    for (int t = 0; t < NT; ++t)
      for (int i = 0; i < nr; ++i) Y[t * ldy + i] = buf[t][i];
  }
}

using TileFn = void (*)(const float*, const float*, int64_t, int64_t, float*, int64_t, int);
constexpr TileFn kTiles[NR + 1] = {nullptr, tile<1>, tile<2>, tile<3>, tile<4>, tile<5>, tile<6>};

// --- AVX-512: 32 x 12 register tile ------------------------------------------

}  // namespace

LR_BEGIN_AVX512VNNI
namespace avx512 {
namespace {

constexpr int NR512 = 12;  // tokens per tile: 24 of the 32 registers accumulate

// Y[t, 0..nr) for t < NT from NP packed panels (rows 16 p .. 16 p + 15 in
// Pp): per column, NP panel loads, NT broadcasts and NP NT multiply-adds.
// Each output lane is the AVX2 tile's: the same multiply-adds over the
// columns in the same order, so both paths give the same bits. Rows past nr
// are not stored (masked stores).
template <int NT, int NP>
void tile(const float* __restrict P0, const float* __restrict P1, const float* __restrict X,
          int64_t ldx, int64_t cols, float* __restrict Y, int64_t ldy, int nr) {
  const float* P[2] = {P0, P1};
  __m512 acc[NP][NT];
  for (int p = 0; p < NP; ++p)
#pragma GCC unroll 12
    for (int t = 0; t < NT; ++t) acc[p][t] = _mm512_setzero_ps();
  for (int64_t c = 0; c < cols; ++c) {
    __m512 w[NP];
    for (int p = 0; p < NP; ++p) w[p] = _mm512_load_ps(P[p] + c * MR);
#pragma GCC unroll 12
    for (int t = 0; t < NT; ++t) {
      const __m512 xb = _mm512_set1_ps(X[t * ldx + c]);
      for (int p = 0; p < NP; ++p) acc[p][t] = _mm512_fmadd_ps(w[p], xb, acc[p][t]);
    }
  }
  for (int p = 0; p < NP; ++p) {
    const int valid = std::clamp(nr - MR * p, 0, MR);
    const __mmask16 m = __mmask16((1u << valid) - 1);
#pragma GCC unroll 12
    for (int t = 0; t < NT; ++t) _mm512_mask_storeu_ps(Y + t * ldy + MR * p, m, acc[p][t]);
  }
}

using Tile512 = void (*)(const float*, const float*, const float*, int64_t, int64_t, float*,
                         int64_t, int);
template <int... N>
constexpr auto tiles_of(std::integer_sequence<int, N...>, auto np) {
  return std::array<Tile512, sizeof...(N)>{tile<N + 1, decltype(np)::value>...};
}
constexpr auto kOnePanel =
    tiles_of(std::make_integer_sequence<int, NR512>{}, std::integral_constant<int, 1>{});
constexpr auto kTwoPanels =
    tiles_of(std::make_integer_sequence<int, NR512>{}, std::integral_constant<int, 2>{});

}  // namespace

// The tiles over np packed panels (panel_floats apart) and n tokens, two
// panels at a time.
void tiles(const float* P, int64_t panel_floats, int64_t np, const float* X, int64_t ldx, int64_t n,
           int64_t cols, float* Y, int64_t ldy, int64_t rows) {
  for (int64_t t = 0; t < n; t += NR512) {
    const int64_t nt = std::min<int64_t>(NR512, n - t) - 1;
    for (int64_t p = 0; p < np; p += 2) {
      const bool two = p + 1 < np;
      const float* P0 = P + p * panel_floats;
      const int nr = int(std::min<int64_t>(2 * MR, rows - p * MR));
      (two ? kTwoPanels : kOnePanel)[size_t(nt)](P0, two ? P0 + panel_floats : P0, X + t * ldx, ldx,
                                                 cols, Y + t * ldy + p * MR, ldy, nr);
    }
  }
}

}  // namespace avx512
LR_END_AVX512VNNI

namespace {

template <class Fmt>
void matmul_packed(const typename Fmt::T* W, const float* X, float* Y, int64_t n, int64_t cols,
                   int64_t ldx, int64_t ldy, int64_t r0, int64_t r1) {
  const int64_t panel_floats = MR * std::max<int64_t>(cols, 1);
  // At least two panels: the AVX-512 tile covers two.
  const int64_t block_panels = std::max<int64_t>(2, kPackFloats / panel_floats);
  float* P = scratch(1, block_panels * panel_floats);
  const bool wide = kernel_isa() == Isa::Avx512Vnni;
  for (int64_t rb = r0; rb < r1; rb += block_panels * MR) {
    const int64_t re = std::min(r1, rb + block_panels * MR);
    const int64_t np = (re - rb + MR - 1) / MR;
    for (int64_t p = 0; p < np; ++p)
      pack_panel<Fmt>(W, cols, rb + p * MR, int(std::min<int64_t>(MR, re - rb - p * MR)),
                      P + p * panel_floats);
    if (wide) {
      avx512::tiles(P, panel_floats, np, X, ldx, n, cols, Y + rb, ldy, re - rb);
      continue;
    }
    for (int64_t t = 0; t < n; t += NR) {
      const TileFn fn = kTiles[std::min<int64_t>(NR, n - t)];
      for (int64_t p = 0; p < np; ++p)
        fn(P + p * panel_floats, X + t * ldx, ldx, cols, Y + t * ldy + rb + p * MR, ldy,
           int(std::min<int64_t>(MR, re - rb - p * MR)));
    }
  }
}

// --- small n: 2 rows x NT tokens inner products ----------------------------

// 8 columns at a time read through Fmt, the last cols % 8 through
// Fmt::load_partial and a masked load of X. (For bf16 this measured the same
// as an even / odd split of 16-column loads, as matvec_bf16 does: each
// converted weight vector feeds NT tokens, so conversion cost is amortised.)
template <class Fmt, int NT>
void ip(const typename Fmt::T* w0, const typename Fmt::T* w1, const float* X, int64_t cols,
        int64_t ldx, float* Y, int64_t ldy, bool two) {
  const int64_t c8 = cols & ~int64_t(7);
  __m256 a0[NT], a1[NT];
  for (int t = 0; t < NT; ++t) a0[t] = a1[t] = _mm256_setzero_ps();
  int64_t c = 0;
  for (; c < c8; c += 8) {
    const __m256 v0 = Fmt::load8(w0 + c), v1 = Fmt::load8(w1 + c);
    for (int t = 0; t < NT; ++t) {
      const __m256 x = _mm256_loadu_ps(X + t * ldx + c);
      a0[t] = _mm256_fmadd_ps(v0, x, a0[t]);
      a1[t] = _mm256_fmadd_ps(v1, x, a1[t]);
    }
  }
  if (c < cols) {
    const __m256i m = tail_mask(cols - c);
    const __m256 v0 = Fmt::load_partial(w0 + c, cols - c);
    const __m256 v1 = Fmt::load_partial(w1 + c, cols - c);
    for (int t = 0; t < NT; ++t) {
      const __m256 x = _mm256_maskload_ps(X + t * ldx + c, m);
      a0[t] = _mm256_fmadd_ps(v0, x, a0[t]);
      a1[t] = _mm256_fmadd_ps(v1, x, a1[t]);
    }
  }
  for (int t = 0; t < NT; ++t) {
    Y[t * ldy] = hsum(a0[t]);
    if (two) Y[t * ldy + 1] = hsum(a1[t]);
  }
}

template <class Fmt>
void matmul_small(const typename Fmt::T* W, const float* X, float* Y, int64_t n, int64_t cols,
                  int64_t ldx, int64_t ldy, int64_t r0, int64_t r1) {
  using T = typename Fmt::T;
  for (int64_t t = 0; t < n; t += 4) {
    const int64_t nt = std::min<int64_t>(4, n - t);
    const float* x = X + t * ldx;
    float* y = Y + t * ldy;
    for (int64_t r = r0; r < r1; r += 2) {
      const T* w0 = W + r * cols;
      const bool two = r + 1 < r1;
      const T* w1 = two ? w0 + cols : w0;
      switch (nt) {
        case 1: ip<Fmt, 1>(w0, w1, x, cols, ldx, y + r, ldy, two); break;
        case 2: ip<Fmt, 2>(w0, w1, x, cols, ldx, y + r, ldy, two); break;
        case 3: ip<Fmt, 3>(w0, w1, x, cols, ldx, y + r, ldy, two); break;
        default: ip<Fmt, 4>(w0, w1, x, cols, ldx, y + r, ldy, two); break;
      }
    }
  }
}

template <class Fmt>
void matmul_any(const typename Fmt::T* W, const float* X, float* Y, int64_t n, int64_t cols,
                int64_t ldx, int64_t ldy, int64_t r0, int64_t r1, MatmulPath path) {
  if (n <= 0 || r1 <= r0) return;
  if (n < kSmallN && path == MatmulPath::Any) {
    matmul_small<Fmt>(W, X, Y, n, cols, ldx, ldy, r0, r1);
  } else {
    matmul_packed<Fmt>(W, X, Y, n, cols, ldx, ldy, r0, r1);
  }
}

}  // namespace

void matmul_f32(const float* W, const float* X, float* Y, int64_t n, int64_t cols, int64_t ldx,
                int64_t ldy, int64_t r0, int64_t r1, MatmulPath path) {
  matmul_any<F32Weights>(W, X, Y, n, cols, ldx, ldy, r0, r1, path);
}

void matmul_bf16(const uint16_t* W, const float* X, float* Y, int64_t n, int64_t cols,
                 int64_t ldx, int64_t ldy, int64_t r0, int64_t r1, MatmulPath path) {
  matmul_any<Bf16Weights>(W, X, Y, n, cols, ldx, ldy, r0, r1, path);
}

void matmul_f16(const uint16_t* W, const float* X, float* Y, int64_t n, int64_t cols,
                int64_t ldx, int64_t ldy, int64_t r0, int64_t r1, MatmulPath path) {
  matmul_any<F16Weights>(W, X, Y, n, cols, ldx, ldy, r0, r1, path);
}

}  // namespace lr::cpu
