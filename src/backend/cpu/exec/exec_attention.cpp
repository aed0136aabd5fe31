// Attention steps of the CPU executor, over the session's cache: the dense
// cache, the legacy latent cache's rebuilt history, or compressed key
// streams (whose own call is staged exactly).
#include <algorithm>
#include <cmath>

#include "backend/cpu/kernels/attention_kernels.h"
#include "backend/cpu/exec/executor.h"
#include "backend/cpu/kernels/kernels.h"
#include "backend/cpu/kernels/key_kernels.h"
#include "core/error.h"

namespace lr::cpu {

namespace {

// Folds the partial (m2, l2, acc2) of g heads into (m, l, acc).
void combine(int g, int d, float* m, float* l, float* acc, const float* m2, const float* l2,
             const float* acc2) {
  for (int h = 0; h < g; ++h) {
    if (!(l2[h] > 0)) continue;
    const float mx = l[h] > 0 ? std::max(m[h], m2[h]) : m2[h];
    const float a = l[h] > 0 ? std::exp(m[h] - mx) : 0.f, b = std::exp(m2[h] - mx);
    for (int i = 0; i < d; ++i) acc[h * d + i] = acc[h * d + i] * a + acc2[h * d + i] * b;
    l[h] = l[h] * a + l2[h] * b;
    m[h] = mx;
  }
}

}  // namespace

// Online-softmax partials per (token, KV head, chunk): each unit reads its
// keys and values once for all query heads of the group. One token: the
// positions of every KV head are cut into one chunk per thread
// (flash-decoding; compressed keys in chunks of whole blocks). More tokens:
// one chunk, every (token, KV head) an item.
Executor::Fn Executor::attend(const Step& s) {
  LR_ASSERT(!s.rope_append);  // a GPU fold
  return [this, &s](int tid, int nth) {
    const Config& c = s_.c;
    const int g = c.n_heads / c.n_kv_heads, hd = c.head_dim, l = s.layer, C = chunks_;
    const float scale = 1.f / std::sqrt(float(hd));
    const Span sp = split(int64_t(count(s)) * c.n_kv_heads * C, tid, nth);
    for (int64_t u = sp.begin; u < sp.end; ++u) {
      const int t = int(u / (int64_t(c.n_kv_heads) * C)), kvh = int(u / C % c.n_kv_heads),
                chunk = int(u % C);
      const int64_t n = pos(t) + 1;  // positions this token sees
      const size_t at = part(t, chunk, kvh * g);
      float *m = &part_m_[at], *sum = &part_l_[at], *acc = &part_acc_[at * size_t(hd)];
      const float* q = row(Buf::Q, t) + kvh * g * hd;
      if (cache_[size_t(t)]) {
        attend_partial(q, g, hd, cache(t).key(l, kvh), cache(t).value(l, kvh), hd, n * chunk / C,
                       n * (chunk + 1) / C, scale, m, sum, acc);
      } else if (s_.latent) {
        kv::LatentCache& lc = *s_.latent;
        attend_partial(q, g, hd, lc.keys() + kvh * hd, lc.values() + kvh * hd, lc.kv_dim(),
                       n * chunk / C, n * (chunk + 1) / C, scale, m, sum, acc);
      } else if (!s_.streams->staging()) {  // chunks of whole blocks of the compressed keys
        const kv::KeyStream& ks = s_.streams->stream(l, kvh);
        const Span r = split(n, chunk, C, ks.block_tokens());
        attend_keys_partial(ks, s_.streams->values(l, kvh), q, g, r.begin, r.end, scale, m, sum,
                            acc);
      } else {  // the call's own positions exact, the history from the stored form
        kv::StreamCache& sc = *s_.streams;
        const int hist = sc.stage_begin();
        attend_partial(q, g, hd, sc.staged_key(l, kvh), sc.staged_value(l, kvh), hd, 0, n - hist,
                       scale, m, sum, acc);
        if (hist == 0) continue;
        thread_local std::vector<float> m2, l2, acc2;
        m2.resize(size_t(g));
        l2.resize(size_t(g));
        acc2.resize(size_t(g) * size_t(hd));
        attend_keys_partial(sc.stream(l, kvh), sc.values(l, kvh), q, g, 0, hist, scale, m2.data(),
                            l2.data(), acc2.data());
        combine(g, hd, m, sum, acc, m2.data(), l2.data(), acc2.data());
      }
    }
  };
}

// att = the partials merged, per (token, query head).
Executor::Fn Executor::merge(const Step& s) {
  return [this, &s](int tid, int nth) {
    const Config& c = s_.c;
    const Span sp = split(int64_t(count(s)) * c.n_heads, tid, nth);
    for (int64_t u = sp.begin; u < sp.end; ++u) {
      const int t = int(u / c.n_heads), h = int(u % c.n_heads);
      attend_merge(chunks_, &part_m_[part(t, 0, h)], &part_l_[part(t, 0, h)], c.n_heads,
                   &part_acc_[part(t, 0, h) * size_t(c.head_dim)], int64_t(c.n_heads) * c.head_dim,
                   c.head_dim, row(Buf::Att, t) + h * c.head_dim);
    }
  };
}

// Static KV (one token): scores, softmax and the weighted sum of values as
// three steps over a materialized score row per query head.
Executor::Fn Executor::static_attention(const Step& s) {
  LR_ASSERT(s_.dense);
  return [this, &s](int tid, int nth) {
    LR_ASSERT(count(s) == 1);
    const Config& c = s_.c;
    const int hd = c.head_dim, g = c.n_heads / c.n_kv_heads, l = s.layer, pos = s_.pos;
    const Span sp = split(c.n_heads, tid, nth);
    for (int64_t h = sp.begin; h < sp.end; ++h) {
      float* sc = &scores_[size_t(h) * size_t(s_.ctx)];
      const int kvh = int(h) / g;
      if (s.op == Op::Scores) {
        const float scale = 1.f / std::sqrt(float(hd));
        for (int j = 0; j <= pos; ++j)
          sc[j] = dot(row(Buf::Q, 0) + h * hd, s_.dense->key(l, kvh) + int64_t(j) * hd, hd) * scale;
      } else if (s.op == Op::Softmax) {
        const float mx = *std::max_element(sc, sc + pos + 1);
        float sum = 0;
        for (int j = 0; j <= pos; ++j) sum += (sc[j] = std::exp(sc[j] - mx));
        for (int j = 0; j <= pos; ++j) sc[j] /= sum;
      } else {
        float* out = row(Buf::Att, 0) + h * hd;
        std::fill_n(out, hd, 0.f);
        for (int j = 0; j <= pos; ++j)
          axpy(sc[j], s_.dense->value(l, kvh) + int64_t(j) * hd, out, hd);
      }
    }
  };
}

// Legacy KV: the latents of the call's tokens (segments of P) join the
// latent cache; Reconstruct rebuilds k (roped) and v of every position
// [0, pos + n) from them, positions split across threads (each thread
// appends the latents of the positions it rebuilds, when it also appends).
Executor::Fn Executor::latent(const Step& s) {
  LR_ASSERT(s_.latent);
  return [this, &s](int tid, int nth) {
    kv::LatentCache& lc = *s_.latent;
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
    matmul(*L.uk, lc.k_latent(l, int(sp.begin)), L.k_rank, K, kv_dim, sp.end - sp.begin, 0,
           L.uk->rows);
    matmul(*L.uv, lc.v_latent(l, int(sp.begin)), L.v_rank, V, kv_dim, sp.end - sp.begin, 0,
           L.uv->rows);
    for (int64_t j = sp.begin; j < sp.end; ++j)
      s_.rope.apply(K + (j - sp.begin) * kv_dim, s_.c.n_kv_heads, s_.c.head_dim, int(j));
  };
}

}  // namespace lr::cpu
