#include "backend/cpu/exec/session.h"

#include "core/error.h"
#include "model/scalar_ops.h"

namespace lr::cpu {

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
