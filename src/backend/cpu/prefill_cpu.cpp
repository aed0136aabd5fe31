#include "backend/cpu/prefill_cpu.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/attention_kernels.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/key_kernels.h"

namespace lr::cpu {

namespace {
constexpr int kMaxBatch = 512;
}

Prefill::Prefill(Session& s, ActivationObserver* observer) : s_(s), observer_(observer) {
  const Config& c = s.c;
  batch_ = std::min(kMaxBatch, s.kv.ctx);
  size_t b = size_t(batch_);
  x_.resize(b * c.dim);
  h_.resize(b * c.dim);
  q_.resize(b * c.q_dim());
  k_.resize(b * c.kv_dim());
  v_.resize(b * c.kv_dim());
  att_.resize(b * c.q_dim());
  g_.resize(b * c.ffn_dim);
  u_.resize(b * c.ffn_dim);
  scratch_.resize(2 * size_t(s.pool.size()) * size_t(c.n_heads / c.n_kv_heads) * size_t(c.head_dim + 2));
  int64_t max_rank = 0;
  for (const Layer& l : s.w.layers)
    for (const Linear* lin : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down})
      max_rank = std::max(max_rank, lin->rank());
  max_rank = std::max(max_rank, s.w.output.rank());
  lr_tmp_.resize(b * size_t(std::max<int64_t>(max_rank, 1)));
}

// Y = W X for a dense map, Y = U (V X) for low-rank factors; `latent`, when
// given, receives V X [n, rank].
void Prefill::linear(const Linear& L, const float* X, float* Y, int n, float* latent) {
  if (!L.low_rank()) return matmul_rows(L.w, X, Y, n);
  float* t = latent ? latent : lr_tmp_.data();
  matmul_rows(L.v, X, t, n);
  matmul_rows(L.u, t, Y, n);
}

// Y[t, :] = W X[t, :] for t < n, rows split across the pool in blocks of 16
// (the kernels' register tile height).
void Prefill::matmul_rows(const Matrix& W, const float* X, float* Y, int n) {
  const int64_t blocks = (W.rows + 15) / 16;
  s_.pool.parallel_for(blocks, [&](int64_t b0, int64_t b1) {
    matmul(W, X, Y, n, W.rows, b0 * 16, std::min(W.rows, b1 * 16));
  });
}

void Prefill::rms_norm_rows(const float* x, const Matrix& w, float* y, int n) {
  const Config& c = s_.c;
  s_.pool.parallel_for(n, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      cpu::rms_norm(x + t * c.dim, w.f32(), y + t * c.dim, c.dim, c.rms_eps);
  });
}

void Prefill::observe(int layer, Site site, const float* X, int n, int dim) {
  if (observer_) observer_->observe(layer, site, X, n, dim);
}

void Prefill::run(const int32_t* tokens, int n) {
  const Config& c = s_.c;
  for (int t = 0; t < n; ++t) s_.w.tok_embd.row_to_f32(tokens[t], &x_[size_t(t) * c.dim]);
  for (int l = 0; l < c.n_layers; ++l) {
    attention_block(l, n);
    mlp_block(l, n);
  }
}

void Prefill::attention_block(int l, int n) {
  const Config& c = s_.c;
  const Layer& L = s_.w.layers[size_t(l)];
  KvCache& kv = s_.kv;
  rms_norm_rows(x_.data(), L.attn_norm, h_.data(), n);
  observe(l, Site::AttnIn, h_.data(), n, c.dim);
  linear(L.q, h_.data(), q_.data(), n);
  if (kv.latent) {
    // Legacy: the latents go into the cache, the history is rebuilt from them.
    linear(L.k, h_.data(), k_.data(), n, kv.pk_at(l, s_.pos));
    linear(L.v, h_.data(), v_.data(), n, kv.pv_at(l, s_.pos));
    s_.pool.parallel_for(s_.pos + n, [&](int64_t j0, int64_t j1) { reconstruct_history(s_, l, j0, j1); });
  } else {
    linear(L.k, h_.data(), k_.data(), n);
    linear(L.v, h_.data(), v_.data(), n);
  }
  for (int t = 0; t < n; ++t) {
    int pos = s_.pos + t;
    s_.rope.apply(&q_[size_t(t) * c.q_dim()], c.n_heads, c.head_dim, pos);
    if (kv.latent) continue;
    s_.rope.apply(&k_[size_t(t) * c.kv_dim()], c.n_kv_heads, c.head_dim, pos);
    kv.append(l, pos, &k_[size_t(t) * c.kv_dim()], &v_[size_t(t) * c.kv_dim()]);
  }
  if (!kv.latent) observe(l, Site::Keys, k_.data(), n, c.kv_dim());
  observe(l, Site::Queries, q_.data(), n, c.q_dim());
  if (kv.streamed && kv.stream(l, 0).wants_queries()) {
    // SVDq's query metric: each KV head's stream sees the roped queries of its group.
    const int g = c.n_heads / c.n_kv_heads, gd = g * c.head_dim;
    std::vector<float> rows(size_t(n) * size_t(gd));
    for (int h = 0; h < c.n_kv_heads; ++h) {
      for (int t = 0; t < n; ++t)
        std::copy_n(&q_[size_t(t) * c.q_dim() + size_t(h) * gd], gd, &rows[size_t(t) * gd]);
      kv.stream(l, h).add_queries(rows.data(), int64_t(n) * g, c.head_dim, s_.pos, g);
    }
  }
  attend(l, n);
  observe(l, Site::AttnOut, att_.data(), n, c.q_dim());
  linear(L.o, att_.data(), h_.data(), n);
  cpu::add(h_.data(), x_.data(), int64_t(n) * c.dim);
}

