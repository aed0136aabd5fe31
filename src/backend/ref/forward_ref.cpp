// Reference forward pass of a LLaMA-family decoder, written to be read: plain
// loops in f32 (double where it costs nothing), one function per block, no
// threads. It is written independently of the model's plan (model/plan.h),
// with the scalar operations of model/scalar_ops.h; every plan and every
// executor is tested against it.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/backend.h"
#include "backend/ref/ref.h"
#include "core/error.h"
#include "model/scalar_ops.h"

namespace lr {

namespace {

// Y[t, :] = W X[t, :] for every token t. W [out, in], X [n, in], Y [n, out].
void matmul(const Matrix& W, const float* X, float* Y, int n) {
  const float* w = W.f32();
  for (int64_t r = 0; r < W.rows; ++r) {
    const float* wr = w + r * W.cols;
    for (int t = 0; t < n; ++t) {
      const float* x = X + int64_t(t) * W.cols;
      float acc = 0;
#pragma omp simd reduction(+ : acc)
      for (int64_t c = 0; c < W.cols; ++c) acc += wr[c] * x[c];
      Y[int64_t(t) * W.rows + r] = acc;
    }
  }
}

// Pivoted factors' output side (model/weights.h Pivots): C [n, out] from the
// latents T [n, rank]; the pivot rows are the latents, the others U's rows.
void pivoted_out(const Linear& L, const float* T, float* C, int n) {
  const Pivots& p = *L.pivots;
  const int64_t r = L.rank(), out = p.out();
  std::vector<float> others(static_cast<size_t>(n) * size_t(L.u.rows));
  matmul(L.u, T, others.data(), n);
  for (int t = 0; t < n; ++t) {
    size_t next = 0;  // U's rows come in output order
    for (int64_t i = 0; i < out; ++i) {
      const auto k = std::find(p.rows.begin(), p.rows.end(), int32_t(i));
      C[int64_t(t) * out + i] = k != p.rows.end() ? T[int64_t(t) * r + (k - p.rows.begin())]
                                                  : others[size_t(t) * size_t(L.u.rows) + next++];
    }
  }
}

// Y = W X + b for a dense W, Y = U (V X) + b for low-rank factors, and
// Y = W X + U (V X) + b for the residual form.
void linear(const Linear& L, const float* X, float* Y, int n) {
  if (!L.low_rank()) {
    matmul(L.w, X, Y, n);
  } else {
    std::vector<float> t(static_cast<size_t>(n) * size_t(L.rank()));
    matmul(L.v, X, t.data(), n);
    std::vector<float> c(static_cast<size_t>(n) * size_t(L.out_dim()));
    if (L.pivoted())
      pivoted_out(L, t.data(), c.data(), n);
    else
      matmul(L.u, t.data(), c.data(), n);
    if (L.residual()) matmul(L.w, X, Y, n);
    for (size_t i = 0; i < c.size(); ++i) Y[i] = L.residual() ? Y[i] + c[i] : c[i];
  }
  if (L.b.rows == 0) return;
  const int64_t out = L.out_dim();
  for (int i = 0; i < n; ++i)
    for (int64_t r = 0; r < out; ++r) Y[int64_t(i) * out + r] += L.b.f32()[r];
}

class ReferenceBackend final : public Backend {
 public:
  ReferenceBackend(std::shared_ptr<const Weights> w, int ctx) : Backend(std::move(w), ctx) {
    if (weights_->wtype != DType::F32 || weights_->as_stored)
      fail("the reference backend needs F32 weights (loaded as {})", weights_->as_stored ? "stored types" : dtype_name(weights_->wtype));
    const Config& c = weights_->cfg;
    inv_freq_ = scalar::rope_inv_freq(c, 0, ctx);
    inv_freq_swa_ = scalar::rope_inv_freq(c, 1);
    size_t per_layer = size_t(ctx) * size_t(c.kv_dim());
    k_cache_.assign(per_layer * size_t(c.n_layers), 0.f);
    v_cache_.assign(per_layer * size_t(c.n_layers), 0.f);
  }

  const char* name() const override { return "reference"; }

