// The research rungs' own steps (model/plan_transforms.h: the ablation's
// baselines, which the product plan never holds): static KV's scores,
// softmax and weighted sum over a materialized score row, and legacy KV's
// history rebuilt from latents each step. The bench's ablation runs them;
// nothing in the product path does.
#include <algorithm>
#include <cmath>

#include "backend/cpu/exec/executor.h"
#include "backend/cpu/kernels/kernels.h"
#include "core/error.h"

namespace lr::cpu {

// Static KV (one token): scores, softmax and the weighted sum of values as
// three steps over a materialized score row per query head.
Executor::Fn Executor::static_attention(const Step& s) {
  LR_ASSERT(s_.cache && s_.cache->dense());
  return [this, &s](int tid, int nth) {
    LR_ASSERT(count(s) == 1);
    const kv::DenseCache& dc = *s_.cache->dense();
    const Config& c = s_.c;
    const int hd = c.head_dim, g = c.n_heads / c.n_kv_heads, l = s.layer, pos = s_.pos;
    const Span sp = split(c.n_heads, tid, nth);
    for (int64_t h = sp.begin; h < sp.end; ++h) {
      float* sc = &scores_[size_t(h) * size_t(s_.ctx)];
      const int kvh = int(h) / g;
      if (s.op == Op::Scores) {
        const int from = s.window ? std::max(0, pos - s.window + 1) : 0;  // outside: weight 0
        for (int j = 0; j <= pos; ++j)
          sc[j] =
              j < from ? -INFINITY : dot(row(Buf::Q, 0) + h * hd, dc.key(l, kvh, j), hd) * s.scale;
      } else if (s.op == Op::Softmax) {
        const float mx = *std::max_element(sc, sc + pos + 1);
        float sum = 0;
        for (int j = 0; j <= pos; ++j) sum += (sc[j] = std::exp(sc[j] - mx));
        for (int j = 0; j <= pos; ++j) sc[j] /= sum;
      } else {
        float* out = row(Buf::Att, 0) + h * hd;
        std::fill_n(out, hd, 0.f);
        // (a position outside a window has weight 0; a ring's slot for it holds another's value)
        for (int j = 0; j <= pos; ++j) axpy(sc[j], dc.value(l, kvh, j), out, hd);
      }
    }
  };
}

// Legacy KV: the latents of the call's tokens (segments of P) join the
// latent cache; Reconstruct rebuilds k (roped) and v of every position
// [0, pos + n) from them, positions split across threads (each thread
// appends the latents of the positions it rebuilds, when it also appends).
Executor::Fn Executor::latent(const Step& s) {
  LR_ASSERT(s_.cache && s_.cache->latent());
  return [this, &s](int tid, int nth) {
    kv::LatentCache& lc = *s_.cache->latent();
    const int l = s.layer, n = count(s), pos = s_.pos, kv_dim = lc.kv_dim();
    const Step::Latent& L = s.latent;
    auto append = [&](int64_t j0, int64_t j1) {
      for (int64_t j = std::max<int64_t>(j0, pos); j < std::min<int64_t>(j1, pos + n); ++j) {
        const float* p = row(Buf::P, int(j - pos));
        std::copy_n(p + L.k_off, L.k_rank, lc.k_latent(l, int(j)));
        std::copy_n(p + L.v_off, L.v_rank, lc.v_latent(l, int(j)));
      }
    };
    if (s.op == Op::LatentAppend) {
      const Span sp = split(n, tid, nth);
      return append(pos + sp.begin, pos + sp.end);
    }
    const Span sp = split(pos + n, tid, nth);
    if (L.append) append(sp.begin, sp.end);
    if (sp.end <= sp.begin) return;
    // The latent rows of a layer are consecutive: a matrix of j1 - j0 tokens.
    float* K = lc.keys() + sp.begin * kv_dim;
    float* V = lc.values() + sp.begin * kv_dim;
    matmul(*L.uk, panels_of(*L.uk), lc.k_latent(l, int(sp.begin)), L.k_rank, K, kv_dim,
           sp.end - sp.begin, 0, L.uk->rows);
    matmul(*L.uv, panels_of(*L.uv), lc.v_latent(l, int(sp.begin)), L.v_rank, V, kv_dim,
           sp.end - sp.begin, 0, L.uv->rows);
    for (int64_t j = sp.begin; j < sp.end; ++j)
      s_.rope.apply(K + (j - sp.begin) * kv_dim, s_.c.n_kv_heads, s_.c.head_dim, int(j));
  };
}

}  // namespace lr::cpu
