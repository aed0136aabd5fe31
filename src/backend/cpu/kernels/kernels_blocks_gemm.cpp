// The prompt products of the GGUF block formats in 8-bit integers, on
// AVX-512 VNNI (matmul_blocks_int8). The input is quantized as the decode
// kernels quantize it (quantize_acts: a scale per 32 for Q4_0 .. Q5_1, per
// 256 for the K-quants), so a prompt token's products are the decode
// kernel's integer sums, accumulated in another f32 order.
//
// A block of rows is first unpacked, 16 rows at a time, into a panel whose
// 32-bit lane i holds four consecutive unsigned values u of row i: one
// vpdpbusd then adds 4 products u x q to each of 16 rows for one token (64
// multiply-adds, against 16 for an f32 FMA), with the token's four input
// bytes broadcast from memory. A 16-row x 8-token register tile sums each
// group of 16 or 32 values (the format's scale group) in int32, multiplies it
// by the rows' integer scales, and meets the f32 scales once per block:
//   K-quants:  acc += dx (D sum_g sc_g sum(u q) - Dm sum_g mn_g sum_g(q))
//   32-blocks: acc += D dx sum(u q) - m (dx sum(q))
// with mn_g the group's integer min (kOff sc for the formats without a min
// base of their own, folded into the integer sum there). Every (row, token)
// output is summed over the blocks in one order whatever the tile, the
// panel's other rows or the number of tokens, so a token's results do not
// depend on the others in the call (MatmulPath::Tiles holds for every n).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backend/cpu/kernels/block_input.h"
#include "backend/cpu/kernels/kernels.h"
#include "backend/cpu/kernels/kernels_simd.h"
#include "core/cpu_features.h"
#include "core/error.h"
#include "core/quants.h"

