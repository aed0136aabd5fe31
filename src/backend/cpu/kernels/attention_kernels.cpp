#include "backend/cpu/kernels/attention_kernels.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "backend/cpu/kernels/kernels.h"
#include "backend/cpu/kernels/kernels_simd.h"
#include "backend/cpu/kernels/quant_scores.h"
#include "backend/cpu/kernels/stored_rows.h"
#include "core/cpu_features.h"
#include "core/error.h"
#include "core/half.h"

namespace lr::cpu {

using namespace detail;

namespace {

// Scores of keys [jb, jb+nb) for one head: s[b] = scale * q . K[jb+b], four
// keys at a time with one horizontal sum per four (d a multiple of 8).
inline void scores_block(const float* q, int d, const float* K, int64_t stride, int64_t jb, int nb,
                         float scale, float* s) {
  int b = 0;
  for (; b + 4 <= nb; b += 4) {
    const float* k0 = K + (jb + b) * stride;
    const float* k1 = k0 + stride;
    const float* k2 = k1 + stride;
    const float* k3 = k2 + stride;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int c = 0; c < d; c += 8) {
      const __m256 qv = _mm256_loadu_ps(q + c);
      a0 = _mm256_fmadd_ps(_mm256_loadu_ps(k0 + c), qv, a0);
      a1 = _mm256_fmadd_ps(_mm256_loadu_ps(k1 + c), qv, a1);
      a2 = _mm256_fmadd_ps(_mm256_loadu_ps(k2 + c), qv, a2);
      a3 = _mm256_fmadd_ps(_mm256_loadu_ps(k3 + c), qv, a3);
    }
    _mm_storeu_ps(s + b, _mm_mul_ps(hsum4(a0, a1, a2, a3), _mm_set1_ps(scale)));
  }
  for (; b < nb; ++b) s[b] = dot(q, K + (jb + b) * stride, d) * scale;
}

// acc[0..D) = acc * c + sum_b p[b] V[jb+b], the accumulator in registers.
template <int D>
inline void accumulate_block(float* acc, float c, const float* p, const float* V, int64_t stride,
                             int64_t jb, int nb) {
  constexpr int R = D / 8;
  __m256 a[R];
  const __m256 cv = _mm256_set1_ps(c);
  for (int r = 0; r < R; ++r) a[r] = _mm256_mul_ps(_mm256_loadu_ps(acc + 8 * r), cv);
  for (int b = 0; b < nb; ++b) {
    const float* v = V + (jb + b) * stride;
    const __m256 pb = _mm256_set1_ps(p[b]);
    for (int r = 0; r < R; ++r) a[r] = _mm256_fmadd_ps(pb, _mm256_loadu_ps(v + 8 * r), a[r]);
  }
  for (int r = 0; r < R; ++r) _mm256_storeu_ps(acc + 8 * r, a[r]);
}

inline void accumulate_block_any(float* acc, int d, float c, const float* p, const float* V,
                                 int64_t stride, int64_t jb, int nb) {
  if (c != 1.f) cpu::scale(c, acc, d);
  for (int b = 0; b < nb; ++b) axpy(p[b], V + (jb + b) * stride, acc, d);
}

// One head's online-softmax step over a block's scores sh[0, nb), which
// become their weights exp(s - m), but for the weights' sum: updates the
// running maximum m, rescales the running sum l, and returns the factor
// the head's accumulated output is rescaled by.
inline float block_exp(float* sh, int nb, float& m, float& l) {
  int b = 0;
  __m256 mx = _mm256_set1_ps(-INFINITY);
  for (; b + 8 <= nb; b += 8) mx = _mm256_max_ps(mx, _mm256_loadu_ps(sh + b));
  float bm = hmax(mx);
  for (; b < nb; ++b) bm = std::max(bm, sh[b]);
  float c = 1.f;  // rescale of what was accumulated under the old maximum
  if (bm > m) {
    if (l > 0.f) c = std::exp(m - bm);
    l *= c;
    m = bm;
  }
  const __m256 mh = _mm256_set1_ps(m);
  for (b = 0; b + 8 <= nb; b += 8)
    _mm256_storeu_ps(sh + b, exp_ps(_mm256_sub_ps(_mm256_loadu_ps(sh + b), mh)));
  for (; b < nb; ++b) sh[b] = std::exp(sh[b] - m);
  return c;
}

// block_exp, then the weights added to l one by one in order.
inline float block_weights(float* sh, int nb, float& m, float& l) {
  const float c = block_exp(sh, nb, m, l);
  float total = 0.f;
  for (int b = 0; b < nb; ++b) total += sh[b];
  l += total;
  return c;
}

// Rows r[0..8) as columns: r[j] = (r0[j], r1[j], ..., r7[j]).
inline void transpose8(__m256 r[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
  }
}

// The sums block_weights takes, of 8 heads' weights w + h * lds [0, nb) (nb
// a multiple of 8), a head a lane: the same additions in the same order.
inline __m256 sums8_in_order(const float* w, int64_t lds, int nb) {
  __m256 sum = _mm256_setzero_ps();
  for (int b = 0; b < nb; b += 8) {
    __m256 r[8];
    for (int h = 0; h < 8; ++h) r[h] = _mm256_loadu_ps(w + h * lds + b);
    transpose8(r);
    for (int j = 0; j < 8; ++j) sum = _mm256_add_ps(sum, r[j]);
  }
  return sum;
}

// The tiles of attend_causal: a block of kB keys every row of the tile sees
// whole. block_scores writes the scores of the tile's R query rows (s, kB
// apart); block_values, after each row's softmax step, adds the weighted
// values to the rows' outputs. Per row, the same multiply-adds in the same
// order as scores_block and accumulate_block (the same bits), for up to 6
// rows at once so that every key and value loaded serves them all.
constexpr int kB = 32;     // keys a block (attend_partial's)
constexpr int kMaxG = 16;  // query heads attend_partial scores a block for at once

// Rows [r0, r0 + R): scores of the block's keys four at a time.
template <int R, typename E>
void scores_of(int r0, const float* const* qr, int d, const E* K, int64_t stride, int nb,
               float scale, float* s) {
  const float* const* q = qr + r0;
  const __m128 sc = _mm_set1_ps(scale);
  for (int b = 0; b < nb; b += 4) {
    const E* k = K + b * stride;
    __m256 a[R][4];
    for (int r = 0; r < R; ++r)
      for (int i = 0; i < 4; ++i) a[r][i] = _mm256_setzero_ps();
    for (int c0 = 0; c0 < d; c0 += 32) {  // blocks of 32 columns: one scale a key
      __m256 ks[4];
      for (int i = 0; i < 4; ++i) ks[i] = block_scale(k + i * stride, c0);
      for (int c = c0; c < std::min(d, c0 + 32); c += 8) {
        __m256 qv[R];
        for (int r = 0; r < R; ++r) qv[r] = _mm256_loadu_ps(q[r] + c);
        for (int i = 0; i < 4; ++i) {
          const __m256 kv = row8(k + i * stride, c, ks[i]);
          for (int r = 0; r < R; ++r) a[r][i] = _mm256_fmadd_ps(kv, qv[r], a[r][i]);
        }
      }
    }
    for (int r = 0; r < R; ++r)
      _mm_storeu_ps(s + (r0 + r) * kB + b,
                    _mm_mul_ps(hsum4(a[r][0], a[r][1], a[r][2], a[r][3]), sc));
  }
}

// Rows [0, R) by the kernel of `widest` rows while that many remain, then
// by the one of the rest. F[k]: the kernel of k rows.
template <typename E>
using ScoresFn = void (*)(int, const float* const*, int, const E*, int64_t, int, float, float*);
template <typename E>
using ValuesFn = void (*)(int, float* const*, const float*, const float* const*, const E*, int64_t,
                          int, int);
template <typename Fn, typename... A>
inline void by_rows(const Fn* F, int widest, int R, A... a) {
  int r = 0;
  for (; r + widest <= R; r += widest) F[widest](r, a...);
  if (r < R) F[R - r](r, a...);
}
template <typename E>
constexpr ScoresFn<E> kScores[] = {nullptr, scores_of<1, E>, scores_of<2, E>, scores_of<3, E>};

}  // namespace

