#include "compress/compress_model.h"

#include <unistd.h>

#include <algorithm>
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

// Accumulates the Grams of the inputs of layers [l0, l1), every site, during
// one calibration pass; other layers' activations are ignored.
class GramObserver final : public ActivationObserver {
 public:
  GramObserver(const Config& c, int l0, int l1) : l0_(l0), l1_(l1) {
    for (int l = l0; l < l1; ++l) {
      grams_.emplace_back();
      auto& g = grams_.back();
      g.emplace_back(c.dim);
      g.emplace_back(c.q_dim());
      g.emplace_back(c.dim);
      g.emplace_back(c.ffn_dim);
    }
  }
  void observe(int layer, Site site, const float* X, int n, int dim) override {
    if (site == Site::Keys || site == Site::Queries) return;  // not inputs of linear maps
    if (layer < l0_ || layer >= l1_) return;
    GramAccumulator& g = grams_[size_t(layer - l0_)][size_t(site)];
    LR_ASSERT(g.n() == dim);
    g.add(X, n);
  }
  const MatD& gram(int layer, Site site) const {
    LR_ASSERT(layer >= l0_ && layer < l1_);
    return grams_[size_t(layer - l0_)][size_t(site)].gram();
  }

 private:
  int l0_, l1_;
  std::vector<std::vector<GramAccumulator>> grams_;  // [layer - l0][site]
};

// Bytes of the Grams one layer's calibration keeps (four sites, double).
uint64_t gram_bytes_per_layer(const Config& c) {
  auto sq = [](int64_t n) { return uint64_t(n) * uint64_t(n) * sizeof(double); };
  return 2 * sq(c.dim) + sq(c.q_dim()) + sq(c.ffn_dim);
}

// MemAvailable from /proc/meminfo (free plus reclaimable memory), else the
// free pages; 0 when neither can be read.
uint64_t available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  for (std::string key; in >> key;) {
    uint64_t kib = 0;
    in >> kib;
    if (key == "MemAvailable:") return kib * 1024;
    in.ignore(1 << 10, '\n');
  }
  const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : 0;
}

