// Fast CPU forward pass: the same model as backend/ref/forward_ref.cpp, run
// with the AVX2 kernels of kernels.h on f16, bf16 or f32 weights, split across a
// persistent thread pool. Prompts run as matrix-matrix products in chunks of up
// to kMaxBatch tokens; single tokens (decode) as matrix-vector products.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/kernels.h"
#include "core/error.h"
#include "core/thread_pool.h"

namespace lr {

namespace {

constexpr int kMaxBatch = 512;

class CpuBackend final : public Backend {
 public:
  CpuBackend(std::shared_ptr<const Weights> w, const BackendOptions& opt)
      : Backend(std::move(w), opt.ctx), pool_(std::max(1, opt.n_threads)) {
    const Config& c = weights_->cfg;
    size_t cache = size_t(ctx_) * size_t(c.kv_dim()) * size_t(c.n_layers);
    k_cache_.assign(cache, 0.f);
    v_cache_.assign(cache, 0.f);
    batch_ = std::min(kMaxBatch, ctx_);
    size_t b = size_t(batch_);
    x_.resize(b * c.dim);
    h_.resize(b * c.dim);
    q_.resize(b * c.q_dim());
    k_.resize(b * c.kv_dim());
    v_.resize(b * c.kv_dim());
    att_.resize(b * c.q_dim());
    g_.resize(b * c.ffn_dim);
    u_.resize(b * c.ffn_dim);
    scores_.resize(size_t(pool_.size()) * size_t(ctx_));
    int64_t max_rank = 0;
    for (const Layer& l : weights_->layers)
      for (const Linear* lin : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down})
        max_rank = std::max(max_rank, lin->rank());
    max_rank = std::max(max_rank, weights_->output.rank());
    lr_tmp_.resize(b * size_t(std::max<int64_t>(max_rank, 1)));
    observer_ = opt.observer;
    // RoPE table: angle(pos, i) = pos / factor * theta^(-2i/head_dim).
    int half = c.head_dim / 2;
    rope_cos_.resize(size_t(ctx_) * half);
    rope_sin_.resize(size_t(ctx_) * half);
    for (int p = 0; p < ctx_; ++p)
      for (int i = 0; i < half; ++i) {
        double a = double(p) / c.rope_linear_factor *
                   std::pow(double(c.rope_theta), -2.0 * i / c.head_dim);
        rope_cos_[size_t(p) * half + i] = float(std::cos(a));
        rope_sin_[size_t(p) * half + i] = float(std::sin(a));
      }
  }

  const char* name() const override { return "cpu"; }

  void forward(const int32_t* tokens, int n, float* logits, bool all_logits) override {
    check_forward_args(tokens, n);
    const Config& c = weights_->cfg;
    for (int done = 0; done < n; done += batch_) {
      int m = std::min(batch_, n - done);
      run_chunk(tokens + done, m);
      if (all_logits) {
        output_logits(0, m, logits + size_t(done) * c.vocab);
      } else if (done + m == n) {
        output_logits(m - 1, 1, logits);
      }
      n_past_ += m;
    }
  }

 private:
  // Y = W X for a dense map, Y = U (V X) for low-rank factors.
  void linear(const Linear& L, const float* X, float* Y, int n) {
    if (!L.low_rank()) return matmul(L.w, X, Y, n);
    matmul(L.v, X, lr_tmp_.data(), n);
    matmul(L.u, lr_tmp_.data(), Y, n);
  }

  // Y[t, :] = W X[t, :] for t < n, rows split across the pool in blocks of 16
  // (the kernels' register tile height).
  void matmul(const Matrix& W, const float* X, float* Y, int n) {
    const int64_t blocks = (W.rows + 15) / 16;
    pool_.parallel_for(blocks, [&](int64_t b0, int64_t b1) {
      const int64_t r0 = b0 * 16, r1 = std::min(W.rows, b1 * 16);
      switch (W.dtype) {
        case DType::BF16:
          if (n == 1) cpu::matvec_bf16(W.half(), X, Y, W.cols, r0, r1);
          else cpu::matmul_bf16(W.half(), X, Y, n, W.cols, W.rows, r0, r1);
          break;
        case DType::F16:
          if (n == 1) cpu::matvec_f16(W.half(), X, Y, W.cols, r0, r1);
          else cpu::matmul_f16(W.half(), X, Y, n, W.cols, W.rows, r0, r1);
          break;
        default:
          if (n == 1) cpu::matvec_f32(W.f32(), X, Y, W.cols, r0, r1);
          else cpu::matmul_f32(W.f32(), X, Y, n, W.cols, W.rows, r0, r1);
          break;
      }
    });
  }