#define LR_TILE_BITS 256
#include "backend/cpu/kernels/attention_tiles_isa.h"
#undef LR_TILE_BITS

namespace {

template <typename E>
void block_scores(const float* const* q, int R, int d, const E* K, int64_t stride, int nb,
                  float scale, float* s) {
  by_rows(kScores<E>, 3, R, q, d, K, stride, nb, scale, s);
}
template <typename E>
void block_values(float* const* acc, const float* c, const float* const* w, int R, int d,
                  const E* V, int64_t stride, int nb) {
  values_by_width(acc, c, w, R, d, V, stride, nb);
}

}  // namespace

// The same tiles in 512-bit registers (the same multiply-adds, so the same
// bits): a register holds two keys' 8 lanes against the query's 8 lanes
// twice over, or 16 columns of the values.
LR_BEGIN_AVX512VNNI
namespace avx512 {
namespace {

// [lo | hi]; the high half of v. (The masked forms: GCC 12 warns of the
// undefined source the unmasked ones pass.)
inline __m512 pair(__m256 lo, __m256 hi) {
  const __m512d l = _mm512_castpd256_pd512(_mm256_castps_pd(lo));
  return _mm512_castpd_ps(_mm512_mask_insertf64x4(l, 0xff, l, _mm256_castps_pd(hi), 1));
}
// [q[0..8) | q[0..8)]: a broadcast load (pair(x, x) would take a shuffle;
// the masked form: GCC 12 warns of the other's undefined source).
inline __m512 twice(const float* q) {
  return _mm512_castpd_ps(
      _mm512_maskz_broadcast_f64x4(__mmask8(0xff), _mm256_castps_pd(_mm256_loadu_ps(q))));
}
template <int I>
inline __m256 half(__m512 v) {
  return _mm256_castpd_ps(
      _mm512_mask_extractf64x4_pd(_mm256_setzero_pd(), 0xf, _mm512_castps_pd(v), I));
}

// Elements [c, c + 8) of rows k0 and k1 as [k0 | k1]; the block types'
// times scale [k0's | k1's] (pair_scale's), their codes widened 16 at a time.
inline __m512 row16(const float* k0, const float* k1, int c, __m512) {
  return pair(row8(k0, c), row8(k1, c));
}
inline __m512 row16(const uint16_t* k0, const uint16_t* k1, int c, __m512) {
  const __m256i h = _mm256_inserti128_si256(
      _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(k0 + c))),
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(k1 + c)), 1);
  return _mm512_maskz_cvtph_ps(__mmask16(0xffff), h);
}
inline __m512 row16(const Q8Block* k0, const Q8Block* k1, int c, __m512 scale) {
  const auto* b0 = reinterpret_cast<const long long*>(k0[c / 32].qs + c % 32);
  const auto* b1 = reinterpret_cast<const long long*>(k1[c / 32].qs + c % 32);
  long long x0, x1;
  std::memcpy(&x0, b0, 8);
  std::memcpy(&x1, b1, 8);
  const __m512i q = _mm512_maskz_cvtepi8_epi32(__mmask16(0xffff), _mm_set_epi64x(x1, x0));
  return _mm512_mul_ps(_mm512_maskz_cvtepi32_ps(__mmask16(0xffff), q), scale);
}
inline __m512 row16(const Q4Block* k0, const Q4Block* k1, int c, __m512 scale) {
  const int o = c % 32;
  long long x0, x1;
  std::memcpy(&x0, k0[c / 32].qs + (o & 15), 8);
  std::memcpy(&x1, k1[c / 32].qs + (o & 15), 8);
  const __m128i q = q4_codes(_mm_set_epi64x(x1, x0), o);
  const __m512 v = _mm512_sub_ps(
      _mm512_maskz_cvtepi32_ps(__mmask16(0xffff), _mm512_maskz_cvtepu8_epi32(__mmask16(0xffff), q)),
      _mm512_set1_ps(8.f));
  return _mm512_mul_ps(v, scale);
}
template <typename E>
inline __m512 pair_scale(const E* k0, const E* k1, int c0) {
  return pair(block_scale(k0, c0), block_scale(k1, c0));
}

