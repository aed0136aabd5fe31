#include "backend/cpu/session.h"

#include <algorithm>
#include <cmath>

#include "backend/cpu/kernels.h"
#include "core/error.h"
#include "core/half.h"

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

namespace {

// The stored calibration of stream (l, h) cut to cfg's rank and schedule.
std::shared_ptr<const kv::SvdqBasis> calibrated_basis(const Weights& w, int l, int h, const kv::SvdqConfig& cfg) {
  const Weights::KeyCalibration& cal = w.key_calibration;
  if (cal.empty())
    fail("--svdq-basis calibrated: the model has no calibrated key basis (run lowrank calibrate-kv on it)");
  const bool q = cfg.metric == kv::Metric::Query;
  if (q && cal.q_vectors.empty())
    fail("--svdq-metric query --svdq-basis calibrated: the model's key calibration has no query-aware fit "
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
  if (opt.keys.type != kv::KeyType::F32) {
    if (exec.kv != KvMode::Dense)
      fail("--cache-type-k {} runs with --kv dense (the compressed key cache replaces the f32 one)",
           kv::key_type_name(opt.keys.type));
    opt.keys.validate(c.head_dim);
    kv.streamed = true;
    cache = 0;  // staging only, sized per forward call
    const bool calibrated = opt.keys.type == kv::KeyType::Svdq &&
                            opt.keys.svdq.basis == kv::BasisSource::Calibrated;
    std::vector<double> freq;  // RoPE angle per position of pair i, as RopeTable turns it
    for (int i = 0; i < c.head_dim / 2; ++i)
      freq.push_back(std::pow(double(c.rope_theta), -2.0 * i / c.head_dim) / c.rope_linear_factor);
    for (int l = 0; l < c.n_layers; ++l)
      for (int h = 0; h < c.n_kv_heads; ++h)
        kv.ks.emplace_back(opt.keys, c.head_dim, opt.ctx,
                           calibrated ? calibrated_basis(w, l, h, opt.keys.svdq) : nullptr, freq);
    kv.v16.assign(size_t(opt.ctx) * size_t(c.kv_dim()) * size_t(c.n_layers), 0);
  }
  kv.k.assign(cache, 0.f);
  kv.v.assign(cache, 0.f);
}

uint64_t KvCache::bytes() const {
  uint64_t b = (k.size() + v.size() + pk.size() + pv.size()) * sizeof(float);
  if (!streamed) return b;
  for (const kv::KeyStream& s : ks) b += s.allocated().total();
  return b + v16.size() * sizeof(uint16_t);
}

void Session::begin_call(int p, int n) {
  if (!kv.streamed) return;
  kv.stage_begin = p;
  kv.stage_cap = n;
  const size_t size = size_t(n) * size_t(c.kv_dim()) * size_t(c.n_layers);
  kv.k.assign(size, 0.f);
  kv.v.assign(size, 0.f);
}

void Session::end_call() {
  if (!kv.streamed || kv.stage_cap == 0) return;
  const int n = kv.stage_cap, d = c.head_dim;
  pool.parallel_for(int64_t(c.n_layers) * c.n_kv_heads, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int l = int(i / c.n_kv_heads), h = int(i % c.n_kv_heads);
      kv.stream(l, h).append(kv.key(l, h), n, d);
      const float* v = kv.value(l, h);
      uint16_t* dst = kv.value16(l, h) + size_t(kv.stage_begin) * size_t(d);
      for (size_t j = 0; j < size_t(n) * size_t(d); ++j) dst[j] = f32_to_f16(v[j]);
    }
  });
  kv.stage_cap = 0;
  kv.k.clear();
  kv.k.shrink_to_fit();
  kv.v.clear();
  kv.v.shrink_to_fit();
}

void Session::truncate(int n) {
  for (kv::KeyStream& s : kv.ks)
    if (s.size() > n) s.truncate(n);
}

KeyCacheStats Session::key_stats() const {
  KeyCacheStats st;
  if (!kv.streamed) return st;
  st.type = kv.ks.front().type();
  st.tokens = kv.ks.front().size();
  st.head_dim = c.head_dim;
  st.streams = int(kv.ks.size());
  st.value_bytes = kv.v16.size() * sizeof(uint16_t);
  for (const kv::KeyStream& s : kv.ks) {
    st.held += s.held();
    st.allocated += s.allocated();
    if (const kv::SvdqBasis* b = s.basis()) {
      ++st.fitted;
      st.degraded += b->degraded ? 1 : 0;
      st.mean_rank += b->rank;
      st.mean_channels += s.channels();
      double bits = 0;
      for (const kv::ChannelGroup& g : b->groups) bits += g.bits;
      st.nominal_bits += bits / double(b->groups.size()) * b->rank / c.head_dim;
    }
  }
  if (st.fitted > 0) {
    st.mean_rank /= st.fitted;
    st.mean_channels /= st.fitted;
    st.nominal_bits /= st.fitted;
  }
  return st;
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