  void rms_norm_rows(const float* x, const Matrix& w, float* y, int n) {
    const Config& c = weights_->cfg;
    pool_.parallel_for(n, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t)
        cpu::rms_norm(x + t * c.dim, w.f32(), y + t * c.dim, c.dim, c.rms_eps);
    });
  }

  void rope(float* x, int n_heads, int pos) {
    const Config& c = weights_->cfg;
    int half = c.head_dim / 2;
    const float* cs = &rope_cos_[size_t(pos) * half];
    const float* sn = &rope_sin_[size_t(pos) * half];
    for (int h = 0; h < n_heads; ++h) {
      float* v = x + h * c.head_dim;
      for (int i = 0; i < half; ++i) {
        float a = v[2 * i], b = v[2 * i + 1];
        v[2 * i] = a * cs[i] - b * sn[i];
        v[2 * i + 1] = a * sn[i] + b * cs[i];
      }
    }
  }

  void observe(int layer, Site site, const float* X, int n, int dim) {
    if (observer_) observer_->observe(layer, site, X, n, dim);
  }

  float* k_at(int layer, int pos) {
    return &k_cache_[(size_t(layer) * ctx_ + size_t(pos)) * weights_->cfg.kv_dim()];
  }
  float* v_at(int layer, int pos) {
    return &v_cache_[(size_t(layer) * ctx_ + size_t(pos)) * weights_->cfg.kv_dim()];
  }

  void run_chunk(const int32_t* tokens, int n) {
    const Config& c = weights_->cfg;
    for (int t = 0; t < n; ++t) weights_->tok_embd.row_to_f32(tokens[t], &x_[size_t(t) * c.dim]);
    for (int l = 0; l < c.n_layers; ++l) {
      attention_block(l, n);
      mlp_block(l, n);
    }
  }

  void attention_block(int l, int n) {
    const Config& c = weights_->cfg;
    const Layer& L = weights_->layers[size_t(l)];
    rms_norm_rows(x_.data(), L.attn_norm, h_.data(), n);
    observe(l, Site::AttnIn, h_.data(), n, c.dim);
    linear(L.q, h_.data(), q_.data(), n);
    linear(L.k, h_.data(), k_.data(), n);
    linear(L.v, h_.data(), v_.data(), n);
    for (int t = 0; t < n; ++t) {
      int pos = n_past_ + t;
      rope(&q_[size_t(t) * c.q_dim()], c.n_heads, pos);
      rope(&k_[size_t(t) * c.kv_dim()], c.n_kv_heads, pos);
      std::copy_n(&k_[size_t(t) * c.kv_dim()], c.kv_dim(), k_at(l, pos));
      std::copy_n(&v_[size_t(t) * c.kv_dim()], c.kv_dim(), v_at(l, pos));
    }
    attend(l, n);
    observe(l, Site::AttnOut, att_.data(), n, c.q_dim());
    linear(L.o, att_.data(), h_.data(), n);
    cpu::add(h_.data(), x_.data(), int64_t(n) * c.dim);
  }

  // Causal GQA attention for every (token, head) pair, split across threads.
  void attend(int l, int n) {
    const Config& c = weights_->cfg;
    const int group = c.n_heads / c.n_kv_heads;
    const float inv_sqrt = 1.f / std::sqrt(float(c.head_dim));
    const int64_t items = int64_t(n) * c.n_heads;
    pool_.run([&](int tid, int nth) {
      float* score = &scores_[size_t(tid) * ctx_];
      int64_t begin = items * tid / nth, end = items * (tid + 1) / nth;
      for (int64_t it = begin; it < end; ++it) {
        int t = int(it / c.n_heads), h = int(it % c.n_heads), kvh = h / group;
        int pos = n_past_ + t;
        const float* q = &q_[size_t(t) * c.q_dim() + size_t(h) * c.head_dim];
        float mx = -INFINITY;
        for (int j = 0; j <= pos; ++j) {
          score[j] = cpu::dot(q, k_at(l, j) + kvh * c.head_dim, c.head_dim) * inv_sqrt;
          mx = std::max(mx, score[j]);
        }
        float sum = 0;
        for (int j = 0; j <= pos; ++j) sum += (score[j] = std::exp(score[j] - mx));
        float* out = &att_[size_t(t) * c.q_dim() + size_t(h) * c.head_dim];
        std::fill_n(out, c.head_dim, 0.f);
        for (int j = 0; j <= pos; ++j) cpu::axpy(score[j], v_at(l, j) + kvh * c.head_dim, out, c.head_dim);
        cpu::scale(1.f / sum, out, c.head_dim);
      }
    });
  }

  void mlp_block(int l, int n) {
    const Config& c = weights_->cfg;
    const Layer& L = weights_->layers[size_t(l)];
    rms_norm_rows(x_.data(), L.ffn_norm, h_.data(), n);
    observe(l, Site::MlpIn, h_.data(), n, c.dim);
    linear(L.gate, h_.data(), g_.data(), n);
    linear(L.up, h_.data(), u_.data(), n);
    cpu::silu_mul(g_.data(), u_.data(), int64_t(n) * c.ffn_dim);
    observe(l, Site::MlpMid, g_.data(), n, c.ffn_dim);
    linear(L.down, g_.data(), h_.data(), n);
    cpu::add(h_.data(), x_.data(), int64_t(n) * c.dim);
  }

  // logits[i, :] = output · rms_norm(x[first + i]) for i < count.
  void output_logits(int first, int count, float* logits) {
    const Config& c = weights_->cfg;
    rms_norm_rows(&x_[size_t(first) * c.dim], weights_->out_norm, h_.data(), count);
    linear(weights_->output, h_.data(), logits, count);
  }

  ThreadPool pool_;
  int batch_ = 1;
  std::vector<float> k_cache_, v_cache_;    // [n_layers, ctx, kv_dim]
  std::vector<float> rope_cos_, rope_sin_;  // [ctx, head_dim/2]
  std::vector<float> x_;                    // [batch, dim] residual stream
  std::vector<float> h_;                    // [batch, dim] normed input / block output
  std::vector<float> q_, att_;              // [batch, q_dim]
  std::vector<float> k_, v_;                // [batch, kv_dim]
  std::vector<float> g_, u_;                // [batch, ffn_dim]
  std::vector<float> scores_;               // [n_threads, ctx]
  std::vector<float> lr_tmp_;               // [batch, max rank] low-rank intermediate V x
  ActivationObserver* observer_ = nullptr;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(std::shared_ptr<const Weights> w,
                                          const BackendOptions& opt) {
  return std::make_unique<CpuBackend>(std::move(w), opt);
}

}  // namespace lr
