// The CUDA backend's plan executed on the CPU in plain loops: the slow twin
// of backend_cuda.cpp. It runs exactly the launches the GPU runs (the same
// buffers, offsets, jobs, fusions and cache layouts), each as the obvious
// scalar loop, so tests can check the plan itself against the reference
// forward pass on any machine (tests/model/test_cuda_plan.cpp); the GPU tests
// then only have the kernels left to check.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cuda/plan.h"
#include "core/error.h"

namespace lr::cuda {

namespace {

class PlanReference final : public Backend {
 public:
  PlanReference(std::shared_ptr<const Weights> w, const BackendOptions& opt)
      : Backend(w, opt.ctx),
        exec_(opt.exec),
        decode_(plan_forward(*w, opt.exec)),
        prefill_(plan_forward(*w, prefill_options(opt.exec))) {
    const Config& c = w->cfg;
    const size_t L = size_t(c.n_layers), T = size_t(ctx_), kv = size_t(c.kv_dim());
    k_.assign(L * T * kv, 0.f);
    v_.assign(L * T * kv, 0.f);
    lk_.assign(L * T * size_t(decode_.k_latent), 0.f);
    lv_.assign(L * T * size_t(decode_.v_latent), 0.f);
    k_all_.assign(T * kv, 0.f);
    v_all_.assign(T * kv, 0.f);
  }
  const char* name() const override { return "cuda-plan-reference"; }

  void forward(const int32_t* tokens, int n, float* logits, bool all_logits) override {
    check_forward_args(tokens, n);
    const Config& c = weights_->cfg;
    const Plan& p = n == 1 ? decode_ : prefill_;
    const int64_t widths[] = {0,          c.dim,     c.dim,     c.dim,     c.q_dim(), c.kv_dim(),
                              c.kv_dim(), c.q_dim(), p.p_width, c.ffn_dim, c.ffn_dim, c.vocab};
    for (int b = 1; b <= int(Buf::Logits); ++b) {
      width_[b] = widths[b];
      buf_[b].assign(size_t(n) * size_t(widths[b]), 0.f);
    }
    for (const Launch& L : p.launches) run(L, tokens, n);
    const float* out = buf_[int(Buf::Logits)].data();
    if (all_logits)
      std::copy_n(out, size_t(n) * size_t(c.vocab), logits);
    else
      std::copy_n(out + size_t(n - 1) * size_t(c.vocab), size_t(c.vocab), logits);
    n_past_ += n;
  }

 private:
  float* row(Buf b, int t) { return buf_[int(b)].data() + size_t(t) * size_t(width_[int(b)]); }
  float* kc(int l, int pos) {
    const Config& c = weights_->cfg;
    return &k_[(size_t(l) * size_t(ctx_) + size_t(pos)) * size_t(c.kv_dim())];
  }
  float* vc(int l, int pos) {
    const Config& c = weights_->cfg;
    return &v_[(size_t(l) * size_t(ctx_) + size_t(pos)) * size_t(c.kv_dim())];
  }

  void rope(float* x, int heads, int pos) const {
    const Config& c = weights_->cfg;
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < c.head_dim / 2; ++i) {
        const double th = double(pos) / c.rope_linear_factor *
                          std::pow(double(c.rope_theta), -2.0 * i / c.head_dim);
        float* v = x + h * c.head_dim;
        const double a = v[2 * i], b = v[2 * i + 1];
        v[2 * i] = float(a * std::cos(th) - b * std::sin(th));
        v[2 * i + 1] = float(a * std::sin(th) + b * std::cos(th));
      }
  }
  static std::vector<float> rows_of(const Matrix& m) {
    std::vector<float> out(size_t(m.rows) * size_t(m.cols));
    for (int64_t r = 0; r < m.rows; ++r) m.row_to_f32(r, &out[size_t(r) * size_t(m.cols)]);
    return out;
  }
  static float silu(float x) { return x / (1.f + std::exp(-x)); }

  void run(const Launch& L, const int32_t* tokens, int n) {
    const Config& c = weights_->cfg;
    const int l = std::max(L.layer, 0), G = c.n_heads / c.n_kv_heads, D = c.head_dim;
    for (int t = 0; t < n; ++t) {
      const int pos = n_past_ + t;
      switch (L.op) {
        case Op::Embed:
          weights_->tok_embd.row_to_f32(tokens[t], row(Buf::X, t));
          break;
        case Op::RmsNorm:
          norm(row(L.a, t), L.norm->f32(), row(L.b, t), L.width, c.rms_eps);
          break;
        case Op::Gemv:
          for (const Job& j : L.jobs) gemv(j, t);
          break;
        case Op::Add:
          for (int64_t i = 0; i < L.width; ++i) row(Buf::X, t)[i] += row(L.a, t)[i];
          break;
        case Op::SiluMul:
          for (int64_t i = 0; i < L.width; ++i)
            row(Buf::G, t)[i] = silu(row(Buf::G, t)[i]) * row(Buf::U, t)[i];
          break;
        case Op::RopeAppend:
          rope(row(Buf::Q, t), c.n_heads, pos);
          rope(row(Buf::K, t), c.n_kv_heads, pos);
          [[fallthrough]];
        case Op::Append:
          append(l, t, pos);
          break;
        case Op::Rope:
          rope(row(L.a, t), c.n_heads, pos);
          if (L.b != Buf::None) rope(row(L.b, t), c.n_kv_heads, pos);
          break;
        case Op::Scores:
        case Op::Softmax:
        case Op::Merge:
          break;  // the attention is computed whole by its first launch (into att, which
                  // a fused GEMV's merge_in input stands for)
        case Op::Attend:
          if (L.rope_append) {  // fused: q roped as it is read, k roped and appended
            std::vector<float> q(row(Buf::Q, t), row(Buf::Q, t) + c.q_dim());
            rope(q.data(), c.n_heads, pos);
            rope(row(Buf::K, t), c.n_kv_heads, pos);
            append(l, t, pos);
            attend(l, pos, q.data(), row(Buf::Att, t), G, D);
            break;
          }
          [[fallthrough]];
        case Op::Mix:
          attend(l, pos, row(Buf::Q, t), row(Buf::Att, t), G, D);
          break;
        case Op::LatentAppend:
          std::copy_n(row(Buf::P, t) + L.k_off, L.k_rank,
                      &lk_[(size_t(l) * ctx_ + size_t(pos)) * decode_.k_latent]);
          std::copy_n(row(Buf::P, t) + L.v_off, L.v_rank,
                      &lv_[(size_t(l) * ctx_ + size_t(pos)) * decode_.v_latent]);
          break;
        case Op::Reconstruct:
          if (t == n - 1) reconstruct(L, l, pos);
          break;
      }
    }
  }