template <int R, typename E>
void scores_of(int r0, const float* const* qr, int d, const E* K, int64_t stride, int nb,
               float scale, float* s) {
  const float* const* q = qr + r0;
  const __m128 sc = _mm_set1_ps(scale);
  for (int b = 0; b < nb; b += 4) {
    const E* k = K + b * stride;
    __m512 a[R][2];
    for (int r = 0; r < R; ++r) a[r][0] = a[r][1] = _mm512_setzero_ps();
    for (int c0 = 0; c0 < d; c0 += 32) {  // blocks of 32 columns: one scale a key
      const __m512 s01 = pair_scale(k, k + stride, c0),
                   s23 = pair_scale(k + 2 * stride, k + 3 * stride, c0);
      for (int c = c0; c < std::min(d, c0 + 32); c += 8) {
        const __m512 k01 = row16(k, k + stride, c, s01);
        const __m512 k23 = row16(k + 2 * stride, k + 3 * stride, c, s23);
        for (int r = 0; r < R; ++r) {
          const __m512 qv = twice(q[r] + c);
          a[r][0] = _mm512_fmadd_ps(k01, qv, a[r][0]);
          a[r][1] = _mm512_fmadd_ps(k23, qv, a[r][1]);
        }
      }
    }
    for (int r = 0; r < R; ++r)
      _mm_storeu_ps(s + (r0 + r) * kB + b, _mm_mul_ps(hsum4(half<0>(a[r][0]), half<1>(a[r][0]),
                                                            half<0>(a[r][1]), half<1>(a[r][1])),
                                                      sc));
  }
}