  void forward(const int32_t* tokens, int n, float* logits, bool all_logits) override {
    check_forward_args(tokens, n);
    const Config& c = weights_->cfg;
    std::vector<float> x(size_t(n) * size_t(c.dim));  // [n, dim] residual stream
    for (int t = 0; t < n; ++t) {                     // x = embed_scale * tok_embd[token]
      weights_->tok_embd.row_to_f32(tokens[t], &x[size_t(t) * c.dim]);
      for (int i = 0; i < c.dim; ++i) x[size_t(t) * c.dim + size_t(i)] *= c.embed_scale;
    }
    for (int l = 0; l < c.n_layers; ++l) {
      attention_block(l, x.data(), n);
      mlp_block(l, x.data(), n);
    }
    int first = all_logits ? 0 : n - 1;
    std::vector<float> h(size_t(c.dim));
    for (int t = first; t < n; ++t) {
      scalar::rms_norm(&x[size_t(t) * c.dim], weights_->out_norm.f32(), h.data(), c.dim, c.rms_eps);
      float* row = logits + size_t(t - first) * c.vocab;
      linear(weights_->output, h.data(), row, 1);
      for (int v = 0; v < c.vocab; ++v) row[v] /= c.logit_scale;  // Granite
    }
    n_past_ += n;
  }

 private:
  float* k_at(int layer, int pos) {
    const Config& c = weights_->cfg;
    return &k_cache_[(size_t(layer) * ctx_ + size_t(pos)) * c.kv_dim()];
  }
  float* v_at(int layer, int pos) {
    const Config& c = weights_->cfg;
    return &v_cache_[(size_t(layer) * ctx_ + size_t(pos)) * c.kv_dim()];
  }

  // Each head of a [n, heads * head_dim] rms-normalized by `norm` (q/k
  // norms), or all of it at once (OLMo 2's, whose norm spans every head).
  void head_norms(float* a, int64_t n_heads, const Matrix& norm) const {
    const Config& c = weights_->cfg;
    const int64_t width = c.qk_norm_full ? n_heads * c.head_dim : c.head_dim;
    for (int64_t i = 0; i < n_heads * c.head_dim;
         i += width)  // (rms_norm may write over its input)
      scalar::rms_norm(a + i, norm.f32(), a + i, width, c.rms_eps);
  }

  // h = rms_norm(x) * norm per token, or x itself for a block without a pre-norm (OLMo 2).
  void pre_norm(const float* x, const Matrix& norm, float* h, int n) const {
    const Config& c = weights_->cfg;
    for (int t = 0; t < n; ++t)
      if (c.pre_norms)
        scalar::rms_norm(x + size_t(t) * c.dim, norm.f32(), h + size_t(t) * c.dim, c.dim,
                         c.rms_eps);
      else
        std::copy_n(x + size_t(t) * c.dim, c.dim, h + size_t(t) * c.dim);
  }

  // out = rms_norm(out) * norm, in place, per token (post_norms)
  void post_norm(std::vector<float>& out, const Matrix& norm) const {
    const Config& c = weights_->cfg;
    for (size_t t = 0; t < out.size() / size_t(c.dim); ++t)
      scalar::rms_norm(&out[t * c.dim], norm.f32(), &out[t * c.dim], c.dim, c.rms_eps);
  }