  void append(int l, int t, int pos) {
    const Config& c = weights_->cfg;
    std::copy_n(row(Buf::K, t), c.kv_dim(), kc(l, pos));
    std::copy_n(row(Buf::V, t), c.kv_dim(), vc(l, pos));
  }

  static void norm(const float* x, const float* w, float* y, int64_t n, float eps) {
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += double(x[i]) * x[i];
    const float inv = float(1.0 / std::sqrt(ss / double(n) + double(eps)));
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * inv * w[i];
  }

  void gemv(const Job& j, int t) {
    const Matrix& M = *j.m;
    std::vector<float> x(row(j.in, t) + j.in_off, row(j.in, t) + j.in_off + M.cols);
    if (j.norm) norm(row(j.in, t), j.norm->f32(), x.data(), M.cols, weights_->cfg.rms_eps);
    if (j.in2 != Buf::None)
      for (int64_t i = 0; i < M.cols; ++i)
        x[size_t(i)] = silu(x[size_t(i)]) * row(j.in2, t)[j.in_off + i];
    std::vector<float> w(size_t(M.cols));
    float* out = row(j.out, t) + j.out_off;
    for (int64_t r = 0; r < M.rows; ++r) {
      M.row_to_f32(r, w.data());
      double acc = 0;
      for (int64_t i = 0; i < M.cols; ++i) acc += double(w[size_t(i)]) * x[size_t(i)];
      out[r] = j.accumulate ? out[r] + float(acc) : float(acc);
    }
  }

  // Causal attention of one query at `pos` over the cache (or the legacy reconstruction).
  void attend(int l, int pos, const float* q, float* out, int G, int D) {
    const Config& c = weights_->cfg;
    const bool legacy = exec_.kv == KvMode::Legacy;
    std::vector<double> s(size_t(pos) + 1);
    for (int h = 0; h < c.n_heads; ++h) {
      const int kvh = h / G;
      double mx = -INFINITY;
      for (int j = 0; j <= pos; ++j) {
        const float* k = (legacy ? &k_all_[size_t(j) * c.kv_dim()] : kc(l, j)) + kvh * D;
        double d = 0;
        for (int i = 0; i < D; ++i) d += double(q[h * D + i]) * k[i];
        s[size_t(j)] = d / std::sqrt(double(D));
        mx = std::max(mx, s[size_t(j)]);
      }
      double sum = 0;
      for (int j = 0; j <= pos; ++j) sum += (s[size_t(j)] = std::exp(s[size_t(j)] - mx));
      for (int i = 0; i < D; ++i) {
        double acc = 0;
        for (int j = 0; j <= pos; ++j)
          acc += s[size_t(j)] * (legacy ? &v_all_[size_t(j) * c.kv_dim()] : vc(l, j))[kvh * D + i];
        out[h * D + i] = float(acc / sum);
      }
    }
  }

  void reconstruct(const Launch& L, int l, int last) {
    const Config& c = weights_->cfg;
    const std::vector<float> uk = rows_of(*L.uk), uv = rows_of(*L.uv);
    for (int j = 0; j <= last; ++j) {
      const float* a = &lk_[(size_t(l) * ctx_ + size_t(j)) * decode_.k_latent];
      const float* b = &lv_[(size_t(l) * ctx_ + size_t(j)) * decode_.v_latent];
      for (int r = 0; r < c.kv_dim(); ++r) {
        double x = 0, y = 0;
        for (int64_t i = 0; i < L.k_rank; ++i) x += double(uk[size_t(r * L.k_rank + i)]) * a[i];
        for (int64_t i = 0; i < L.v_rank; ++i) y += double(uv[size_t(r * L.v_rank + i)]) * b[i];
        k_all_[size_t(j) * c.kv_dim() + r] = float(x);
        v_all_[size_t(j) * c.kv_dim() + r] = float(y);
      }
      rope(&k_all_[size_t(j) * c.kv_dim()], c.n_kv_heads, j);
    }
  }

  ExecOptions exec_;
  Plan decode_, prefill_;
  std::vector<float> buf_[int(Buf::Logits) + 1];
  int64_t width_[int(Buf::Logits) + 1] = {};
  std::vector<float> k_, v_, lk_, lv_, k_all_,
      v_all_;  // caches as the GPU lays them out (f32 here)
};

}  // namespace

std::unique_ptr<Backend> make_plan_reference_backend(std::shared_ptr<const Weights> w,
                                                     const BackendOptions& opt) {
  return std::make_unique<PlanReference>(std::move(w), opt);
}

}  // namespace lr::cuda
