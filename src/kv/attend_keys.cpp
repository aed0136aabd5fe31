#include "kv/attend_keys.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/attention_kernels.h"
#include "backend/cpu/kernels_simd.h"
#include "core/error.h"
#include "core/half.h"

namespace lr::kv {

namespace {

using cpu::detail::hmax;
using cpu::detail::load_f16x8;
using cpu::detail::widen_f16;

// acc_h = acc_h * c_h + sum_b p_h[b] V[b] for NH <= 3 heads, values read as
// f16 straight into registers, 32 dimensions (12 accumulators) at a time.
template <int NH>
void accumulate_f16(float* acc, int d, const float* c, const float* p, int64_t lds,
                    const uint16_t* V, int nb) {
  for (int d0 = 0; d0 < d; d0 += 32) {
    __m256 a[NH][4];
    for (int h = 0; h < NH; ++h)
      for (int k = 0; k < 4; ++k)
        a[h][k] = _mm256_mul_ps(_mm256_loadu_ps(acc + h * d + d0 + 8 * k), _mm256_set1_ps(c[h]));
    for (int b = 0; b < nb; ++b) {
      const uint16_t* v = V + int64_t(b) * d + d0;
      __m256 vk[4];
      for (int k = 0; k < 4; ++k)
        vk[k] = load_f16x8(v + 8 * k);
      for (int h = 0; h < NH; ++h) {
        const __m256 pb = _mm256_set1_ps(p[h * lds + b]);
        for (int k = 0; k < 4; ++k) a[h][k] = _mm256_fmadd_ps(pb, vk[k], a[h][k]);
      }
    }
    for (int h = 0; h < NH; ++h)
      for (int k = 0; k < 4; ++k) _mm256_storeu_ps(acc + h * d + d0 + 8 * k, a[h][k]);
  }
}

// softmax_update with f16 values (head_dim a multiple of 32).
void softmax_update_f16(int g, int d, float* s, int64_t lds, int nb, const uint16_t* V, float* m,
                        float* l, float* acc) {
  using cpu::detail::exp_ps;
  float c[3];
  for (int h0 = 0; h0 < g; h0 += 3) {
    const int nh = std::min(3, g - h0);
    for (int i = 0; i < nh; ++i) {
      const int h = h0 + i;
      float* sh = s + h * lds;
      __m256 mx = _mm256_set1_ps(-INFINITY);
      int b = 0;
      for (; b + 8 <= nb; b += 8) mx = _mm256_max_ps(mx, _mm256_loadu_ps(sh + b));
      float bm = hmax(mx);
      for (; b < nb; ++b) bm = std::max(bm, sh[b]);
      c[i] = 1.f;  // rescale of what was accumulated under the old maximum
      if (bm > m[h]) {
        if (l[h] > 0.f) c[i] = std::exp(m[h] - bm);
        l[h] *= c[i];
        m[h] = bm;
      }
      const __m256 mh = _mm256_set1_ps(m[h]);
      __m256 sum = _mm256_setzero_ps();
      for (b = 0; b + 8 <= nb; b += 8) {
        const __m256 e = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(sh + b), mh));
        _mm256_storeu_ps(sh + b, e);
        sum = _mm256_add_ps(sum, e);
      }
      alignas(32) float part[8];
      _mm256_store_ps(part, sum);
      float total = 0.f;
      for (float x : part) total += x;
      for (; b < nb; ++b) total += (sh[b] = std::exp(sh[b] - m[h]));
      l[h] += total;
    }
    float* ah = acc + int64_t(h0) * d;
    const float* sh = s + h0 * lds;
    switch (nh) {
      case 1: accumulate_f16<1>(ah, d, c, sh, lds, V, nb); break;
      case 2: accumulate_f16<2>(ah, d, c, sh, lds, V, nb); break;
      default: accumulate_f16<3>(ah, d, c, sh, lds, V, nb); break;
    }
  }
}

}  // namespace

void attend_keys_partial(const KeyStream& ks, const uint16_t* V, const float* q, int g, int64_t j0,
                         int64_t j1, float scale, float* m, float* l, float* acc) {
  const int d = ks.head_dim();
  for (int h = 0; h < g; ++h) {
    m[h] = -INFINITY;
    l[h] = 0.f;
    std::fill_n(acc + int64_t(h) * d, d, 0.f);
  }
  if (j1 <= j0) return;
  const bool latent = ks.type() == KeyType::Svdq || ks.type() == KeyType::Kivi2;
  const int T = latent ? std::max(32, ks.block_tokens()) / ks.block_tokens() * ks.block_tokens() : 32;
  // Per-thread scratch: prepared queries, scores, a decoded tile of keys and values.
  thread_local std::vector<float> prep, s, kt, vt;
  prep.resize(size_t(g) * size_t(ks.prep_floats()));
  s.resize(size_t(g) * size_t(T));
  kt.resize(size_t(T) * size_t(d));
  vt.resize(size_t(T) * size_t(d));
  if (latent) ks.prepare(q, g, scale, prep.data());
  for (int64_t jb = j0; jb < j1;) {
    const int64_t te = std::min(j1, (jb / T + 1) * T);
    const int nb = int(te - jb);
    if (latent && jb < ks.compressed()) {
      ks.scores(prep.data(), g, jb, std::min(te, ks.compressed()), s.data(), T);
      if (te > ks.compressed()) {  // a tile across the end of the blocks (block length < 32)
        const int64_t c = ks.compressed();
        ks.decode_rows(c, te, kt.data());
        cpu::scores_tile(q, g, d, kt.data(), d, int(te - c), scale, &s[size_t(c - jb)], T);
      }
    } else {
      ks.decode_rows(jb, te, kt.data());
      cpu::scores_tile(q, g, d, kt.data(), d, nb, scale, s.data(), T);
    }
    if (d % 32 == 0) {
      softmax_update_f16(g, d, s.data(), T, nb, V + jb * d, m, l, acc);
    } else {
      widen_f16(V + jb * d, int64_t(nb) * d, vt.data());
      cpu::softmax_update(g, d, s.data(), T, nb, vt.data(), d, m, l, acc);
    }
    jb = te;
  }
}

void attend_keys_reference(const KeyStream& ks, const uint16_t* V, const float* q, int g,
                           int64_t j0, int64_t j1, float scale, float* out) {
  const int d = ks.head_dim();
  std::vector<float> k(static_cast<size_t>(d));
  std::vector<double> sc(size_t(j1 - j0));
  for (int h = 0; h < g; ++h) {
    const float* qh = q + int64_t(h) * d;
    double mx = -INFINITY;
    for (int64_t j = j0; j < j1; ++j) {
      ks.reconstruct(j, k.data());
      double dot = 0;
      for (int i = 0; i < d; ++i) dot += double(qh[i]) * double(k[size_t(i)]);
      sc[size_t(j - j0)] = dot * scale;
      mx = std::max(mx, sc[size_t(j - j0)]);
    }
    std::vector<double> o(size_t(d), 0.0);
    double sum = 0;
    for (int64_t j = j0; j < j1; ++j) {
      const double w = std::exp(sc[size_t(j - j0)] - mx);
      sum += w;
      for (int i = 0; i < d; ++i) o[size_t(i)] += w * double(f16_to_f32(V[j * d + i]));
    }
    for (int i = 0; i < d; ++i) out[int64_t(h) * d + i] = float(o[size_t(i)] / sum);
  }
}

}  // namespace lr::kv