  // x += o( attend( rope(q(h)), rope(k(h)), v(h) ) ),  h = rms_norm(x)
  // (with q/k norms: q, k = rms_norm of each head, before RoPE; with post
  // norms: x += rms_norm(o(...)); a windowed layer attends to its last
  // swa_window positions, roped with its own base)
  void attention_block(int l, float* x, int n) {
    const Config& c = weights_->cfg;
    const Layer& L = weights_->layers[size_t(l)];
    std::vector<float> h(size_t(n) * c.dim), q(size_t(n) * c.q_dim()), k(size_t(n) * c.kv_dim()),
        v(size_t(n) * c.kv_dim()), att(size_t(n) * c.q_dim()), out(size_t(n) * c.dim);
    pre_norm(x, L.attn_norm, h.data(), n);
    linear(L.q, h.data(), q.data(), n);
    linear(L.k, h.data(), k.data(), n);
    linear(L.v, h.data(), v.data(), n);
    for (int t = 0; t < n; ++t) {
      int pos = n_past_ + t;
      if (c.qk_norm) {
        head_norms(&q[size_t(t) * c.q_dim()], c.n_heads, L.q_norm);
        head_norms(&k[size_t(t) * c.kv_dim()], c.n_kv_heads, L.k_norm);
      }
      const std::vector<double>& inv = c.windowed(l) ? inv_freq_swa_ : inv_freq_;
      const double ms = c.windowed(l) ? 1.0 : scalar::rope_mscale(c);
      const bool roped = c.no_rope_layers.empty() || !c.no_rope_layers[size_t(l)];  // SmolLM3
      if (roped) scalar::rope(&q[size_t(t) * c.q_dim()], c.n_heads, c.head_dim, pos, inv, ms);
      if (roped) scalar::rope(&k[size_t(t) * c.kv_dim()], c.n_kv_heads, c.head_dim, pos, inv, ms);
      std::copy_n(&k[size_t(t) * c.kv_dim()], c.kv_dim(), k_at(l, pos));
      std::copy_n(&v[size_t(t) * c.kv_dim()], c.kv_dim(), v_at(l, pos));
    }
    for (int t = 0; t < n; ++t) attend(l, n_past_ + t, &q[size_t(t) * c.q_dim()], &att[size_t(t) * c.q_dim()]);
    linear(L.o, att.data(), out.data(), n);
    if (c.post_norms) post_norm(out, L.attn_post_norm);
    for (size_t i = 0; i < out.size(); ++i) x[i] += c.residual_scale * out[i];
  }

  // Causal grouped-query attention of one query token at `pos` over the cache:
  // the query heads of each KV head's group at once.
  void attend(int l, int pos, const float* q, float* out) {
    const Config& c = weights_->cfg;
    const int group = c.n_heads / c.n_kv_heads;
    const int from = c.windowed(l) ? std::max(0, pos - c.swa_window + 1) : 0;
    for (int kvh = 0; kvh < c.n_kv_heads; ++kvh)
      scalar::attend(q + kvh * group * c.head_dim, group, c.head_dim,
                     k_at(l, from) + kvh * c.head_dim, v_at(l, from) + kvh * c.head_dim, c.kv_dim(),
                     pos + 1 - from, c.attention_scale(), out + kvh * group * c.head_dim);
  }

  // x += down( act(gate(h)) * up(h) ),  h = rms_norm(x)  (act: SiLU or GELU's tanh form)
  void mlp_block(int l, float* x, int n) {
    const Config& c = weights_->cfg;
    const Layer& L = weights_->layers[size_t(l)];
    std::vector<float> h(size_t(n) * c.dim), g(size_t(n) * c.ffn_dim), u(size_t(n) * c.ffn_dim),
        out(size_t(n) * c.dim);
    pre_norm(x, L.ffn_norm, h.data(), n);
    linear(L.gate, h.data(), g.data(), n);
    linear(L.up, h.data(), u.data(), n);
    scalar::gated(c.ffn_act, g.data(), u.data(), int64_t(g.size()));
    linear(L.down, g.data(), out.data(), n);
    if (c.post_norms) post_norm(out, L.ffn_post_norm);
    for (size_t i = 0; i < out.size(); ++i) x[i] += c.residual_scale * out[i];
  }

  std::vector<double> inv_freq_;  // RoPE
  std::vector<double> inv_freq_swa_;  // a windowed layer's
  std::vector<float> k_cache_;  // [n_layers, ctx, kv_dim], post-RoPE keys
  std::vector<float> v_cache_;  // [n_layers, ctx, kv_dim]
};

}  // namespace

std::unique_ptr<Backend> make_reference_backend(std::shared_ptr<const Weights> w,
                                                const BackendOptions& opt) {
  require_dense_cache(opt, "the scalar reference (--ref)");
  return std::make_unique<ReferenceBackend>(std::move(w), opt.ctx);
}

}  // namespace lr
