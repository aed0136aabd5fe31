// A plan (model/plan.h) executed in plain scalar loops: the slow twin of
// the fast executors. It runs exactly the steps they run (the same buffers,
// offsets, jobs, folds and cache layouts), each as the obvious loop over
// model/scalar_ops.h, so tests check every plan of every target against the
// independent reference forward pass on any machine
// (tests/model/test_plan.cpp, tests/model/test_cuda_plan.cpp); the fast
// executors' tests then only have their kernels and splits left to check.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/backend.h"
#include "backend/ref/ref.h"
#include "core/error.h"
#include "model/plan_transforms.h"
#include "model/scalar_ops.h"

namespace lr {

namespace {

class ScalarPlan final : public Backend {
 public:
  ScalarPlan(std::shared_ptr<const Weights> w, const BackendOptions& opt, Target target)
      : Backend(w, opt.ctx),
        decode_(derive(*w, {target}, opt.exec)),
        prefill_(derive(*w, {target}, prefill_options(opt.exec))),
        inv_freq_{scalar::rope_inv_freq(w->cfg, 0, opt.ctx), scalar::rope_inv_freq(w->cfg, 1),
                  scalar::rope_inv_freq(w->cfg, 2)} {
    const Config& c = w->cfg;
    const size_t L = size_t(c.n_layers), T = size_t(ctx_), kv = size_t(c.kv_dim());
    k_.assign(L * T * kv, 0.f);
    v_.assign(L * T * kv, 0.f);
    const int64_t kl = std::max(decode_.k_latent, prefill_.k_latent),
                  vl = std::max(decode_.v_latent, prefill_.v_latent);
    lk_.assign(L * T * size_t(kl), 0.f);
    lv_.assign(L * T * size_t(vl), 0.f);
    k_latent_ = kl;
    v_latent_ = vl;
    k_all_.assign(T * kv, 0.f);
    v_all_.assign(T * kv, 0.f);
  }
  const char* name() const override { return "scalar-plan"; }

  void forward(const int32_t* tokens, int n, float* logits, bool all_logits) override {
    check_forward_args(tokens, n);
    const Config& c = weights_->cfg;
    const Plan& p = n == 1 ? decode_ : prefill_;
    for (int b = 1; b <= int(Buf::Logits); ++b) {
      width_[b] = p.width(Buf(b), c);
      buf_[b].assign(size_t(n) * size_t(width_[b]), 0.f);
    }
    legacy_ = p.kv == KvMode::Legacy;
    for (const Step& s : p.steps) run(s, tokens, n);
    const float* out = buf_[int(Buf::Logits)].data();
    if (all_logits)
      std::copy_n(out, size_t(n) * size_t(c.vocab), logits);
    else
      std::copy_n(out + size_t(n - 1) * size_t(c.vocab), size_t(c.vocab), logits);
    n_past_ += n;
  }

 private:
  float* row(Buf b, int t) { return buf_[int(b)].data() + size_t(t) * size_t(width_[int(b)]); }
  const Config& cfg() const { return weights_->cfg; }
  float* kc(int l, int pos) {
    return &k_[(size_t(l) * size_t(ctx_) + size_t(pos)) * size_t(cfg().kv_dim())];
  }
  float* vc(int l, int pos) {
    return &v_[(size_t(l) * size_t(ctx_) + size_t(pos)) * size_t(cfg().kv_dim())];
  }
  void head_norm(float* head, const Matrix& norm) const {
    scalar::rms_norm(head, norm.f32(), head, norm.cols, cfg().rms_eps);  // may alias
  }
  void rope(float* x, int heads, int pos, uint8_t set) const {
    scalar::rope(x, heads, cfg().head_dim, pos, inv_freq_[set], scalar::rope_mscale(cfg(), set));
  }

