#include "backend/cpu/kernels/attention_kernels.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "backend/cpu/kernels/kernels.h"
#include "backend/cpu/kernels/kernels_simd.h"

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
    float bm = -INFINITY;
    for (int b = 0; b < nb; ++b) bm = std::max(bm, sh[b]);
    float c = 1.f;  // rescale of what was accumulated under the old maximum
    if (bm > m[h]) {
      if (l[h] > 0.f) c = std::exp(m[h] - bm);
      l[h] *= c;
      m[h] = bm;
    }
    const __m256 mh = _mm256_set1_ps(m[h]);
    int b = 0;
    for (; b + 8 <= nb; b += 8)
      _mm256_storeu_ps(sh + b, exp_ps(_mm256_sub_ps(_mm256_loadu_ps(sh + b), mh)));
    for (; b < nb; ++b) sh[b] = std::exp(sh[b] - m[h]);
    float sum = 0.f;
    for (b = 0; b < nb; ++b) sum += sh[b];
    l[h] += sum;
    if (d == 64) accumulate_block<64>(ah, c, sh, V, stride, 0, nb);
    else if (d == 128) accumulate_block<128>(ah, c, sh, V, stride, 0, nb);
    else accumulate_block_any(ah, d, c, sh, V, stride, 0, nb);
  }
}

void attend_partial(const float* q, int g, int d, const float* K, const float* V, int64_t stride,
                    int64_t j0, int64_t j1, float scale, float* m, float* l, float* acc) {
  for (int h = 0; h < g; ++h) {
    m[h] = -INFINITY;
    l[h] = 0.f;
    std::fill_n(acc + int64_t(h) * d, d, 0.f);
  }
  // Keys in blocks of kB: scores of a block, one rescale of the running sum
  // per block (not per key), exponentials 8 at a time, the weighted values
  // summed in registers (head_dim 64 and 128). The group's heads share each
  // block of keys and values while it is in cache.
  constexpr int kB = 32, kMaxG = 16;
  alignas(32) float s[kMaxG * kB];
  for (int h0 = 0; h0 < g; h0 += kMaxG) {
    const int gg = std::min(kMaxG, g - h0);
    const float* qg = q + int64_t(h0) * d;
    for (int64_t jb = j0; jb < j1; jb += kB) {
      const int nb = int(std::min<int64_t>(kB, j1 - jb));
      scores_tile(qg, gg, d, K + jb * stride, stride, nb, scale, s, kB);
      softmax_update(gg, d, s, kB, nb, V + jb * stride, stride, m + h0, l + h0, acc + int64_t(h0) * d);
    }
  }
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