// Causal GQA attention, blocked: every (token, KV head) item runs the
// decode kernel's online softmax over keys [0, pos] in blocks of 32, for the
// query heads of the group at once (each key and value read once for all of
// them). Items are split across threads.
void Prefill::attend(int l, int n) {
  const Config& c = s_.c;
  KvCache& kv = s_.kv;
  const int g = c.n_heads / c.n_kv_heads, hd = c.head_dim;
  const float scale = 1.f / std::sqrt(float(hd));
  const int64_t items = int64_t(n) * c.n_kv_heads;
  // Streamed caches: positions before this call come from the compressed
  // stream, the call's own from the exact staging; the two partial results
  // are merged.
  const int hist = kv.streamed ? kv.stage_begin : 0;
  s_.pool.run([&](int tid, int nth) {
    float* acc = &scratch_[size_t(tid) * 2 * size_t(g) * (size_t(hd) + 2)];
    float* m = acc + 2 * size_t(g) * hd;
    float* sum = m + 2 * g;
    const Span sp = split(items, tid, nth);
    for (int64_t it = sp.begin; it < sp.end; ++it) {
      const int t = int(it / c.n_kv_heads), kvh = int(it % c.n_kv_heads), pos = s_.pos + t;
      const size_t q0 = size_t(t) * c.q_dim() + size_t(kvh) * g * hd;
      attend_partial(&q_[q0], g, hd, kv.key(l, kvh), kv.value(l, kvh), kv.stride(), 0,
                     pos + 1 - hist, scale, m, sum, acc);
      float* out = &att_[q0];
      if (hist == 0) {
        for (int h = 0; h < g; ++h)
          for (int i = 0; i < hd; ++i) out[size_t(h) * hd + i] = acc[h * hd + i] / sum[h];
        continue;
      }
      attend_keys_partial(kv.stream(l, kvh), kv.value16(l, kvh), &q_[q0], g, 0, hist, scale,
                              m + g, sum + g, acc + size_t(g) * hd);
      for (int h = 0; h < g; ++h)
        attend_merge(2, m + h, sum + h, g, acc + size_t(h) * hd, int64_t(g) * hd, hd,
                     out + size_t(h) * hd);
    }
  });
}

void Prefill::mlp_block(int l, int n) {
  const Config& c = s_.c;
  const Layer& L = s_.w.layers[size_t(l)];
  rms_norm_rows(x_.data(), L.ffn_norm, h_.data(), n);
  observe(l, Site::MlpIn, h_.data(), n, c.dim);
  linear(L.gate, h_.data(), g_.data(), n);
  linear(L.up, h_.data(), u_.data(), n);
  cpu::silu_mul(g_.data(), u_.data(), int64_t(n) * c.ffn_dim);
  observe(l, Site::MlpMid, g_.data(), n, c.ffn_dim);
  linear(L.down, g_.data(), h_.data(), n);
  cpu::add(h_.data(), x_.data(), int64_t(n) * c.dim);
}

void Prefill::logits(int first, int count, float* out) {
  const Config& c = s_.c;
  rms_norm_rows(&x_[size_t(first) * c.dim], s_.w.out_norm, h_.data(), count);
  linear(s_.w.output, h_.data(), out, count);
}

}  // namespace lr::cpu