template <typename E>
constexpr ScoresFn<E> kScores[] = {nullptr,         scores_of<1, E>, scores_of<2, E>,
                                   scores_of<3, E>, scores_of<4, E>, scores_of<5, E>,
                                   scores_of<6, E>, scores_of<7, E>, scores_of<8, E>};

}  // namespace

#define LR_TILE_BITS 512
#include "backend/cpu/kernels/attention_tiles_isa.h"
#undef LR_TILE_BITS

template <typename E>
void block_scores(const float* const* q, int R, int d, const E* K, int64_t stride, int nb,
                  float scale, float* s) {
  // 8 rows a pass (16 accumulators of 32 registers): a group of 7 or 8
  // query heads in one pass over its keys (Qwen2.5's 0.5B and 7B: 7).
  by_rows(kScores<E>, 8, R, q, d, K, stride, nb, scale, s);
}
template <typename E>
void block_values(float* const* acc, const float* c, const float* const* w, int R, int d,
                  const E* V, int64_t stride, int nb) {
  const int col = values_by_width(acc, c, w, R, d, V, stride, nb);
  if (col < d) by_rows(cpu::kValues<1, E>, 6, R, acc, c, w, V, stride, nb, col);  // 8 columns
}

}  // namespace avx512
LR_END_AVX512VNNI

namespace {

// A tile of query row-heads (a row's query heads one after another, at most
// kCausalRowHeads) and their online-softmax state.
struct RowTile {
  int R = 0;
  const float* q[kCausalRowHeads];
  float* acc[kCausalRowHeads];  // [head_dim] each
  float* m[kCausalRowHeads];
  float* l[kCausalRowHeads];
  const QuantQuery* qq = nullptr;  // the rows quantized, for q8_0 and q4_0 keys
};

template <typename EK>
constexpr bool kQuantKeys = std::is_same_v<EK, Q8Block> || std::is_same_v<EK, Q4Block>;

// The online-softmax step of every row-head of the tile over one block of
// 32 keys and values (rows of f32, f16 or q8_0/q4_0 blocks, k_stride and
// v_stride elements apart; d a multiple of 8): the bits attend_partial's
// block gives each row-head over f32 rows holding the same values.
template <typename EK, typename EV>
void tile_block(RowTile& t, int d, const EK* K, int64_t k_stride, const EV* V, int64_t v_stride,
                float scale) {
  LR_ASSERT(t.R <= kCausalRowHeads && d % 8 == 0);
  alignas(32) float s[kCausalRowHeads * kB];  // row-head r's scores, then weights, at s + r * kB
  const float* w[kCausalRowHeads];
  float c[kCausalRowHeads];
  const bool wide = kernel_isa() == Isa::Avx512Vnni;
  if constexpr (kQuantKeys<EK>) {  // in integers (quant_scores.h)
    quant_scores(t.qq, t.R, d, K, k_stride, kB, scale, s, kB);
  } else if (wide) {
    avx512::block_scores(t.q, t.R, d, K, k_stride, kB, scale, s);
  } else {
    block_scores(t.q, t.R, d, K, k_stride, kB, scale, s);
  }
  for (int r = 0; r < t.R; ++r) {
    w[r] = s + r * kB;
    c[r] = block_exp(s + r * kB, kB, *t.m[r], *t.l[r]);
  }
  int r = 0;
  for (; r + 8 <= t.R; r += 8) {  // the weights' sums, 8 row-heads at a time
    alignas(32) float sum[8];
    _mm256_store_ps(sum, sums8_in_order(s + r * kB, kB, kB));
    for (int i = 0; i < 8; ++i) *t.l[r + i] += sum[i];
  }
  for (; r < t.R; ++r) {
    float total = 0.f;
    for (int b = 0; b < kB; ++b) total += s[r * kB + b];
    *t.l[r] += total;
  }
  if (wide) {
    avx512::block_values(t.acc, c, w, t.R, d, V, v_stride, kB);
  } else {
    block_values(t.acc, c, w, t.R, d, V, v_stride, kB);
  }
}

}  // namespace