  void run(const Step& s, const int32_t* tokens, int n) {
    const Config& c = cfg();
    const int l = std::max(s.layer, 0);
    for (int t = 0; t < n; ++t) {
      const int pos = n_past_ + t;
      switch (s.op) {
        case Op::Embed:
          weights_->tok_embd.row_to_f32(tokens[t], row(Buf::X, t));
          for (int64_t i = 0; i < c.dim; ++i) row(Buf::X, t)[i] *= s.scale;
          break;
        case Op::RmsNorm:
          if (s.norm)
            scalar::rms_norm(row(s.a, t), s.norm->f32(), row(s.b, t), s.width, c.rms_eps);
          else  // no pre-norm (OLMo 2): h = x
            std::copy_n(row(s.a, t), s.width, row(s.b, t));
          break;
        case Op::Linear:
          for (const Job& j : s.jobs) product(s, j, t, pos);
          if (s.silu_mul) scalar::gated(s.act, row(Buf::G, t), row(Buf::U, t), c.ffn_dim);
          break;
        case Op::Add:
          for (int64_t i = 0; i < s.width; ++i) row(Buf::X, t)[i] += s.scale * row(s.a, t)[i];
          break;
        case Op::SiluMul:
          scalar::gated(s.act, row(Buf::G, t), row(Buf::U, t), s.width);
          break;
        case Op::HeadNorm:
          for (int64_t i = 0; i < width_[int(s.a)]; i += s.width)
            head_norm(row(s.a, t) + i, *s.norm);
          break;
        case Op::RopeAppend:
          rope(row(Buf::Q, t), c.n_heads, pos, s.rope_set);
          rope(row(Buf::K, t), c.n_kv_heads, pos, s.rope_set);
          [[fallthrough]];
        case Op::Append:
          std::copy_n(row(Buf::K, t), c.kv_dim(), kc(l, pos));
          std::copy_n(row(Buf::V, t), c.kv_dim(), vc(l, pos));
          break;
        case Op::Rope:
          rope(row(s.a, t), c.n_heads, pos, s.rope_set);
          if (s.b != Buf::None) rope(row(s.b, t), c.n_kv_heads, pos, s.rope_set);
          break;
        case Op::Scores:
          scores_ = &s;  // its scale and window are the Mix's
          break;
        case Op::Softmax:
        case Op::Merge:
          break;  // attention is computed whole by its first step (into att, which a
                  // product's merged input stands for)
        case Op::Attend:
          if (s.rope_append) {  // q roped as it is read, k roped and appended
            std::vector<float> q(row(Buf::Q, t), row(Buf::Q, t) + c.q_dim());
            rope(q.data(), c.n_heads, pos, s.rope_set);
            rope(row(Buf::K, t), c.n_kv_heads, pos, s.rope_set);
            std::copy_n(row(Buf::K, t), c.kv_dim(), kc(l, pos));
            std::copy_n(row(Buf::V, t), c.kv_dim(), vc(l, pos));
            attend(s, l, pos, q.data(), row(Buf::Att, t));
            break;
          }
          [[fallthrough]];
        case Op::Mix:
          attend(s, l, pos, row(Buf::Q, t), row(Buf::Att, t));
          break;
        case Op::LatentAppend:
          latent_append(s.latent, l, t, pos);
          break;
        case Op::Reconstruct:
          if (s.latent.append) latent_append(s.latent, l, t, pos);
          if (t == n - 1) reconstruct(s.latent, l, pos);
          break;
      }
    }
  }

  void latent_append(const Step::Latent& L, int l, int t, int pos) {
    std::copy_n(row(Buf::P, t) + L.k_off, L.k_rank,
                &lk_[(size_t(l) * ctx_ + size_t(pos)) * size_t(k_latent_)]);
    std::copy_n(row(Buf::P, t) + L.v_off, L.v_rank,
                &lv_[(size_t(l) * ctx_ + size_t(pos)) * size_t(v_latent_)]);
  }

  // out[r] (+)= M[r, :] x for every row, x the job's input (or its folded form);
  // then what the job finishes on its rows.
  void product(const Step& s, const Job& j, int t, int pos) {
    const Config& c = cfg();
    const Matrix& M = *j.m;
    // A merged input reads att, which attention wrote whole.
    std::vector<float> x(row(j.in, t) + j.in_off, row(j.in, t) + j.in_off + M.cols);
    if (j.norm) scalar::rms_norm(row(j.in, t), j.norm->f32(), x.data(), M.cols, c.rms_eps);
    if (j.in2 != Buf::None) scalar::gated(j.act, x.data(), row(j.in2, t) + j.in_off, M.cols);
    std::vector<float> w(size_t(M.cols));
    float* out = row(j.out, t) + j.out_off;
    for (int64_t r = 0; r < j.rows(); ++r) {
      // Output row r: row r of M, or (pivoted) a row of M or a latent itself.
      const int32_t src = j.pivots ? j.pivots->source[size_t(r)] : int32_t(r);
      double acc = 0;
      if (src >= 0) {
        M.row_to_f32(src, w.data());
        for (int64_t i = 0; i < M.cols; ++i) acc += double(w[size_t(i)]) * x[size_t(i)];
      } else {
        acc = x[size_t(-1 - src)];
      }
      if (j.bias) acc += double(j.bias->f32()[r]);
      // The job's scale multiplies what it writes: its product, or (a
      // residual form's sum) the row it completes, as the CPU's finish_rows.
      const float v = float(acc);
      out[r] = j.accumulate ? out[r] + v * j.scale : j.sum ? (out[r] + v) * j.scale : v * j.scale;
    }
    const int hd = c.head_dim;
    for (int64_t h = 0; h < j.rows() / hd && (j.rope || j.append || j.head_norm); ++h) {
      float* head = out + h * hd;
      if (j.head_norm) head_norm(head, *j.head_norm);
      if (j.rope) rope(head, 1, pos, j.rope_set);
      if (j.append)
        std::copy_n(head, hd, (j.out == Buf::K ? kc(s.layer, pos) : vc(s.layer, pos)) + h * hd);
    }
  }