// Layers whose Grams one calibration pass collects: as many as the budget
// holds (opt.calib_memory, or half the available memory), at least one, and
// whole basis-sharing groups.
int layers_per_pass(const Config& c, const CompressOptions& opt) {
  const uint64_t budget = opt.calib_memory > 0 ? opt.calib_memory : available_memory_bytes() / 2;
  const uint64_t fit = budget / gram_bytes_per_layer(c);
  if (fit >= uint64_t(c.n_layers)) return c.n_layers;
  const int g = std::max(1, opt.basis_sharing);
  return std::min(c.n_layers, std::max(g, int(fit) / g * g));
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open calibration text", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// One calibration pass over the dense model, keeping the Grams of layers [l0, l1).
std::unique_ptr<GramObserver> calibrate(const Model& m, const CompressOptions& opt, int l0, int l1,
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
  auto obs = std::make_unique<GramObserver>(m.weights->cfg, l0, l1);
  const std::string phase = l1 - l0 == m.weights->cfg.n_layers
                                ? std::string("calibrating")
                                : fmt::format("calibrating layers {}-{}", l0, l1 - 1);
  BackendOptions bo;
  bo.ctx = opt.calib_len;
  bo.n_threads = opt.n_threads;
  bo.observer = obs.get();
  auto backend = make_cpu_backend(m.weights, bo);
  std::vector<float> logits(static_cast<size_t>(m.weights->cfg.vocab));
  for (int s = 0; s < opt.calib_samples; ++s) {
    backend->rewind(0);
    backend->forward(&toks[size_t(s) * size_t(opt.calib_len)], opt.calib_len, logits.data(), false);
    if (progress) progress(s + 1, opt.calib_samples, phase.c_str());
  }
  *tokens_used = need;
  return obs;
}

// The first r rows of f ([r, cols]) / the first r columns of f ([rows, r]).
Matrix leading_rows(const MatF& f, int64_t r) {
  LR_ASSERT(r <= f.rows);
  Matrix m = Matrix::allocate(DType::F32, r, f.cols);
  std::copy(f.a.begin(), f.a.begin() + r * f.cols, m.f32_mut());
  return m;
}
// W as f32 values: the matrix's own when it is F32, else decoded into buf.
const float* as_f32(const Matrix& w, std::vector<float>& buf) {
  if (w.dtype == DType::F32) return w.f32();
  buf.resize(size_t(w.rows * w.cols));
  for (int64_t r = 0; r < w.rows; ++r) w.row_to_f32(r, buf.data() + r * w.cols);
  return buf.data();
}

Matrix leading_cols(const MatF& f, int64_t r) {
  LR_ASSERT(r <= f.cols);
  Matrix m = Matrix::allocate(DType::F32, f.rows, r);
  for (int64_t i = 0; i < f.rows; ++i)
    std::copy_n(f.a.begin() + i * f.cols, r, m.f32_mut() + i * r);
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

// The lowrank.* metadata a compressed file records about how it was made.
SaveOptions save_options(const CompressOptions& opt, bool calibrated) {
  auto str = [](std::string s) {
    gguf::Value v;
    v.type = gguf::ValueType::STRING;
    v.s = std::move(s);
    return v;
  };
  gguf::Value keep;
  keep.type = gguf::ValueType::FLOAT32;
  keep.f = opt.keep;
  SaveOptions so;
  so.factor_type = opt.factor_type;
  so.metadata.emplace_back(
      "lowrank.method", str(opt.basis_sharing >= 2
                                ? fmt::format("whiten+basis-sharing(g={})", opt.basis_sharing)
                                : (opt.method == CompressMethod::Svd ? "svd" : "whiten")));
  so.metadata.emplace_back("lowrank.keep", keep);
  so.metadata.emplace_back(
      "lowrank.keep_meaning",
      str("fraction of each compressed matrix's parameters kept: rank = floor(keep*m*n/(m+n)) "
          "(basis sharing: floor(keep*g*m*n/(n+g*m))); keep 1 leaves matrices dense"));
  so.metadata.emplace_back(
      "lowrank.calibration",
      str(calibrated ? fmt::format("{}: {} samples x {} tokens", opt.calib_path, opt.calib_samples,
                                   opt.calib_len)
                     : "none"));
  return so;
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
  check_factor_type(opt_in.factor_type);
  const bool quantized_factors = opt_in.factor_type == DType::Q8_0 || is_block_format(opt_in.factor_type);
  // Weights as stored (a quantized file stays mapped, not widened): each
  // matrix is decoded to f32 only while it is factorized.
  Model m = load_model(in_path, std::nullopt);
  if (!m.file) fail("{}: compress reads GGUF models", in_path);
  const Config& c = m.weights->cfg;
  for_each_linear(*m.weights, [&](const WeightSpec&, int, const Linear& lin) {
    if (lin.low_rank()) fail("{}: the model is already low-rank", in_path);
  });

  const bool need_calib = opt_in.method == CompressMethod::Whiten || opt_in.basis_sharing >= 2;
  int64_t calib_tokens = 0;

  // Every job's factors are prefixes of one decomposition at the largest rank
  // any job asks for (U_r sqrt(S_r) and sqrt(S_r) Vt_r S^-1 are leading
  // columns / rows), so each matrix is decomposed once for all jobs.
  std::vector<CompressOptions> opts(jobs.size(), opt_in);
  std::vector<std::shared_ptr<Weights>> outs;
  std::vector<CompressResult> results(jobs.size());
  for (size_t j = 0; j < jobs.size(); ++j) {
    opts[j].keep = jobs[j].keep;
    outs.push_back(std::make_shared<Weights>(*m.weights));  // shares the dense matrices
    results[j].params_before = m.weights->parameters();
  }
  auto selected = [&](const WeightSpec& s) {
    return std::find(opt_in.kinds.begin(), opt_in.kinds.end(), s.kind) != opt_in.kinds.end();
  };
  // Calibration keeps the Grams of all the layers one pass holds (a whole
  // model's, for the 1.5B's 8960-wide ffn_down inputs, would be 20 GB): each
  // pass runs the dense model over the calibration text again, so a model
  // compressed in several passes is the same as one compressed in one.
  const int per_pass = need_calib ? layers_per_pass(c, opt_in) : c.n_layers;
  std::unique_ptr<GramObserver> grams;
  std::vector<std::vector<float>> wide;  // f32 copies of the matrices being factorized
  for (int l = 0; l < c.n_layers; ++l) {
    if (need_calib && l % per_pass == 0) {
      grams.reset();
      grams = calibrate(m, opt_in, l, std::min(c.n_layers, l + per_pass), &calib_tokens, progress);
    }
    for (const WeightSpec& spec : kWeightTable) {
      if (!spec.is_linear() || !spec.per_layer || !selected(spec)) continue;
      const Site site = site_of(spec.slot);
      const bool share = opt_in.basis_sharing >= 2 && site != Site::AttnOut && site != Site::MlpMid;
      const Linear& src = slot_linear(*m.weights, spec.slot, l);
      const int64_t rows = src.w.rows, cols = src.w.cols;
      if (share && l % opt_in.basis_sharing != 0) continue;  // done with the group's first layer
      const int g0 = l, g1 = share ? std::min(c.n_layers, l + opt_in.basis_sharing) : l + 1;
      std::vector<int64_t> rank(jobs.size());
      for (size_t j = 0; j < jobs.size(); ++j) {
        bool explicit_rank = opts[j].ranks.count(spec.kind) || opts[j].ranks.count("all");
        rank[j] = share && !explicit_rank
                      ? (opts[j].keep >= 1.0 ? 0
                                             : compress::shared_rank_for_keep(opts[j].keep, rows, cols, g1 - g0))
                      : rank_of(opts[j], spec.kind, rows, cols);
        if (quantized_factors && !explicit_rank && rank[j] >= 32) rank[j] = rank[j] / 32 * 32;
      }
      const int64_t r_max = *std::max_element(rank.begin(), rank.end());
      compress::WhitenReport wr;
      MatF in_full;                  // [r_max, cols]
      std::vector<MatF> out_full;    // per layer of the group: [rows, r_max]
      if (r_max > 0) {
        if (share) {
          std::vector<const float*> Ws;
          MatD gram(cols, cols);
          wide.resize(size_t(g1 - g0));
          for (int i = g0; i < g1; ++i) {
            Ws.push_back(as_f32(slot_linear(*m.weights, spec.slot, i).w, wide[size_t(i - g0)]));
            const MatD& gi = grams->gram(i, site);
            for (size_t e = 0; e < gram.a.size(); ++e) gram.a[e] += gi.a[e];
          }
          compress::SharedFactors f = compress::shared_factorize(
              Ws, std::vector<int64_t>(Ws.size(), rows), cols, gram, r_max, &wr);
          in_full = std::move(f.basis);
          out_full = std::move(f.outs);
        } else {
          wide.resize(1);
          const float* W = as_f32(src.w, wide[0]);
          compress::Factors f =
              opt_in.method == CompressMethod::Svd
                  ? compress::svd_factorize(W, rows, cols, r_max)
                  : compress::whiten_factorize(W, rows, cols, grams->gram(l, site), r_max, &wr);
          in_full = std::move(f.in);
          out_full.push_back(std::move(f.out));
        }
      }
      for (size_t j = 0; j < jobs.size(); ++j) {
        const int64_t r = rank[j];
        Matrix basis;
        if (r > 0) basis = leading_rows(in_full, r);
        for (int i = g0; i < g1; ++i) {
          MatrixReport rep{fmt::format("blk.{}.{}", i, spec.kind), rows, cols, r, share && g1 - g0 > 1, wr.note};
          results[j].matrices.push_back(rep);
          if (r == 0) continue;
          Linear& dst = slot_linear(*outs[j], spec.slot, i);
          dst.w = Matrix();
          dst.v = g1 - g0 > 1 ? basis : leading_rows(in_full, r);
          dst.u = leading_cols(out_full[size_t(i - g0)], r);
        }
      }
    }
    if (progress) progress(l + 1, c.n_layers, "factorizing");
  }

  grams.reset();
  wide.clear();
  for (size_t j = 0; j < jobs.size(); ++j) {
    results[j].calib_tokens = calib_tokens;
    results[j].params_after = outs[j]->parameters();
    results[j].factor_types =
        save_gguf(*outs[j], *m.file, GgufSource(m.file), jobs[j].out_path, save_options(opts[j], need_calib))
            .written_types;
  }
  return results;
}

}  // namespace lr