void scores_tile(const float* q, int g, int d, const float* K, int64_t stride, int nb, float scale,
                 float* s, int64_t lds) {
  for (int h = 0; h < g; ++h) {
    const float* qh = q + int64_t(h) * d;
    float* sh = s + h * lds;
    if (d % 8 == 0) {
      scores_block(qh, d, K, stride, 0, nb, scale, sh);
    } else {
      for (int b = 0; b < nb; ++b) sh[b] = dot(qh, K + b * stride, d) * scale;
    }
  }
}

void softmax_update(int g, int d, float* s, int64_t lds, int nb, const float* V, int64_t stride,
                    float* m, float* l, float* acc) {
  for (int h = 0; h < g; ++h) {
    float* sh = s + h * lds;
    float* ah = acc + int64_t(h) * d;
    const float c = block_weights(sh, nb, m[h], l[h]);
    if (d == 64) accumulate_block<64>(ah, c, sh, V, stride, 0, nb);
    else if (d == 128) accumulate_block<128>(ah, c, sh, V, stride, 0, nb);
    else accumulate_block_any(ah, d, c, sh, V, stride, 0, nb);
  }
}

namespace {

// One block of nb keys and values for g heads: scores, then the online
// softmax step, kMaxG heads at a time.
void heads_block(const float* q, int g, int d, const float* K, const float* V, int64_t stride,
                 int nb, float scale, float* m, float* l, float* acc) {
  alignas(32) float s[kMaxG * kB];
  for (int h0 = 0; h0 < g; h0 += kMaxG) {
    const int gg = std::min(kMaxG, g - h0);
    scores_tile(q + int64_t(h0) * d, gg, d, K, stride, nb, scale, s, kB);
    softmax_update(gg, d, s, kB, nb, V, stride, m + h0, l + h0, acc + int64_t(h0) * d);
  }
}

}  // namespace

namespace {

// Whether a block of nb keys goes through a tile: whole, head_dim a multiple
// of 8, the group within a tile.
bool tiled_block(int g, int d, int nb) {
  return nb == kB && d % 8 == 0 && g <= kCausalRowHeads;
}

}  // namespace

template <typename EK, typename EV>
void attend_tiles(const float* q, int64_t q_stride, int n, int g, int d, const EK* K,
                  int64_t k_stride, const EV* V, int64_t v_stride, int64_t nk, float scale,
                  float* m, float* l, float* acc, int64_t ml_stride) {
  LR_ASSERT(attend_tile_ok(g, d) && nk % kB == 0);
  const int T = causal_tile_rows(g);
  thread_local QuantQueries qq;
  for (int t0 = 0; t0 < n; t0 += T) {
    RowTile tile;
    const int rows = std::min(T, n - t0);
    tile.R = rows * g;
    if constexpr (kQuantKeys<EK>) {
      qq.reset(tile.R, d);
      tile.qq = qq.rows();
    }
    for (int t = t0; t < t0 + rows; ++t)
      for (int h = 0; h < g; ++h) {
        const int r = (t - t0) * g + h;
        tile.q[r] = q + t * q_stride + int64_t(h) * d;
        tile.acc[r] = acc + (t * ml_stride + h) * d;
        tile.m[r] = m + t * ml_stride + h;
        tile.l[r] = l + t * ml_stride + h;
        if constexpr (kQuantKeys<EK>) qq.quantize(r, tile.q[r]);
      }
    for (int64_t jb = 0; jb < nk; jb += kB)
      tile_block(tile, d, K + jb * k_stride, k_stride, V + jb * v_stride, v_stride, scale);
  }
}