  // Causal attention of one query at `pos` over the cache (or the legacy reconstruction).
  // (s: the Attend step, or static KV's Mix; its scale and window are the Attend's or Scores'.)
  void attend(const Step& s, int l, int pos, const float* q, float* out) {
    const Config& c = cfg();
    const int g = c.n_heads / c.n_kv_heads, d = c.head_dim;
    const float* K = legacy_ ? k_all_.data() : kc(l, 0);
    const float* V = legacy_ ? v_all_.data() : vc(l, 0);
    const Step& a = s.op == Op::Mix ? *scores_ : s;
    const int from = a.window ? std::max(0, pos - a.window + 1) : 0;
    const int64_t off = int64_t(from) * c.kv_dim();
    for (int kvh = 0; kvh < c.n_kv_heads; ++kvh)
      scalar::attend(q + kvh * g * d, g, d, K + off + kvh * d, V + off + kvh * d, c.kv_dim(),
                     pos + 1 - from, a.scale, out + kvh * g * d);
  }

  void reconstruct(const Step::Latent& L, int l, int last) {
    const Config& c = cfg();
    std::vector<float> uk(size_t(L.uk->rows * L.uk->cols)), uv(size_t(L.uv->rows * L.uv->cols));
    for (int64_t r = 0; r < L.uk->rows; ++r) L.uk->row_to_f32(r, &uk[size_t(r * L.uk->cols)]);
    for (int64_t r = 0; r < L.uv->rows; ++r) L.uv->row_to_f32(r, &uv[size_t(r * L.uv->cols)]);
    for (int j = 0; j <= last; ++j) {
      const float* a = &lk_[(size_t(l) * ctx_ + size_t(j)) * size_t(k_latent_)];
      const float* b = &lv_[(size_t(l) * ctx_ + size_t(j)) * size_t(v_latent_)];
      for (int r = 0; r < c.kv_dim(); ++r) {
        double x = 0, y = 0;
        for (int64_t i = 0; i < L.k_rank; ++i) x += double(uk[size_t(r * L.k_rank + i)]) * a[i];
        for (int64_t i = 0; i < L.v_rank; ++i) y += double(uv[size_t(r * L.v_rank + i)]) * b[i];
        k_all_[size_t(j) * c.kv_dim() + r] = float(x);
        v_all_[size_t(j) * c.kv_dim() + r] = float(y);
      }
      rope(&k_all_[size_t(j) * c.kv_dim()], c.n_kv_heads, j, 0);
    }
  }

  Plan decode_, prefill_;
  std::vector<double> inv_freq_[3];  // per RoPE set (plan.h Job::rope_set)
  const Step* scores_ = nullptr;     // static KV: the Scores step before a Mix
  bool legacy_ = false;
  std::vector<float> buf_[int(Buf::Logits) + 1];
  int64_t width_[int(Buf::Logits) + 1] = {};
  int64_t k_latent_ = 0, v_latent_ = 0;
  std::vector<float> k_, v_, lk_, lv_, k_all_,
      v_all_;  // caches as the executors lay them out (f32)
};

}  // namespace

std::unique_ptr<Backend> make_scalar_plan_backend(std::shared_ptr<const Weights> w,
                                                  const BackendOptions& opt, Target target) {
  require_dense_cache(opt, "the scalar plan executor");
  return std::make_unique<ScalarPlan>(std::move(w), opt, target);
}

}  // namespace lr
