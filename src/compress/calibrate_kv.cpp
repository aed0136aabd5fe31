#include "compress/calibrate_kv.h"

#include <fstream>
#include <sstream>

#include "backend/backend.h"
#include "backend/cpu/cpu.h"
#include "core/error.h"
#include "format/gguf_source.h"
#include "kv/svdq.h"
#include "model/save.h"

namespace lr {

namespace {

class KeyObserver final : public ActivationObserver {
 public:
  explicit KeyObserver(const Config& c) : c_(c) {
    for (int i = 0; i < c.n_layers * c.n_kv_heads; ++i) {
      m_.emplace_back(c.head_dim);
      q_.emplace_back(c.head_dim);
    }
  }
  void observe(int layer, Site site, const float* X, int n, int dim) override {
    const size_t at = size_t(layer) * size_t(c_.n_kv_heads);
    if (site == Site::Keys) {
      LR_ASSERT(dim == c_.kv_dim());
      for (int h = 0; h < c_.n_kv_heads; ++h) m_[at + size_t(h)].add(X + h * c_.head_dim, n, dim);
    } else if (site == Site::Queries) {
      // The g query heads of KV head h: rows of head_dim, g per token.
      LR_ASSERT(dim == c_.q_dim());
      const int g = c_.n_heads / c_.n_kv_heads;
      for (int h = 0; h < c_.n_kv_heads; ++h)
        for (int i = 0; i < g; ++i) q_[at + size_t(h)].add(X + (h * g + i) * c_.head_dim, n, dim);
    }
  }
  const std::vector<kv::KeyMoments>& moments() const { return m_; }
  const std::vector<kv::KeyMoments>& queries() const { return q_; }

 private:
  const Config& c_;
  std::vector<kv::KeyMoments> m_, q_;
};

}  // namespace

Weights::KeyCalibration calibrate_keys(const Model& m, const CalibrateKvOptions& opt,
                                       const CalibrateKvProgress& progress) {
  if (opt.calib_path.empty()) fail("calibrate-kv needs calibration text: pass --calib FILE");
  if (opt.samples <= 0 || opt.len < 2)
    fail("--calib-samples must be >= 1 and --calib-len >= 2 (got {} and {})", opt.samples, opt.len);
  std::ifstream in(opt.calib_path, std::ios::binary);
  if (!in) fail("{}: cannot open calibration text", opt.calib_path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::vector<int32_t> toks = m.tokenizer->encode(ss.str(), m.tokenizer->add_bos());
  const int64_t need = int64_t(opt.samples) * opt.len;
  if (int64_t(toks.size()) < need)
    fail("{}: calibration text has {} tokens, fewer than --calib-samples x --calib-len = {} x {} = {}",
         opt.calib_path, toks.size(), opt.samples, opt.len, need);
  const Config& c = m.weights->cfg;
  KeyObserver obs(c);
  BackendOptions bo;
  bo.ctx = opt.len;
  bo.cpu.n_threads = opt.n_threads;
  bo.cpu.observer = &obs;
  auto backend = make_cpu_backend(m.weights, bo);
  std::vector<float> logits(static_cast<size_t>(c.vocab));
  for (int s = 0; s < opt.samples; ++s) {
    backend->rewind(0);
    backend->forward(&toks[size_t(s) * size_t(opt.len)], opt.len, logits.data(), false);
    if (progress) progress(s + 1, opt.samples);
  }
  Weights::KeyCalibration cal;
  cal.n_keys = need;
  for (size_t i = 0; i < obs.moments().size(); ++i) {
    kv::KeyEigen e = kv::fit_eigen(obs.moments()[i]);
    cal.mean.insert(cal.mean.end(), e.mean.begin(), e.mean.end());
    cal.vectors.insert(cal.vectors.end(), e.vectors.begin(), e.vectors.end());
    for (double s : e.sigma) cal.sigma.push_back(float(s));
    kv::KeyEigen q = kv::fit_eigen_weighted(obs.moments()[i], obs.queries()[i]);
    cal.q_vectors.insert(cal.q_vectors.end(), q.vectors.begin(), q.vectors.end());
    cal.q_proj.insert(cal.q_proj.end(), q.proj.begin(), q.proj.end());
    for (double s : q.sigma) cal.q_sigma.push_back(float(s));
  }
  return cal;
}

void save_with_key_calibration(const Model& m, Weights::KeyCalibration cal, const std::string& out,
                               const std::string& note) {
  if (!m.file) fail("{}: calibrate-kv writes GGUF models; convert this one first (lowrank compress --keep 1)", m.path);
  Weights w = *m.weights;  // matrices share storage; only the calibration differs
  w.key_calibration = std::move(cal);
  SaveOptions so;
  so.factor_type = w.wtype == DType::BF16 ? DType::BF16 : w.wtype == DType::F32 ? DType::F32 : DType::F16;
  // save_gguf rewrites the lowrank.* keys it owns (format, ranks, shared
  // bases); keep the others (how the model was compressed).
  for (const auto& [key, value] : m.file->metadata()) {
    if (key.rfind("lowrank.", 0) != 0) continue;
    if (key == "lowrank.format_version" || key.rfind("lowrank.rank.", 0) == 0 ||
        key.rfind("lowrank.shared.", 0) == 0 || key.rfind("lowrank.kv_calib", 0) == 0)
      continue;
    so.metadata.emplace_back(key, value);
  }
  gguf::Value src;
  src.type = gguf::ValueType::STRING;
  src.s = note;
  so.metadata.emplace_back("lowrank.kv_calib.source", src);
  save_gguf(w, *m.file, GgufSource(m.file), out, so);
}

}  // namespace lr