// Keys and values of f16, q8_0 or q4_0, in any pairing.
#define LR_ATTEND_TILE(EK, EV)                                                                    \
  template void attend_tiles(const float*, int64_t, int, int, int, const EK*, int64_t, const EV*, \
                             int64_t, int64_t, float, float*, float*, float*, int64_t);
#define LR_ATTEND_TILE_KEYS(EV) \
  LR_ATTEND_TILE(uint16_t, EV) LR_ATTEND_TILE(Q8Block, EV) LR_ATTEND_TILE(Q4Block, EV)
LR_ATTEND_TILE_KEYS(uint16_t)
LR_ATTEND_TILE_KEYS(Q8Block)
LR_ATTEND_TILE_KEYS(Q4Block)
#undef LR_ATTEND_TILE_KEYS
#undef LR_ATTEND_TILE

bool attend_tile_ok(int g, int d) {
  return d % 8 == 0 && g <= kCausalRowHeads;
}

void attend_block(const float* q, int g, int d, const float* K, const float* V, int64_t stride,
                  int nb, float scale, float* m, float* l, float* acc) {
  // A whole block: the g heads as the rows of one tile (attend_causal's
  // kernels, the same bits), each key and value loaded once for them all.
  if (tiled_block(g, d, nb))
    return attend_tiles(q, 0, 1, g, d, K, stride, V, stride, kB, scale, m, l, acc, 0);
  heads_block(q, g, d, K, V, stride, nb, scale, m, l, acc);
}

void attend_block(const float* q, int g, int d, const uint16_t* K, const uint16_t* V,
                  int64_t stride, int nb, float scale, float* m, float* l, float* acc) {
  if (tiled_block(g, d, nb))
    return attend_tiles(q, 0, 1, g, d, K, stride, V, stride, kB, scale, m, l, acc, 0);
  // A part of a block: its rows as f32 (the same values), then the f32 step.
  thread_local std::vector<float> k, v;
  k.resize(size_t(nb) * size_t(d));
  v.resize(k.size());
  for (int b = 0; b < nb; ++b) {
    f16_to_f32_row(K + b * stride, &k[size_t(b) * size_t(d)], d);
    f16_to_f32_row(V + b * stride, &v[size_t(b) * size_t(d)], d);
  }
  heads_block(q, g, d, k.data(), v.data(), d, nb, scale, m, l, acc);
}

namespace {

template <typename E>
void attend_range(const float* q, int g, int d, const E* K, const E* V, int64_t stride, int64_t j0,
                  int64_t j1, float scale, float* m, float* l, float* acc) {
  for (int h = 0; h < g; ++h) {
    m[h] = -INFINITY;
    l[h] = 0.f;
    std::fill_n(acc + int64_t(h) * d, d, 0.f);
  }
  // Keys in blocks of kB: scores of a block, one rescale of the running sum
  // per block (not per key), exponentials 8 at a time, the weighted values
  // summed in registers (head_dim 64 and 128). The group's heads share each
  // block of keys and values while it is in cache.
  for (int64_t jb = j0; jb < j1; jb += kB)
    attend_block(q, g, d, K + jb * stride, V + jb * stride, stride,
                 int(std::min<int64_t>(kB, j1 - jb)), scale, m, l, acc);
}

}  // namespace

void attend_partial(const float* q, int g, int d, const float* K, const float* V, int64_t stride,
                    int64_t j0, int64_t j1, float scale, float* m, float* l, float* acc) {
  attend_range(q, g, d, K, V, stride, j0, j1, scale, m, l, acc);
}

void attend_partial(const float* q, int g, int d, const uint16_t* K, const uint16_t* V,
                    int64_t stride, int64_t j0, int64_t j1, float scale, float* m, float* l,
                    float* acc) {
  attend_range(q, g, d, K, V, stride, j0, j1, scale, m, l, acc);
}

int causal_tile_rows(int g) {
  return std::max(1, kCausalRowHeads / std::max(1, g));
}

