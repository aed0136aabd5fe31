#include "compress/compress_model.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <sstream>

#include "compress/allocate.h"
#include "compress/calibration.h"
#include "compress/factorize.h"
#include "compress/gram.h"
#include "compress/pivot.h"
#include "compress/quantize.h"
#include "compress/quantize_model.h"
#include "compress/sequential.h"
#include "core/error.h"
#include "format/gguf_source.h"
#include "model/load.h"
#include "model/save.h"

namespace lr {

namespace {

using compress::GramAccumulator;
using compress::MatD;
using compress::MatF;


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
  int last_layer() const override { return l1_ - 1; }
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

// One calibration pass over the dense model, keeping the Grams of layers [l0, l1).
std::unique_ptr<GramObserver> calibrate(const Model& m, const CompressOptions& opt, int l0, int l1,
                                        int64_t* tokens_used, const CompressProgress& progress) {
  auto obs = std::make_unique<GramObserver>(m.weights->cfg, l0, l1);
  const std::string phase = l1 - l0 == m.weights->cfg.n_layers
                                ? std::string("calibrating")
                                : fmt::format("calibrating layers {}-{}", l0, l1 - 1);
  *tokens_used = compress::run_calibration(
      m, {opt.calib_path, opt.calib_samples, opt.calib_len, opt.n_threads}, obs.get(), phase,
      progress);
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

// One matrix (or basis-sharing group) decomposed at the largest rank any job
// needs; each job takes leading rows / columns of it.
struct Decomposition {
  const WeightSpec* spec = nullptr;
  int g0 = 0, g1 = 0;             // layers [g0, g1) (a group shares `in`)
  int64_t rows = 0, cols = 0;
  MatF in;                        // [r_max, cols]
  std::vector<MatF> outs;         // per layer of the group: [rows, r_max]
  std::vector<double> sigma;      // whitened spectrum (empty: not decomposed)
  std::string note;               // regularisation / fallback account
  compress::RankCandidate cand;   // costs for a global budget
  Matrix quantized;               // residual form: Q(W), the factors fit W - Q(W)
};

// sum_{j >= r} sigma_j^2 / energy (energy 0: sum_j sigma_j^2).
double truncation_loss(const std::vector<double>& sigma, int64_t r, double energy = 0) {
  double all = 0, tail = 0;
  for (size_t j = 0; j < sigma.size(); ++j) {
    all += sigma[j] * sigma[j];
    if (int64_t(j) >= r) tail += sigma[j] * sigma[j];
  }
  if (energy > 0) all = energy;
  return all > 0 ? tail / all : 0.0;
}

// The costs a global budget weighs for dense matrix w (sigma filled later
// with zeros of its length, so useful_rank can be asked first): parameters,
// or bytes as written (the source's bytes dense; a row of V and a column of
// U in the factor type; a quantized U column counted at Q8_0's 34/32 bytes
// per value, what a rank that is not a multiple of 256 is written in).
compress::RankCandidate rank_candidate(const CompressOptions& opt, const Matrix& w,
                                       int64_t granularity) {
  compress::RankCandidate c;
  c.sigma.assign(size_t(std::min(w.rows, w.cols)), 0.0);
  c.granularity = granularity;
  c.relative = opt.relative_loss;
  if (opt.budget == RankBudget::Bytes) {
    const DType vt = factor_storage_type(opt.factor_type, w.cols);
    const double u_elem = granularity > 1 ? 34.0 / 32.0 : opt.factor_type == DType::F32 ? 4.0 : 2.0;
    c.dense_cost = double(w.bytes());
    c.rank_cost = double(*row_bytes(vt, uint64_t(w.cols))) + double(w.rows) * u_elem;
  } else {
    c.dense_cost = double(w.rows) * double(w.cols);
    c.rank_cost = double(w.rows + w.cols);
  }
  return c;
}

// W [rows, cols] quantized row by row to `type` (or the type llama.cpp
// substitutes when its blocks do not fit a row; `note` says so), weighted by
// `importance` [cols] when it is not empty, on `threads` threads.
Matrix quantize_matrix(DType type, const float* W, int64_t rows, int64_t cols,
                       const std::vector<float>& importance, int threads, std::string& note) {
  if (!row_bytes(type, uint64_t(cols))) {
    const DType fb = fallback_type(type);
    if (!row_bytes(fb, uint64_t(cols)))
      fail("rows of {} values fit neither {} nor {}", cols, dtype_name(type), dtype_name(fb));
    note = fmt::format("rows of {} are not whole {} blocks: quantized as {}", cols,
                       dtype_name(type), dtype_name(fb));
    type = fb;
  }
  Matrix q = Matrix::allocate(type, rows, cols);
  compress::quantize_rows(
      type, rows, cols, [&](int64_t r, float* row) { std::copy_n(W + r * cols, cols, row); },
      importance.empty() ? nullptr : importance.data(), q.data.get(), threads);
  return q;
}

// W - Q(W) into buf (which may hold W itself): what the correction fits.
const float* quantization_error(const Matrix& q, const float* W, std::vector<float>& buf) {
  std::vector<float> row(static_cast<size_t>(q.cols));
  std::vector<float> e(static_cast<size_t>(q.rows * q.cols));
  for (int64_t r = 0; r < q.rows; ++r) {
    q.row_to_f32(r, row.data());
    for (int64_t c = 0; c < q.cols; ++c) e[size_t(r * q.cols + c)] = W[r * q.cols + c] - row[size_t(c)];
  }
  buf = std::move(e);
  return buf.data();
}

// A[m, n] -= out[m, r] in[r, n].
void subtract_product(const MatF& out, const MatF& in, float* A) {
  const int64_t m = out.rows, r = out.cols, n = in.cols;
  LR_ASSERT(in.rows == r);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t k = 0; k < r; ++k) {
      const float a = out(i, k);
      const float* v = &in.a[size_t(k * n)];
      float* row = A + i * n;
      for (int64_t c = 0; c < n; ++c) row[c] -= a * v[c];
    }
}

bool quantized_factors(DType t) { return t == DType::Q8_0 || is_block_format(t); }

// Rank r as job `opt` writes it: with quantized factors rounded down to a
// multiple of 32 (whole Q8_0 rows), unless --rank set it for this kind.
int64_t factor_rank(const CompressOptions& opt, const std::string& kind, int64_t r) {
  const bool explicit_rank = opt.ranks.count(kind) || opt.ranks.count("all");
  return quantized_factors(opt.factor_type) && !explicit_rank && r >= 32 ? r / 32 * 32 : r;
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
  return opt.pivoted ? compress::pivoted_rank_for_keep(opt.keep, m, n)
                     : compress::rank_for_keep(opt.keep, m, n);
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
  const std::string method = opt.basis_sharing >= 2
                                 ? fmt::format("whiten+basis-sharing(g={})", opt.basis_sharing)
                                 : (opt.method == CompressMethod::Svd ? "svd" : "whiten");
  const std::string stored = method + (opt.pivoted ? "+pivoted" : "");
  so.metadata.emplace_back(
      "lowrank.method", str(opt.residual ? fmt::format("residual({})+{}", dtype_name(*opt.residual), stored)
                                         : stored));
  so.metadata.emplace_back("lowrank.keep", keep);
  so.metadata.emplace_back(
      "lowrank.keep_meaning",
      str(opt.budget == RankBudget::PerMatrix
              ? (opt.pivoted ? "fraction of each compressed matrix's parameters kept: pivoted storage, "
                               "the largest rank r < min(m, n) with r*(m+n-r) <= keep*m*n; keep 1 leaves "
                               "matrices dense"
                             : "fraction of each compressed matrix's parameters kept: rank = "
                               "floor(keep*m*n/(m+n)) (basis sharing: floor(keep*g*m*n/(n+g*m))); keep 1 "
                               "leaves matrices dense")
              : opt.residual ? (opt.budget == RankBudget::Parameters
                                    ? "the correction's parameters as a fraction of the corrected matrices' in "
                                      "all, ranks allocated per matrix from the whitened spectra of their "
                                      "quantization errors"
                                    : "the correction's bytes as written as a fraction of the corrected "
                                      "matrices' bytes in the source file, ranks allocated per matrix from the "
                                      "whitened spectra of their quantization errors")
              : opt.budget == RankBudget::Parameters
                    ? "fraction of the compressed matrices' parameters kept in all, ranks "
                      "allocated per matrix from the whitened spectra"
                    : "fraction of the compressed matrices' bytes in the source file kept in all "
                      "(factors as written), ranks allocated per matrix from the whitened spectra"));
  so.metadata.emplace_back(
      "lowrank.whitening",
      str(opt.method == CompressMethod::Svd
              ? "none"
              : opt.whitening == compress::Whitening::Eigen      ? "eigen"
                : opt.whitening == compress::Whitening::Cholesky ? "cholesky"
                                                                 : "auto (cholesky, eigen where it fails)"));
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
  // Each job's options: the shared ones with its keep, factor type and storage.
  std::vector<CompressOptions> opts(jobs.size(), opt_in);
  bool any_pivoted = false, one_factor_type = true;
  for (size_t j = 0; j < jobs.size(); ++j) {
    opts[j].keep = jobs[j].keep;
    if (jobs[j].factor_type) opts[j].factor_type = *jobs[j].factor_type;
    if (jobs[j].pivoted) opts[j].pivoted = *jobs[j].pivoted;
    check_factor_type(opts[j].factor_type);
    any_pivoted = any_pivoted || opts[j].pivoted;
    one_factor_type = one_factor_type && opts[j].factor_type == opts[0].factor_type;
  }
  if (opt_in.basis_sharing == 1 || opt_in.basis_sharing < 0)
    fail("--basis-sharing takes a group size of at least 2 (got {})", opt_in.basis_sharing);
  if (opt_in.sequential && (opt_in.method != CompressMethod::Whiten || opt_in.basis_sharing >= 2 ||
                            opt_in.budget != RankBudget::PerMatrix || jobs.size() != 1))
    fail("sequential calibration (--sequential) compresses one --keep with --method whiten, without "
         "--basis-sharing or a global budget");
  if (opt_in.refit && !opt_in.sequential) fail("--refit refits against sequential calibration: add --sequential");
  if (any_pivoted && (opt_in.basis_sharing >= 2 || opt_in.budget != RankBudget::PerMatrix))
    fail("pivoted storage (--pivoted) takes --keep or --rank, without --basis-sharing (a shared "
         "basis is not rows of each layer's matrix) or a global budget");
  for (const std::string& k : opt_in.kinds) block_linear_spec(k);  // known kinds only
  // Weights as stored (a quantized file stays mapped, not widened): each
  // matrix is decoded to f32 only while it is factorized.
  Model m = load_model(in_path, std::nullopt);
  if (!m.file) fail("{}: compress reads GGUF models", in_path);
  const Config& c = m.weights->cfg;
  for_each_linear(*m.weights, [&](const WeightSpec&, int, const Linear& lin) {
    if (lin.low_rank()) fail("{}: the model is already low-rank", in_path);
  });

  const bool need_calib = opt_in.method == CompressMethod::Whiten || opt_in.basis_sharing >= 2;
  const bool allocating = opt_in.budget != RankBudget::PerMatrix;
  if (allocating && opt_in.basis_sharing >= 2)
    fail("a global budget (--budget, --allocate) does not combine with --basis-sharing");
  if (allocating && !opt_in.ranks.empty())
    fail("--rank and a global budget (--budget, --allocate) both choose ranks: pass one");
  if (allocating && !one_factor_type)
    fail("a global budget (--budget, --allocate) weighs one factor type's bytes: pass one --factor-type");
  if (opt_in.residual && opt_in.basis_sharing >= 2)
    fail("the residual form (--residual) corrects each matrix on its own: not with --basis-sharing");
  if (opt_in.residual_rounds > 1 && allocating)
    fail("--residual-rounds refits each matrix's correction at one rank: pass --keep without "
         "--allocate or --budget");
  if (opt_in.residual_rounds < 1)
    fail("--residual-rounds must be at least 1, got {}", opt_in.residual_rounds);
  if (opt_in.residual_rounds > 1 && !opt_in.residual) fail("--residual-rounds refits the residual form: pass --residual");
  if (opt_in.residual && !compress::can_quantize(*opt_in.residual))
    fail("--residual quantizes to a block format (q2_k, q3_k, q4_k, ...), not {}",
         dtype_name(*opt_in.residual));
  int64_t calib_tokens = 0;
  const int64_t granularity = quantized_factors(opts[0].factor_type) ? 32 : 1;  // (one type when allocating)

  // Every job's factors are prefixes of one decomposition at the largest rank
  // any job asks for (U_r sqrt(S_r) and sqrt(S_r) Vt_r S^-1 are leading
  // columns / rows), so each matrix is decomposed once for all jobs.
  std::vector<std::shared_ptr<Weights>> outs;
  std::vector<CompressResult> results(jobs.size());
  for (size_t j = 0; j < jobs.size(); ++j) {
    outs.push_back(std::make_shared<Weights>(*m.weights));  // shares the dense matrices
    results[j].params_before = m.weights->parameters();
  }
  auto selected = [&](const WeightSpec& s) {
    return std::find(opt_in.kinds.begin(), opt_in.kinds.end(), s.kind) != opt_in.kinds.end();
  };
  // A matrix's candidate for an allocation. A residual form's correction may
  // take more than its even share, but its factors are kept until the ranks
  // are chosen: up to 4x the share of the largest budget (at least 128), so
  // they stay a fraction of the model.
  auto candidate = [&](const Matrix& w) {
    compress::RankCandidate cand = rank_candidate(opts[0], w, granularity);
    if (opt_in.residual && allocating) {
      cand.correction = true;
      double share = 0;
      for (const CompressJob& job : jobs)
        share = std::max(share, job.keep * cand.dense_cost / cand.rank_cost);
      const int64_t cap = std::max(int64_t(4 * share), int64_t(128));
      cand.max_rank = (cap + granularity - 1) / granularity * granularity;
    }
    return cand;
  };
  // Every output's factors stay in memory, as they will be stored, until its
  // file is written, and an allocating run holds each matrix's decomposition
  // (f32, at the most rank it may get) until the ranks are chosen: beside the
  // calibration's Grams (up to half the memory) they must fit.
  auto held = [&](const CompressOptions& o, int64_t rows, int64_t cols) {  // a factor [rows, cols]
    const DType t = o.sequential ? DType::F32 : factor_storage_type(o.factor_type, cols);
    return uint64_t(rows) * (t == DType::Q8_0 ? uint64_t(cols + 4 * q8_blocks(cols))
                                              : *row_bytes(t, uint64_t(cols)));
  };
  uint64_t factor_bytes = 0;
  for_each_linear(*m.weights, [&](const WeightSpec& spec, int, const Linear& lin) {
    const int64_t rows = lin.w.rows, cols = lin.w.cols;
    if (!spec.per_layer || !selected(spec) || rows == 0) return;
    if (allocating)
      factor_bytes += uint64_t(compress::useful_rank(candidate(lin.w))) * uint64_t(rows + cols) * 4;
    for (size_t j = 0; j < jobs.size(); ++j) {
      const int64_t r = factor_rank(
          opts[j], spec.kind,
          allocating ? int64_t(opts[j].keep * double(rows) * double(cols) / double(rows + cols))
                     : rank_of(opts[j], spec.kind, rows, cols));
      if (r > 0)
        factor_bytes +=
            held(opts[j], opts[j].pivoted ? rows - r : rows, r) + held(opts[j], r, cols);
    }
  });
  const uint64_t factor_limit =
      opt_in.factor_memory > 0 ? opt_in.factor_memory : available_memory_bytes() / 100 * 45;
  if (factor_limit > 0 && factor_bytes > factor_limit)
    fail("compress: the {} outputs' factors take about {:.2f} GB until they are written, more than "
         "the {:.2f} GB they may (45% of the available memory; the calibration holds up to half): "
         "write fewer at once (fewer --keep, --factor-type or --storage values)",
         jobs.size(), double(factor_bytes) / 1e9, double(factor_limit) / 1e9);
  // Writes job j's rank-r choice of d into its model (r = 0: left dense).
  // Factors are held as they will be written (as_stored_factor: Q8_0 in
  // 9/32 of f32's bytes), except where sequential calibration runs them.
  auto stored = [&](size_t j, const Matrix& f) {
    return opt_in.sequential ? f : as_stored_factor(f, opts[j].factor_type);
  };
  auto assign = [&](size_t j, const Decomposition& d, int64_t r) {
    Matrix basis;
    if (r > 0 && !opts[j].pivoted) basis = stored(j, leading_rows(d.in, r));
    for (int i = d.g0; i < d.g1; ++i) {
      MatrixReport rep{fmt::format("blk.{}.{}", i, d.spec->kind), d.rows, d.cols, r,
                       d.g1 - d.g0 > 1, d.note};
      if (r > 0 || d.cand.correction) rep.loss = truncation_loss(d.sigma, r, d.cand.energy);
      results[j].matrices.push_back(rep);
      Linear& dst = slot_linear(*outs[j], d.spec->slot, i);
      if (d.quantized.rows > 0) dst.w = d.quantized;
      if (r == 0) continue;
      if (d.quantized.rows == 0) dst.w = Matrix();
      if (opts[j].pivoted) {
        if (r >= d.rows)
          fail("{}: pivoted storage needs a rank below the {} rows (got {})", rep.name, d.rows, r);
        compress::PivotedFactors p = compress::pivot_factors(d.outs[0], d.in, r);
        dst.v = stored(j, leading_rows(p.pivots, r));
        dst.u = stored(j, leading_rows(p.coef, p.coef.rows));
        dst.pivots = std::make_shared<const Pivots>(Pivots::make(std::move(p.rows), d.rows, rep.name));
        continue;
      }
      dst.pivots = nullptr;
      dst.v = basis;
      dst.u = stored(j, leading_cols(d.outs[size_t(i - d.g0)], r));
    }
  };
  // Calibration keeps the Grams of all the layers one pass holds (a whole
  // model's, for the 1.5B's 8960-wide ffn_down inputs, would be 20 GB): each
  // pass runs the dense model over the calibration text again, so a model
  // compressed in several passes is the same as one compressed in one.
  const int per_pass = need_calib ? layers_per_pass(c, opt_in) : c.n_layers;
  std::unique_ptr<GramObserver> grams;
  std::unique_ptr<compress::SequentialCalibration> seq;
  if (opt_in.sequential) {
    seq = std::make_unique<compress::SequentialCalibration>(
        m, compress::CalibrationText{opt_in.calib_path, opt_in.calib_samples, opt_in.calib_len,
                                     opt_in.n_threads});
    calib_tokens = seq->tokens();
  }
  // The calibration Gram of layer l's input at `site`.
  auto gram_of = [&](int l, Site site) -> const MatD& {
    return seq ? seq->gram(site) : grams->gram(l, site);
  };
  std::vector<std::vector<float>> wide;  // f32 copies of the matrices being factorized
  std::vector<Decomposition> pending;    // allocating: every matrix, until the ranks are chosen
  for (int l = 0; l < c.n_layers; ++l) {
    if (seq) {
      seq->observe(l, progress);
    } else if (need_calib && l % per_pass == 0) {
      grams.reset();
      grams = calibrate(m, opt_in, l, std::min(c.n_layers, l + per_pass), &calib_tokens, progress);
    }
    for (const WeightSpec& spec : kWeightTable) {
      if (!spec.is_linear() || !spec.per_layer || !selected(spec)) continue;
      const Site site = compress::input_site(spec.slot);
      const bool share = opt_in.basis_sharing >= 2 && site != Site::AttnOut && site != Site::MlpMid;
      const Linear& src = slot_linear(*m.weights, spec.slot, l);
      const int64_t rows = src.w.rows, cols = src.w.cols;
      if (share && l % opt_in.basis_sharing != 0) continue;  // done with the group's first layer
      Decomposition d;
      d.spec = &spec;
      d.g0 = l;
      d.g1 = share ? std::min(c.n_layers, l + opt_in.basis_sharing) : l + 1;
      d.rows = rows;
      d.cols = cols;
      d.cand = candidate(src.w);
      std::vector<int64_t> rank(jobs.size());
      for (size_t j = 0; j < jobs.size(); ++j) {
        const bool explicit_rank = opts[j].ranks.count(spec.kind) || opts[j].ranks.count("all");
        if (allocating)
          rank[j] = compress::useful_rank(d.cand);  // the most an allocation may give it
        else
          rank[j] = share && !explicit_rank
                        ? (opts[j].keep >= 1.0 ? 0
                                               : compress::shared_rank_for_keep(opts[j].keep, rows, cols, d.g1 - d.g0))
                        : rank_of(opts[j], spec.kind, rows, cols);
        rank[j] = factor_rank(opts[j], spec.kind, rank[j]);
      }
      const int64_t r_max = *std::max_element(rank.begin(), rank.end());
      std::string residual_note;
      std::vector<float> dense_buf, imp;  // imp: the Gram's diagonal, each input feature's energy
      const float* dense = nullptr;       // W as f32 (the residual form)
      if (opt_in.residual) {
        if (opt_in.residual_rounds > 1 && std::any_of(rank.begin(), rank.end(), [&](int64_t r) { return r != r_max; }))
          fail("--residual-rounds refits the quantized matrix to one correction: pass one --keep (blk.{}.{} "
               "gets ranks {} and {})", l, spec.kind, *std::min_element(rank.begin(), rank.end()), r_max);
        dense = as_f32(src.w, dense_buf);
        if (need_calib) {
          const MatD& g = gram_of(l, site);
          for (int64_t i = 0; i < cols; ++i) imp.push_back(float(g(i, i)));
        }
        d.quantized = quantize_matrix(*opt_in.residual, dense, rows, cols, imp, opt_in.n_threads, residual_note);
        if (allocating && opt_in.relative_loss) {
          if (need_calib) {
            d.cand.energy = compress::output_energy(dense, rows, cols, gram_of(l, site));
          } else {
            for (int64_t i = 0; i < rows * cols; ++i) d.cand.energy += double(dense[i]) * dense[i];
          }
        }
      }
      compress::WhitenReport wr;
      if (r_max > 0) {
        if (share) {
          std::vector<const float*> Ws;
          MatD gram(cols, cols);
          wide.resize(size_t(d.g1 - d.g0));
          for (int i = d.g0; i < d.g1; ++i) {
            Ws.push_back(as_f32(slot_linear(*m.weights, spec.slot, i).w, wide[size_t(i - d.g0)]));
            const MatD& gi = grams->gram(i, site);
            for (size_t e = 0; e < gram.a.size(); ++e) gram.a[e] += gi.a[e];
          }
          compress::SharedFactors f = compress::shared_factorize(
              Ws, std::vector<int64_t>(Ws.size(), rows), cols, gram, r_max, &wr, opt_in.whitening);
          d.in = std::move(f.basis);
          d.outs = std::move(f.outs);
          d.sigma = std::move(f.sigma);
        } else {
          wide.resize(1);
          const float* W = as_f32(src.w, wide[0]);
          if (d.quantized.rows > 0) W = quantization_error(d.quantized, W, wide[0]);
          auto factorize = [&](const float* A) {
            return opt_in.method == CompressMethod::Svd
                       ? compress::svd_factorize(A, rows, cols, r_max)
                       : compress::whiten_factorize(A, rows, cols, gram_of(l, site), r_max, &wr, opt_in.whitening);
          };
          compress::Factors f = factorize(W);
          for (int round = 1; round < opt_in.residual_rounds && d.quantized.rows > 0; ++round) {
            // Q refitted to what the correction leaves (W - U V), then U V to Q's new error.
            std::vector<float> left(dense, dense + rows * cols);
            subtract_product(f.out, f.in, left.data());
            d.quantized = quantize_matrix(*opt_in.residual, left.data(), rows, cols, imp, opt_in.n_threads,
                                          residual_note);
            f = factorize(quantization_error(d.quantized, dense, wide[0]));
          }
          d.in = std::move(f.in);
          if (seq && opt_in.refit) {  // U: the compressed stream's inputs onto the dense layer's outputs
            std::vector<float> dense_w, q;
            const float* Wd = as_f32(src.w, dense_w);
            const float* Qf = d.quantized.rows > 0 ? as_f32(d.quantized, q) : nullptr;
            f.out = compress::refit_out(Wd, Qf, rows, cols, d.in, r_max, seq->gram(site), seq->cross(site));
          }
          d.outs.push_back(std::move(f.out));
          d.sigma = std::move(f.sigma);
        }
      }
      d.note = wr.note.empty() ? residual_note
                               : residual_note.empty() ? wr.note : residual_note + "; " + wr.note;
      if (allocating) {
        pending.push_back(std::move(d));
      } else {
        for (size_t j = 0; j < jobs.size(); ++j) assign(j, d, rank[j]);
      }
    }
    if (seq) seq->advance(*outs[0], l);
    if (progress) progress(l + 1, c.n_layers, "factorizing");
  }
  for (size_t j = 0; allocating && j < jobs.size(); ++j) {
    // One budget per matrix type (ranks move between layers), or one for
    // all of them. Matrices no rank makes smaller stay dense and spend their
    // share first.
    std::map<std::string, std::vector<const Decomposition*>> groups;
    for (const Decomposition& d : pending)
      groups[opt_in.allocate_scope == AllocateScope::All    ? std::string()
             : opt_in.allocate_scope == AllocateScope::Type ? std::string(d.spec->kind)
                                                            : fmt::format("{}.{}", d.g0, d.spec->kind)]
          .push_back(&d);
    for (const auto& [kind, members] : groups) {
      std::vector<compress::RankCandidate> cands;
      std::vector<const Decomposition*> which;
      double total = 0, fixed = 0;
      for (const Decomposition* d : members) {
        total += d->cand.dense_cost;
        if (d->sigma.empty()) {
          if (!d->cand.correction) fixed += d->cand.dense_cost;  // (no correction costs nothing)
          assign(j, *d, 0);
          continue;
        }
        compress::RankCandidate rc = d->cand;
        rc.sigma = d->sigma;
        cands.push_back(std::move(rc));
        which.push_back(d);
      }
      if (cands.empty()) continue;
      const compress::Allocation a = compress::allocate_ranks(cands, jobs[j].keep * total - fixed);
      for (size_t i = 0; i < which.size(); ++i) assign(j, *which[i], a.ranks[i]);
    }
  }
  pending.clear();

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
