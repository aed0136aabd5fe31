#include "backend/cpu/session.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/kernels.h"
#include "core/error.h"

namespace lr::cpu {

void matvec(const Matrix& W, const float* x, float* y, int64_t r0, int64_t r1) {
  switch (W.dtype) {
    case DType::BF16: return matvec_bf16(W.half(), x, y, W.cols, r0, r1);
    case DType::F16: return matvec_f16(W.half(), x, y, W.cols, r0, r1);
    case DType::Q8_0: return matvec_q8_0(W.q8(), W.scales.get(), x, y, W.cols, r0, r1);
    default: return matvec_f32(W.f32(), x, y, W.cols, r0, r1);
  }
}

void matmul(const Matrix& W, const float* X, float* Y, int64_t n, int64_t ldy, int64_t r0,
            int64_t r1) {
  if (n == 1) return matvec(W, X, Y, r0, r1);
  switch (W.dtype) {
    case DType::BF16: return matmul_bf16(W.half(), X, Y, n, W.cols, ldy, r0, r1);
    case DType::F16: return matmul_f16(W.half(), X, Y, n, W.cols, ldy, r0, r1);
    case DType::Q8_0: return matmul_q8_0(W.q8(), W.scales.get(), X, Y, n, W.cols, ldy, r0, r1);
    default: return matmul_f32(W.f32(), X, Y, n, W.cols, ldy, r0, r1);
  }
}

Span split(int64_t n, int tid, int nth, int64_t align) {
  const int64_t units = (n + align - 1) / align;
  const int64_t chunk = units / nth, rem = units % nth;
  const int64_t b = tid * chunk + std::min<int64_t>(tid, rem);
  const int64_t e = b + chunk + (tid < rem ? 1 : 0);
  return {std::min(n, b * align), std::min(n, e * align)};
}

RopeTable::RopeTable(const Config& c, int ctx) : half(c.head_dim / 2) {
  cos.resize(size_t(ctx) * size_t(half));
  sin.resize(size_t(ctx) * size_t(half));
  for (int p = 0; p < ctx; ++p)
    for (int i = 0; i < half; ++i) {
      double a = double(p) / c.rope_linear_factor *
                 std::pow(double(c.rope_theta), -2.0 * i / c.head_dim);
      cos[size_t(p) * half + i] = float(std::cos(a));
      sin[size_t(p) * half + i] = float(std::sin(a));
    }
}

void RopeTable::apply(float* x, int n_heads, int head_dim, int pos) const {
  const float* cs = &cos[size_t(pos) * half];
  const float* sn = &sin[size_t(pos) * half];
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + h * head_dim;
    for (int i = 0; i < half; ++i) {
      float a = v[2 * i], b = v[2 * i + 1];
      v[2 * i] = a * cs[i] - b * sn[i];
      v[2 * i + 1] = a * sn[i] + b * cs[i];
    }
  }
}

Session::Session(const Weights& w_, const BackendOptions& opt)
    : w(w_), c(w_.cfg), exec(opt.exec), pool(std::max(1, opt.n_threads)), rope(w_.cfg, opt.ctx) {
  pool.set_spin(exec.spin);
  kv.ctx = opt.ctx;
  kv.kv_dim = c.kv_dim();
  kv.head_dim = c.head_dim;
  kv.n_kv_heads = c.n_kv_heads;
  size_t cache = size_t(opt.ctx) * size_t(c.kv_dim()) * size_t(c.n_layers);
  if (exec.kv == KvMode::Legacy) {
    kv.latent = true;
    cache = size_t(opt.ctx) * size_t(c.kv_dim());
    for (size_t l = 0; l < w.layers.size(); ++l) {
      const Layer& L = w.layers[l];
      if (!L.k.low_rank() || !L.v.low_rank())
        fail("--kv legacy stores the low-rank latents of k and v, but layer {} has a dense {} "
             "projection (use a compressed model, or --kv dense)",
             l, L.k.low_rank() ? "v" : "k");
      kv.pk_off.push_back(kv.pk.size());
      kv.pv_off.push_back(kv.pv.size());
      kv.rk.push_back(L.k.rank());
      kv.rv.push_back(L.v.rank());
      kv.pk.resize(kv.pk.size() + size_t(opt.ctx) * size_t(L.k.rank()));
      kv.pv.resize(kv.pv.size() + size_t(opt.ctx) * size_t(L.v.rank()));
    }
  }
  kv.k.assign(cache, 0.f);
  kv.v.assign(cache, 0.f);
}

void reconstruct_history(Session& s, int l, int64_t j0, int64_t j1) {
  if (j1 <= j0) return;
  const Layer& L = s.w.layers[size_t(l)];
  const Config& c = s.c;
  // The latent rows of one layer are contiguous with stride rk (rv): a matrix
  // of j1 - j0 tokens for the matrix-matrix kernel.
  float* K = s.kv.k.data() + j0 * c.kv_dim();  // position-major scratch rows
  float* V = s.kv.v.data() + j0 * c.kv_dim();
  matmul(L.k.u, s.kv.pk_at(l, int(j0)), K, j1 - j0, c.kv_dim(), 0, L.k.u.rows);
  matmul(L.v.u, s.kv.pv_at(l, int(j0)), V, j1 - j0, c.kv_dim(), 0, L.v.u.rows);
  for (int64_t j = j0; j < j1; ++j) s.rope.apply(K + (j - j0) * c.kv_dim(), c.n_kv_heads, c.head_dim, int(j));
}

}  // namespace lr::cpu