namespace {

// A diagonal block of attend_causal's row: f32 rows by heads_block, f16 rows
// as attend_block takes them (their values as f32 rows: the same bits).
void diagonal_block(const float* q, int g, int d, const float* K, const float* V, int64_t stride,
                    int nb, float scale, float* m, float* l, float* acc) {
  heads_block(q, g, d, K, V, stride, nb, scale, m, l, acc);
}
void diagonal_block(const float* q, int g, int d, const uint16_t* K, const uint16_t* V,
                    int64_t stride, int nb, float scale, float* m, float* l, float* acc) {
  attend_block(q, g, d, K, V, stride, nb, scale, m, l, acc);
}

template <typename E>
void causal(const float* q, int64_t q_stride, int n, int64_t n0, int g, int d, const E* K,
            const E* V, int64_t stride, float scale, float* m, float* l, float* acc,
            int64_t ml_stride) {
  auto row_m = [&](int t) { return m + t * ml_stride; };
  auto row_l = [&](int t) { return l + t * ml_stride; };
  auto row_acc = [&](int t) { return acc + t * ml_stride * d; };
  if (d % 8 != 0 || g > kCausalRowHeads) {
    for (int t = 0; t < n; ++t)
      attend_partial(q + t * q_stride, g, d, K, V, stride, 0, n0 + t, scale, row_m(t), row_l(t),
                     row_acc(t));
    return;
  }
  const int T = causal_tile_rows(g);
  if (n > T) {  // tiles of T rows, each a call of its own
    for (int t0 = 0; t0 < n; t0 += T)
      causal(q + t0 * q_stride, q_stride, std::min(T, n - t0), n0 + t0, g, d, K, V, stride, scale,
             row_m(t0), row_l(t0), row_acc(t0), ml_stride);
    return;
  }
  for (int t = 0; t < n; ++t)
    for (int h = 0; h < g; ++h) {
      row_m(t)[h] = -INFINITY;
      row_l(t)[h] = 0.f;
      std::fill_n(row_acc(t) + int64_t(h) * d, d, 0.f);
    }
  // Blocks every row sees whole, for the whole tile at once.
  const int64_t jb0 = n0 / kB * kB;
  attend_tiles(q, q_stride, n, g, d, K, stride, V, stride, jb0, scale, m, l, acc, ml_stride);
  int64_t jb = jb0;
  // The diagonal: blocks some rows see in part (or not at all), row by row
  // as attend_partial computes them.
  for (; jb < n0 + n - 1; jb += kB)
    for (int t = 0; t < n; ++t) {
      const int64_t seen = n0 + t - jb;
      if (seen > 0)
        diagonal_block(q + t * q_stride, g, d, K + jb * stride, V + jb * stride, stride,
                       int(std::min<int64_t>(kB, seen)), scale, row_m(t), row_l(t), row_acc(t));
    }
}

}  // namespace

void attend_causal(const float* q, int64_t q_stride, int n, int64_t n0, int g, int d,
                   const float* K, const float* V, int64_t stride, float scale, float* m, float* l,
                   float* acc, int64_t ml_stride) {
  causal(q, q_stride, n, n0, g, d, K, V, stride, scale, m, l, acc, ml_stride);
}

void attend_causal(const float* q, int64_t q_stride, int n, int64_t n0, int g, int d,
                   const uint16_t* K, const uint16_t* V, int64_t stride, float scale, float* m,
                   float* l, float* acc, int64_t ml_stride) {
  causal(q, q_stride, n, n0, g, d, K, V, stride, scale, m, l, acc, ml_stride);
}

void attend_merge(int n, const float* m, const float* l, int64_t ml_stride, const float* acc,
                  int64_t acc_stride, int d, float* out) {
  float mx = -INFINITY;
  for (int p = 0; p < n; ++p)
    if (l[p * ml_stride] > 0.f) mx = std::max(mx, m[p * ml_stride]);
  std::fill_n(out, d, 0.f);
  float total = 0.f;
  for (int p = 0; p < n; ++p) {
    if (!(l[p * ml_stride] > 0.f)) continue;
    const float w = std::exp(m[p * ml_stride] - mx);
    total += w * l[p * ml_stride];
    axpy(w, acc + p * acc_stride, out, d);
  }
  if (total > 0.f) cpu::scale(1.f / total, out, d);
}

}  // namespace lr::cpu
