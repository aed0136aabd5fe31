#include "runtime/compress_model.h"

#include <cmath>
#include <fstream>
#include <memory>
#include <sstream>

#include "compress/factorize.h"
#include "compress/gram.h"
#include "core/error.h"
#include "format/gguf_source.h"
#include "model/load.h"
#include "model/save.h"

namespace lr {

namespace {

using compress::GramAccumulator;
using compress::MatD;
using compress::MatF;

// Which Gram a linear map's input belongs to.
Site site_of(Slot s) {
  switch (s) {
    case Slot::Q:
    case Slot::K:
    case Slot::V: return Site::AttnIn;
    case Slot::O: return Site::AttnOut;
    case Slot::Gate:
    case Slot::Up: return Site::MlpIn;
    default: return Site::MlpMid;
  }
}

// Accumulates the Gram of every (layer, site) input during calibration.
class GramObserver final : public ActivationObserver {
 public:
  explicit GramObserver(const Config& c) {
    for (int l = 0; l < c.n_layers; ++l) {
      grams_.emplace_back();
      auto& g = grams_.back();
      g.emplace_back(c.dim);
      g.emplace_back(c.q_dim());
      g.emplace_back(c.dim);
      g.emplace_back(c.ffn_dim);
    }
  }
  void observe(int layer, Site site, const float* X, int n, int dim) override {
    GramAccumulator& g = grams_[size_t(layer)][size_t(site)];
    LR_ASSERT(g.n() == dim);
    g.add(X, n);
  }
  const MatD& gram(int layer, Site site) const { return grams_[size_t(layer)][size_t(site)].gram(); }

 private:
  std::vector<std::vector<GramAccumulator>> grams_;  // [layer][site]
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open calibration text", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::unique_ptr<GramObserver> calibrate(const Model& m, const CompressOptions& opt,
                                        int64_t* tokens_used, const CompressProgress& progress) {
  if (opt.calib_path.empty())
    fail("this method needs calibration text: pass --calib FILE");
  if (opt.calib_samples <= 0 || opt.calib_len <= 1)
    fail("--calib-samples must be >= 1 and --calib-len >= 2 (got {} and {})", opt.calib_samples,
         opt.calib_len);
  std::string text = read_file(opt.calib_path);
  std::vector<int32_t> toks = m.tokenizer->encode(text, m.tokenizer->add_bos());
  int64_t need = int64_t(opt.calib_samples) * opt.calib_len;
  if (int64_t(toks.size()) < need)
    fail("{}: calibration text has {} tokens, fewer than --calib-samples x --calib-len = {} x {} = {}",
         opt.calib_path, toks.size(), opt.calib_samples, opt.calib_len, need);
  auto obs = std::make_unique<GramObserver>(m.weights->cfg);
  BackendOptions bo;
  bo.ctx = opt.calib_len;
  bo.n_threads = opt.n_threads;
  bo.observer = obs.get();
  auto backend = make_cpu_backend(m.weights, bo);
  std::vector<float> logits(static_cast<size_t>(m.weights->cfg.vocab));
  for (int s = 0; s < opt.calib_samples; ++s) {
    backend->rewind(0);
    backend->forward(&toks[size_t(s) * size_t(opt.calib_len)], opt.calib_len, logits.data(), false);
    if (progress) progress(s + 1, opt.calib_samples, "calibrating");
  }
  *tokens_used = need;
  return obs;
}

Matrix to_matrix(const MatF& f) {
  Matrix m = Matrix::allocate(DType::F32, f.rows, f.cols);
  std::copy(f.a.begin(), f.a.end(), m.f32_mut());
  return m;
}

int64_t rank_of(const CompressOptions& opt, const std::string& kind, int64_t m, int64_t n) {
  auto it = opt.ranks.find(kind);
  if (it == opt.ranks.end()) it = opt.ranks.find("all");
  if (it != opt.ranks.end()) {
    int64_t r = it->second < 0 ? std::min(m, n) : it->second;
    if (r < 1 || r > std::min(m, n))
      fail("--rank {}={} is outside [1, min(out, in) = {}]", kind, r, std::min(m, n));
    return r;
  }
  if (opt.keep >= 1.0) return 0;  // nothing to remove: keep the matrix dense
  return compress::rank_for_keep(opt.keep, m, n);
}

}  // namespace

std::vector<CompressResult> compress_model(const std::string& in_path,
                                           const std::vector<CompressJob>& jobs,
                                           const CompressOptions& opt_in,
                                           const CompressProgress& progress) {
  if (jobs.empty()) fail("compress: nothing to do (no output)");
  for (const CompressJob& j : jobs)
    if (!(j.keep > 0 && j.keep <= 1)) fail("--keep must be in (0, 1], got {}", j.keep);
  if (opt_in.basis_sharing == 1 || opt_in.basis_sharing < 0)
    fail("--basis-sharing takes a group size of at least 2 (got {})", opt_in.basis_sharing);
  for (const std::string& k : opt_in.kinds) {
    bool known = false;
    for (const WeightSpec& s : kWeightTable) known |= s.is_linear() && s.per_layer && k == s.kind;
    if (!known) fail("unknown matrix type '{}' (expected attn_q, attn_k, attn_v, attn_output, ffn_gate, ffn_up, ffn_down)", k);
  }
  Model m = load_model(in_path, DType::F32);
  if (!m.file) fail("{}: compress reads GGUF models", in_path);
  const Config& c = m.weights->cfg;
  for (const Layer& l : m.weights->layers)
    for (const Linear* lin : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down})
      if (lin->low_rank()) fail("{}: the model is already low-rank", in_path);

