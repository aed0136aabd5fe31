#include "backend/cpu/session.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/kernels.h"
#include "backend/cpu/panels.h"
#include "core/error.h"
#include "model/scalar_ops.h"

namespace lr::cpu {

void matvec(const Matrix& W, const float* x, float* y, int64_t r0, int64_t r1) {
  if (W.panels) return matvec_panels_n(W.dtype, W.panels.get(), x, W.cols, y, 0, 1, W.cols, r0, r1);
  switch (W.dtype) {
    case DType::BF16:
      return matvec_bf16(W.half(), x, y, W.cols, r0, r1);
    case DType::F16:
      return matvec_f16(W.half(), x, y, W.cols, r0, r1);
    case DType::Q8_0:
      return matvec_q8_0(W.q8(), W.scales.get(), x, y, W.cols, r0, r1);
    case DType::F32:
      return matvec_f32(W.f32(), x, y, W.cols, r0, r1);
    default:
      return matvec_blocks(W.dtype, W.ptr(), W.row_bytes(), x, y, W.cols, r0, r1);
  }
}

void matmul(const Matrix& W, const float* X, int64_t ldx, float* Y, int64_t ldy, int64_t n,
            int64_t r0, int64_t r1, MatmulPath path) {
  if (n == 1 && path == MatmulPath::Any) return matvec(W, X, Y, r0, r1);
  if (W.panels) return matmul_panels(W.dtype, W.panels.get(), X, Y, n, W.cols, ldx, ldy, r0, r1, path);
  switch (W.dtype) {
    case DType::BF16:
      return matmul_bf16(W.half(), X, Y, n, W.cols, ldx, ldy, r0, r1, path);
    case DType::F16:
      return matmul_f16(W.half(), X, Y, n, W.cols, ldx, ldy, r0, r1, path);
    case DType::Q8_0:
      return matmul_q8_0(W.q8(), W.scales.get(), X, Y, n, W.cols, ldx, ldy, r0, r1, path);
    case DType::F32:
      return matmul_f32(W.f32(), X, Y, n, W.cols, ldx, ldy, r0, r1, path);
    default:
      return matmul_blocks(W.dtype, W.ptr(), W.row_bytes(), X, Y, n, W.cols, ldx, ldy, r0, r1, path);
  }
}

void matvec_rows(const Matrix& W, const float* X, int64_t ldx, float* Y, int64_t ldy, int64_t n,
                 int64_t r0, int64_t r1) {
  LR_ASSERT(r0 % 8 == 0);
  if (W.panels) return matvec_panels_n(W.dtype, W.panels.get(), X, ldx, Y, ldy, n, W.cols, r0, r1);
  if (is_block_format(W.dtype))
    return matvec_blocks_n(W.dtype, W.ptr(), W.row_bytes(), X, ldx, Y, ldy, n, W.cols, r0, r1);
  if (W.dtype == DType::Q8_0) return matvec_q8_0_n(W.q8(), W.scales.get(), X, ldx, Y, ldy, n, W.cols, r0, r1);
  // Blocks of 64 rows (in L2) against every x in turn.
  constexpr int64_t kBlockRows = 64;
  for (int64_t r = r0; r < r1; r += kBlockRows)
    for (int64_t t = 0; t < n; ++t)
      matvec(W, X + t * ldx, Y + t * ldy, r, std::min(r1, r + kBlockRows));
}

Span split(int64_t n, int tid, int nth, int64_t align) {
  const int64_t units = (n + align - 1) / align;
  const int64_t chunk = units / nth, rem = units % nth;
  const int64_t b = tid * chunk + std::min<int64_t>(tid, rem);
  const int64_t e = b + chunk + (tid < rem ? 1 : 0);
  return {std::min(n, b * align), std::min(n, e * align)};
}

RopeTable::RopeTable(const Config& c, int ctx) : half(c.head_dim / 2) {
  const std::vector<double> inv = scalar::rope_inv_freq(c);
  cos.resize(size_t(ctx) * size_t(half));
  sin.resize(size_t(ctx) * size_t(half));
  for (int p = 0; p < ctx; ++p)
    for (int i = 0; i < half; ++i) {
      const double a = double(p) * inv[size_t(i)];
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

void RopeTable::apply_rows(float* x, int64_t r0, int64_t r1, int head_dim, int pos) const {
  const float* cs = &cos[size_t(pos) * half];
  const float* sn = &sin[size_t(pos) * half];
  for (int64_t r = r0; r < r1; r += 2) {
    const int i = int(r % head_dim) / 2;
    const float a = x[r], b = x[r + 1];
    x[r] = a * cs[i] - b * sn[i];
    x[r + 1] = a * sn[i] + b * cs[i];
  }
}

namespace {

// The stored calibration of stream (l, h) cut to cfg's rank and schedule.
std::shared_ptr<const kv::SvdqBasis> calibrated_basis(const Weights& w, int l, int h,
                                                      const kv::SvdqConfig& cfg) {
  const Weights::KeyCalibration& cal = w.key_calibration;
  if (cal.empty())
    fail(
        "--svdq-basis calibrated: the model has no calibrated key basis (run lowrank calibrate-kv "
        "on it)");
  const bool q = cfg.metric == kv::Metric::Query;
  if (q && cal.q_vectors.empty())
    fail(
        "--svdq-metric query --svdq-basis calibrated: the model's key calibration has no "
        "query-aware fit "
        "(rerun lowrank calibrate-kv)");
  const size_t d = size_t(w.cfg.head_dim), i = size_t(l) * size_t(w.cfg.n_kv_heads) + size_t(h);
  auto slice = [&](const std::vector<float>& v, size_t n) {
    return std::vector<float>(v.begin() + ptrdiff_t(i * n), v.begin() + ptrdiff_t((i + 1) * n));
  };
  kv::KeyEigen e;
  e.d = int(d);
  e.n_keys = cal.n_keys;
  e.mean = slice(cal.mean, d);
  e.vectors = slice(q ? cal.q_vectors : cal.vectors, d * d);
  if (q) e.proj = slice(cal.q_proj, d * d);
  const std::vector<float> sigma = slice(q ? cal.q_sigma : cal.sigma, d);
  e.sigma.assign(sigma.begin(), sigma.end());
  return std::make_shared<const kv::SvdqBasis>(kv::make_basis(e, cfg));
}

}  // namespace

Session::Session(const Weights& w_, const BackendOptions& opt, KvMode kv, bool own_cache)
    : w(w_), c(w_.cfg), pool(std::max(1, opt.n_threads)), ctx(opt.ctx), rope(w_.cfg, opt.ctx) {
  pool.set_spin(opt.exec.spin);
  if (opt.keys.type != kv::KeyType::F32) {
    opt.keys.validate(c.head_dim);
    std::vector<std::shared_ptr<const kv::SvdqBasis>> bases;
    if (opt.keys.type == kv::KeyType::Svdq && opt.keys.svdq.basis == kv::BasisSource::Calibrated)
      for (int l = 0; l < c.n_layers; ++l)
        for (int h = 0; h < c.n_kv_heads; ++h)
          bases.push_back(calibrated_basis(w, l, h, opt.keys.svdq));
    streams.emplace(opt.keys, c.n_layers, c.n_kv_heads, c.head_dim, opt.ctx,
                    scalar::rope_inv_freq(c), bases);
  } else if (kv == KvMode::Legacy) {
    std::vector<int64_t> rk, rv;
    for (const Layer& L : w.layers) {
      rk.push_back(L.k.rank());
      rv.push_back(L.v.rank());
    }
    latent.emplace(opt.ctx, c.kv_dim(), rk, rv);
  } else if (own_cache) {
    dense.emplace(c.n_layers, c.n_kv_heads, c.head_dim, opt.ctx);
  }
}

uint64_t Session::cache_bytes() const {
  return dense ? dense->bytes() : latent ? latent->bytes() : streams ? streams->bytes() : 0;
}

}  // namespace lr::cpu