namespace lr::cpu {

using namespace detail;

LR_BEGIN_AVX512VNNI
namespace gemm512 {

#define LR_BLOCKS_VNNI 1
#include "backend/cpu/kernels/block_formats_isa.h"
#undef LR_BLOCKS_VNNI

namespace {

constexpr int MR = 16;  // rows per panel: one int32 lane each
constexpr int NT = 8;   // tokens per register tile (3 x 8 of the 32 registers)
// Bytes of packed panels per pass over the tokens (the panels stay in L2
// while 8 tokens' inputs sweep them from L1).
constexpr int64_t kPackBytes = 384 * 1024;

// A panel block's layout for format F: byte offsets within one block of 16
// rows. U [kElems / 4][16][4]: the rows' values, four per 32-bit lane. The
// K-quants add SC int32 [groups][16] (the integer scale of each group of 16,
// or of 32 where the format scales per 32), MN int16 [8][16][2] (the integer
// mins of groups 2p and 2p + 1) and the bases D and Dm f32 [16]; the blocks of
// 32 add D and m f32 [16]. Rows past the matrix's end are all zeros.
template <class F>
constexpr int scale_groups() {
  if constexpr (F::kElems == 32) {
    return 1;
  } else {
    static_assert(F::kMin || F::kPer16, "an offset format scales per 16");
    return F::kPer16 ? 16 : 8;
  }
}
template <class F>
struct Layout {
  static constexpr bool kLarge = F::kElems == 256;
  static constexpr int kGroups = scale_groups<F>();
  static constexpr int kStepsPerGroup = F::kElems / 4 / kGroups;  // 4-value steps
  static constexpr int64_t kU = 0, kSC = kU + F::kElems * MR;
  static constexpr int64_t kMN = kSC + (kLarge ? 4 * kGroups * MR : 0);
  static constexpr int64_t kD = kMN + (kLarge ? 2 * 16 * MR : 0), kD2 = kD + 4 * MR;
  static constexpr int64_t kBytes = kD2 + 4 * MR;  // a multiple of 64
};

// Block b of the panel of nr <= 16 rows starting at W (rows rb bytes apart).
template <class F>
void pack_block(const uint8_t* W, uint64_t rb, int nr, int64_t b, uint8_t* p) {
  using L = Layout<F>;
  for (int c = 0; c < F::kElems / 32; ++c) {  // each 32-value chunk, transposed in 4-byte units
    __m256 v[MR];
    for (int i = 0; i < MR; ++i)
      v[i] = i < nr
                 ? _mm256_castsi256_ps(F::values(W + uint64_t(i) * rb + uint64_t(b) * F::kBytes, c))
                 : _mm256_setzero_ps();
    transpose8(v);
    transpose8(v + 8);
    for (int j = 0; j < 8; ++j) {
      float* to = reinterpret_cast<float*>(p + L::kU + (8 * c + j) * 4 * MR);
      _mm256_store_ps(to, v[j]);
      _mm256_store_ps(to + 8, v[8 + j]);
    }
  }
  auto* d = reinterpret_cast<float*>(p + L::kD);
  auto* d2 = reinterpret_cast<float*>(p + L::kD2);
  if constexpr (L::kLarge) {
    auto* sc = reinterpret_cast<int32_t*>(p + L::kSC);
    auto* mn = reinterpret_cast<int16_t*>(p + L::kMN);
    static constexpr int16_t kZeros[16] = {};
    for (int i = 0; i < MR; ++i) {
      alignas(16) int16_t s[16] = {}, m[16] = {};
      d[i] = d2[i] = 0;
      if (i < nr) {
        const uint8_t* blk = W + uint64_t(i) * rb + uint64_t(b) * F::kBytes;
        const Large k = F::setup(blk, kZeros, kZeros);
        _mm_store_si128(reinterpret_cast<__m128i*>(s), k.lo);
        _mm_store_si128(reinterpret_cast<__m128i*>(s + 8), k.hi);
        if constexpr (F::kMin)
          F::mins(blk, m);
        else
          for (int g = 0; g < 16; ++g) m[g] = int16_t(F::kOff * s[g]);  // kOff formats scale per 16
        d[i] = k.d, d2[i] = k.dm;
      }
      for (int g = 0; g < L::kGroups; ++g) sc[g * MR + i] = s[g];
      for (int g = 0; g < 16; ++g) mn[(g / 2) * 2 * MR + 2 * i + g % 2] = m[g];
    }
  } else {
    for (int i = 0; i < MR; ++i) {
      const Small s =
          i < nr ? F::setup(W + uint64_t(i) * rb + uint64_t(b) * F::kBytes) : Small{0, 0};
      d[i] = s.d, d2[i] = s.m;
    }
  }
}

// int32 -> f32 (the zero-masked form: GCC 12's plain one warns of an
// uninitialized value in its own header).
inline __m512 to_f32(__m512i v) {
  return _mm512_maskz_cvtepi32_ps(__mmask16(0xffff), v);
}
inline int32_t word_at(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// part[t] += the products of 4-value steps [s0, s0 + count) of block b's
// values (panel block p) with token t's input.
template <class F, int T>
inline void add_steps(const uint8_t* p, int64_t b, int s0, int count, const Acts* x,
                      __m512i* part) {
#pragma GCC unroll 8
  for (int step = s0; step < s0 + count; ++step) {
    const __m512i u = _mm512_load_si512(p + Layout<F>::kU + step * 4 * MR);
    for (int t = 0; t < T; ++t)
      part[t] = _mm512_dpbusd_epi32(part[t], u,
                                    _mm512_set1_epi32(word_at(x[t].q + F::kElems * b + 4 * step)));
  }
}

// Y[t, 0..nr) for the T tokens of x from the panel P of nb blocks (rows past
// nr not stored).
template <class F, int T>
void tile(const uint8_t* __restrict P, int64_t nb, const Acts* x, float* __restrict Y, int64_t ldy,
          int nr) {
  using L = Layout<F>;
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* p = P + b * L::kBytes;
    const __m512 d = _mm512_load_ps(p + L::kD), d2 = _mm512_load_ps(p + L::kD2);
    if constexpr (L::kLarge) {
      __m512i isum[T], part[T];
      for (int t = 0; t < T; ++t) isum[t] = _mm512_setzero_si512();
      for (int g = 0; g < L::kGroups; ++g) {
        for (int t = 0; t < T; ++t) part[t] = _mm512_setzero_si512();
        add_steps<F, T>(p, b, g * L::kStepsPerGroup, L::kStepsPerGroup, x, part);
        const __m512i sc = _mm512_load_si512(p + L::kSC + g * 4 * MR);
        for (int t = 0; t < T; ++t)
          isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(part[t], sc));
      }
      // sum_g mn_g sum_g(q), two groups per multiply-add
      for (int t = 0; t < T; ++t) part[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int pr = 0; pr < 8; ++pr) {
        const __m512i mn = _mm512_load_si512(p + L::kMN + pr * 4 * MR);
        for (int t = 0; t < T; ++t)
          part[t] = _mm512_dpwssd_epi32(part[t], mn,
                                        _mm512_set1_epi32(word_at(x[t].s16 + 16 * b + 2 * pr)));
      }
      for (int t = 0; t < T; ++t) {
        const __m512 dx = _mm512_set1_ps(x[t].d[b]);
        if constexpr (F::kMin) {
          acc[t] = _mm512_fmadd_ps(to_f32(isum[t]), _mm512_mul_ps(d, dx), acc[t]);
          acc[t] = _mm512_fnmadd_ps(to_f32(part[t]), _mm512_mul_ps(d2, dx), acc[t]);
        } else {  // Dm = D: the offset subtracted in integers
          acc[t] = _mm512_fmadd_ps(to_f32(_mm512_sub_epi32(isum[t], part[t])), _mm512_mul_ps(d, dx),
                                   acc[t]);
        }
      }
    } else {
      __m512i sum[T];
      for (int t = 0; t < T; ++t) sum[t] = _mm512_setzero_si512();
      add_steps<F, T>(p, b, 0, 8, x, sum);
      for (int t = 0; t < T; ++t) {
        acc[t] =
            _mm512_fmadd_ps(to_f32(sum[t]), _mm512_mul_ps(d, _mm512_set1_ps(x[t].d[b])), acc[t]);
        acc[t] = _mm512_fnmadd_ps(d2, _mm512_set1_ps(x[t].dsum[b]), acc[t]);
      }
    }
  }
  const __mmask16 m = __mmask16((1u << nr) - 1);
  for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(Y + t * ldy, m, acc[t]);
}

template <class F>
using TileFn = void (*)(const uint8_t*, int64_t, const Acts*, float*, int64_t, int);
template <class F>
constexpr TileFn<F> kTiles[NT + 1] = {nullptr,    tile<F, 1>, tile<F, 2>, tile<F, 3>, tile<F, 4>,
                                      tile<F, 5>, tile<F, 6>, tile<F, 7>, tile<F, 8>};

template <class F>
void matmul_t(const uint8_t* W, uint64_t rb, const Acts* x, float* Y, int64_t n, int64_t cols,
              int64_t ldy, int64_t r0, int64_t r1) {
  using L = Layout<F>;
  const int64_t nb = cols / F::kElems, panel = nb * L::kBytes;
  const int64_t block_panels = std::max<int64_t>(1, kPackBytes / panel);
  auto* P = reinterpret_cast<uint8_t*>(scratch(2, block_panels * panel / 4));
  for (int64_t r = r0; r < r1; r += block_panels * MR) {
    const int64_t re = std::min(r1, r + block_panels * MR), np = (re - r + MR - 1) / MR;
    auto rows_of = [&](int64_t p) { return int(std::min<int64_t>(MR, re - r - p * MR)); };
    for (int64_t p = 0; p < np; ++p)
      for (int64_t b = 0; b < nb; ++b)
        pack_block<F>(W + uint64_t(r + p * MR) * rb, rb, rows_of(p), b,
                      P + p * panel + b * L::kBytes);
    for (int64_t t = 0; t < n; t += NT) {
      const TileFn<F> fn = kTiles<F>[std::min<int64_t>(NT, n - t)];
      for (int64_t p = 0; p < np; ++p)
        fn(P + p * panel, nb, x + t, Y + t * ldy + r + p * MR, ldy, rows_of(p));
    }
  }
}

}  // namespace

void matmul(DType t, const uint8_t* W, uint64_t rb, const Acts* x, float* Y, int64_t n,
            int64_t cols, int64_t ldy, int64_t r0, int64_t r1) {
  dispatch(t, [&](auto f) { matmul_t<decltype(f)>(W, rb, x, Y, n, cols, ldy, r0, r1); });
}

}  // namespace gemm512
LR_END_AVX512VNNI

void matmul_blocks_int8(DType t, const uint8_t* W, uint64_t rb, const float* X, float* Y, int64_t n,
                        int64_t cols, int64_t ldx, int64_t ldy, int64_t r0, int64_t r1) {
  LR_ASSERT(cpu_supports(Isa::Avx512Vnni));
  if (r1 <= r0 || n <= 0) return;
  // Every token quantized once (scratch slots 3-5); slot 2 holds the panels.
  const std::vector<Acts>& in =
      quantize_block_inputs(X, cols, n, ldx, int(dtype_info(t).block_elems));
  gemm512::matmul(t, W, rb, in.data(), Y, n, cols, ldy, r0, r1);
}

void detail::matmul_blocks_int8_acts(DType t, const uint8_t* W, uint64_t rb, const Acts* in, float* Y,
                             int64_t n, int64_t cols, int64_t ldy, int64_t r0, int64_t r1) {
  LR_ASSERT(cpu_supports(Isa::Avx512Vnni));
  if (r1 <= r0 || n <= 0) return;
  gemm512::matmul(t, W, rb, in, Y, n, cols, ldy, r0, r1);
}

}  // namespace lr::cpu