  bool need_calib = opt_in.method == CompressMethod::Whiten || opt_in.basis_sharing >= 2;
  std::unique_ptr<GramObserver> grams;
  int64_t calib_tokens = 0;
  if (need_calib) grams = calibrate(m, opt_in, &calib_tokens, progress);

  std::vector<CompressResult> results;
  for (const CompressJob& job : jobs) {
  CompressOptions opt = opt_in;
  opt.keep = job.keep;
  const std::string& out_path = job.out_path;
  CompressResult res;
  res.params_before = m.weights->parameters();
  res.calib_tokens = calib_tokens;
  auto out = std::make_shared<Weights>(*m.weights);  // shares the dense matrices
  static const MatD kNoGram;
  auto selected = [&](const WeightSpec& s) {
    return std::find(opt.kinds.begin(), opt.kinds.end(), s.kind) != opt.kinds.end();
  };
  for (int l = 0; l < c.n_layers; ++l) {
    for (const WeightSpec& spec : kWeightTable) {
      if (!spec.is_linear() || !spec.per_layer || !selected(spec)) continue;
      Site site = site_of(spec.slot);
      bool share = opt.basis_sharing >= 2 && site != Site::AttnOut && site != Site::MlpMid;
      const Linear& src = slot_linear(*m.weights, spec.slot, l);
      const int64_t rows = src.w.rows, cols = src.w.cols;
      MatrixReport rep{fmt::format("blk.{}.{}", l, spec.kind), rows, cols, 0, share, ""};
      if (share) {
        int g0 = l / opt.basis_sharing * opt.basis_sharing;
        if (l != g0) continue;  // done with the group's first layer
        int g1 = std::min(c.n_layers, g0 + opt.basis_sharing);
        std::vector<const float*> Ws;
        std::vector<int64_t> ms;
        MatD gram(cols, cols);
        for (int j = g0; j < g1; ++j) {
          Ws.push_back(slot_linear(*m.weights, spec.slot, j).w.f32());
          ms.push_back(rows);
          const MatD& gj = grams->gram(j, site);
          for (size_t i = 0; i < gram.a.size(); ++i) gram.a[i] += gj.a[i];
        }
        auto rk = opt.ranks.count(spec.kind) || opt.ranks.count("all")
                      ? rank_of(opt, spec.kind, rows, cols)
                      : (opt.keep >= 1.0 ? 0 : compress::shared_rank_for_keep(opt.keep, rows, cols, g1 - g0));
        if (rk == 0) continue;
        compress::WhitenReport wr;
        compress::SharedFactors f = compress::shared_factorize(Ws, ms, cols, gram, rk, &wr);
        Matrix basis = to_matrix(f.basis);
        for (int j = g0; j < g1; ++j) {
          Linear& dst = slot_linear(*out, spec.slot, j);
          dst.w = Matrix();
          dst.v = basis;
          dst.u = to_matrix(f.outs[size_t(j - g0)]);
          res.matrices.push_back({fmt::format("blk.{}.{}", j, spec.kind), rows, cols, rk, true, wr.note});
        }
        continue;
      }
      rep.rank = rank_of(opt, spec.kind, rows, cols);
      if (rep.rank == 0) {
        res.matrices.push_back(rep);
        continue;
      }
      compress::Factors f;
      compress::WhitenReport wr;
      if (opt.method == CompressMethod::Svd)
        f = compress::svd_factorize(src.w.f32(), rows, cols, rep.rank);
      else
        f = compress::whiten_factorize(src.w.f32(), rows, cols, grams->gram(l, site), rep.rank, &wr);
      rep.note = wr.note;
      Linear& dst = slot_linear(*out, spec.slot, l);
      dst.w = Matrix();
      dst.v = to_matrix(f.in);
      dst.u = to_matrix(f.out);
      res.matrices.push_back(rep);
    }
    if (progress) progress(l + 1, c.n_layers, "factorizing");
  }
  res.params_after = out->parameters();

  SaveOptions so;
  so.factor_type = opt.factor_type;
  auto str = [](std::string s) {
    gguf::Value v;
    v.type = gguf::ValueType::STRING;
    v.s = std::move(s);
    return v;
  };
  auto f32 = [](double x) {
    gguf::Value v;
    v.type = gguf::ValueType::FLOAT32;
    v.f = x;
    return v;
  };
  std::string method = opt.basis_sharing >= 2
                           ? fmt::format("whiten+basis-sharing(g={})", opt.basis_sharing)
                           : (opt.method == CompressMethod::Svd ? "svd" : "whiten");
  so.metadata.emplace_back("lowrank.method", str(method));
  so.metadata.emplace_back("lowrank.keep", f32(opt.keep));
  so.metadata.emplace_back(
      "lowrank.keep_meaning",
      str("fraction of each compressed matrix's parameters kept: rank = floor(keep*m*n/(m+n)) "
          "(basis sharing: floor(keep*g*m*n/(n+g*m))); keep 1 leaves matrices dense"));
  so.metadata.emplace_back(
      "lowrank.calibration",
      str(need_calib ? fmt::format("{}: {} samples x {} tokens", opt.calib_path, opt.calib_samples,
                                   opt.calib_len)
                     : "none"));
  save_gguf(*out, *m.file, GgufSource(m.file), out_path, so);
  results.push_back(std::move(res));
  }
  return results;
}

}  // namespace lr
