#include "compress/compress_model.h"

#include <algorithm>
#include <map>
#include <memory>

#include "compress/compress_jobs.h"
#include "compress/factor_parts.h"
#include "compress/factorize.h"
#include "compress/layer_grams.h"
#include "compress/pivot.h"
#include "compress/sequential.h"
#include "core/error.h"
#include "core/system_memory.h"
#include "format/gguf_source.h"
#include "model/load.h"
#include "model/save.h"

namespace lr {

namespace {

using compress::MatD;
using compress::MatF;
using compress::RankCandidate;

// One matrix (or basis-sharing group) decomposed at the largest rank any job
// needs; each job takes leading rows / columns of it.
struct Decomposition {
  const WeightSpec* spec = nullptr;
  int g0 = 0, g1 = 0;  // layers [g0, g1) (a group shares `in`)
  int64_t rows = 0, cols = 0;
  MatF in;                     // [r_max, cols]
  std::vector<MatF> outs;      // per layer of the group: [rows, r_max]
  std::vector<double> sigma;   // whitened spectrum (empty: not decomposed)
  std::string note;            // regularisation / fallback account
  RankCandidate cand;          // costs for a global budget
  Matrix quantized;            // residual form: Q(W), the factors fit W - Q(W)
  std::vector<int64_t> ranks;  // per job: the rank it asks for (allocating: the most it may get)
};

// One compress run over every job. Every job's factors are prefixes of one
// decomposition at the largest rank any job asks for (U_r sqrt(S_r) and
// sqrt(S_r) Vt_r S^-1 are leading columns / rows), so each matrix is
// decomposed once for all jobs.
class Compressor {
 public:
  Compressor(const std::string& in_path, const std::vector<CompressJob>& jobs,
             const CompressOptions& opt, const CompressProgress& progress);
  std::vector<CompressResult> run();

 private:
  bool selected(const WeightSpec& s) const {
    return std::find(opt_.kinds.begin(), opt_.kinds.end(), s.kind) != opt_.kinds.end();
  }
  RankCandidate candidate(const Matrix& w) const;
  void check_factor_memory() const;
  void calibrate(int l);
  const MatD& gram_of(int l, Site site) const {
    return seq_ ? seq_->gram(site) : grams_->gram(l, site);
  }
  Decomposition decompose(const WeightSpec& spec, int l);
  std::vector<int64_t> job_ranks(const Decomposition& d, bool share) const;
  void factorize_shared(Decomposition& d, Site site, int64_t r_max, compress::WhitenReport& wr);
  void factorize(Decomposition& d, const Linear& src, const float* dense,
                 const std::vector<float>& imp, Site site, int64_t r_max,
                 compress::WhitenReport& wr, std::string& residual_note);
  Matrix stored(size_t j, const Matrix& f) const {
    return opt_.sequential ? f : as_stored_factor(f, opts_[j].factor_type);
  }
  void assign(size_t j, const Decomposition& d, int64_t r);
  void allocate(size_t j);

  const std::vector<CompressJob>& jobs_;
  const CompressOptions& opt_;
  const std::vector<CompressOptions> opts_;  // per job
  const CompressProgress& progress_;
  Model m_;
  const Config& c_;
  const bool need_calib_, allocating_;
  const int per_pass_;         // layers one calibration pass holds the Grams of
  const int64_t granularity_;  // of a quantized factor's rank (one type when allocating)
  int64_t calib_tokens_ = 0;
  std::vector<std::shared_ptr<Weights>> outs_;
  std::vector<CompressResult> results_;
  std::unique_ptr<compress::GramObserver> grams_;
  std::unique_ptr<compress::SequentialCalibration> seq_;
  std::vector<std::vector<float>> wide_;  // f32 copies of the matrices being factorized
  std::vector<Decomposition> pending_;    // allocating: every matrix, until the ranks are chosen
};

// Weights as stored (a quantized file stays mapped, not widened): each
// matrix is decoded to f32 only while it is factorized.
Compressor::Compressor(const std::string& in_path, const std::vector<CompressJob>& jobs,
                       const CompressOptions& opt, const CompressProgress& progress)
    : jobs_(jobs),
      opt_(opt),
      opts_(compress::job_options(jobs, opt)),
      progress_(progress),
      m_(load_model(in_path, std::nullopt)),
      c_(m_.weights->cfg),
      need_calib_(opt.method == CompressMethod::Whiten || opt.basis_sharing >= 2),
      allocating_(opt.budget != RankBudget::PerMatrix),
      per_pass_(need_calib_ ? compress::layers_per_pass(c_, opt) : c_.n_layers),
      granularity_(compress::quantized_factors(opts_[0].factor_type) ? 32 : 1) {
  if (!m_.file) fail("{}: compress reads GGUF models", in_path);
  for_each_linear(*m_.weights, [&](const WeightSpec&, int, const Linear& lin) {
    if (lin.low_rank()) fail("{}: the model is already low-rank", in_path);
  });
  results_.resize(jobs.size());
  for (size_t j = 0; j < jobs.size(); ++j) {
    outs_.push_back(std::make_shared<Weights>(*m_.weights));  // shares the dense matrices
    results_[j].params_before = m_.weights->parameters();
  }
  check_factor_memory();
  if (opt.sequential) {
    seq_ = std::make_unique<compress::SequentialCalibration>(
        m_,
        compress::CalibrationText{opt.calib_path, opt.calib_samples, opt.calib_len, opt.n_threads});
    calib_tokens_ = seq_->tokens();
  }
}

// A matrix's candidate for an allocation. A residual form's correction may
// take more than its even share, but its factors are kept until the ranks
// are chosen: up to 4x the share of the largest budget (at least 128), so
// they stay a fraction of the model.
RankCandidate Compressor::candidate(const Matrix& w) const {
  RankCandidate cand = compress::rank_candidate(opts_[0], w, granularity_);
  if (opt_.residual && allocating_) {
    cand.correction = true;
    double share = 0;
    for (const CompressJob& job : jobs_)
      share = std::max(share, job.keep * cand.dense_cost / cand.rank_cost);
    const int64_t cap = std::max(int64_t(4 * share), int64_t(128));
    cand.max_rank = (cap + granularity_ - 1) / granularity_ * granularity_;
  }
  return cand;
}

// Every output's factors stay in memory, as they will be stored, until its
// file is written, and an allocating run holds each matrix's decomposition
// (f32, at the most rank it may get) until the ranks are chosen: beside the
// calibration's Grams (up to half the memory) they must fit.
void Compressor::check_factor_memory() const {
  auto held = [&](const CompressOptions& o, int64_t rows, int64_t cols) {  // a factor [rows, cols]
    const DType t = o.sequential ? DType::F32 : factor_storage_type(o.factor_type, cols);
    return uint64_t(rows) * (t == DType::Q8_0 ? uint64_t(cols + 2 * q8_blocks(cols))
                                              : *row_bytes(t, uint64_t(cols)));
  };
  uint64_t factor_bytes = 0;
  for_each_linear(*m_.weights, [&](const WeightSpec& spec, int, const Linear& lin) {
    const int64_t rows = lin.w.rows, cols = lin.w.cols;
    if (!spec.per_layer || !selected(spec) || rows == 0) return;
    if (allocating_)
      factor_bytes += uint64_t(compress::useful_rank(candidate(lin.w))) * uint64_t(rows + cols) * 4;
    for (const CompressOptions& o : opts_) {
      const int64_t r = compress::factor_rank(
          o, spec.kind,
          allocating_ ? int64_t(o.keep * double(rows) * double(cols) / double(rows + cols))
                      : compress::rank_of(o, spec.kind, rows, cols));
      if (r > 0) factor_bytes += held(o, o.pivoted ? rows - r : rows, r) + held(o, r, cols);
    }
  });
  const uint64_t limit =
      opt_.factor_memory > 0 ? opt_.factor_memory : available_memory_bytes() / 100 * 45;
  if (limit > 0 && factor_bytes > limit)
    fail(
        "compress: the {} outputs' factors take about {:.2f} GB until they are written, more than "
        "the {:.2f} GB they may (45% of the available memory; the calibration holds up to half): "
        "write fewer at once (fewer --keep, --factor-type or --storage values)",
        jobs_.size(), double(factor_bytes) / 1e9, double(limit) / 1e9);
}

// Calibration keeps the Grams of all the layers one pass holds (a whole
// model's, for the 1.5B's 8960-wide ffn_down inputs, would be 20 GB): each
// pass runs the dense model over the calibration text again, so a model
// compressed in several passes is the same as one compressed in one.
void Compressor::calibrate(int l) {
  if (seq_) return seq_->observe(l, progress_);
  if (!need_calib_ || l % per_pass_ != 0) return;
  grams_.reset();
  grams_ = compress::calibrate(m_, opt_, l, std::min(c_.n_layers, l + per_pass_), &calib_tokens_,
                               progress_);
}

// The rank each job asks of d (allocating: the most an allocation may give it).
std::vector<int64_t> Compressor::job_ranks(const Decomposition& d, bool share) const {
  std::vector<int64_t> rank(jobs_.size());
  const std::string& kind = d.spec->kind;
  for (size_t j = 0; j < jobs_.size(); ++j) {
    const CompressOptions& o = opts_[j];
    const bool explicit_rank = o.ranks.count(kind) || o.ranks.count("all");
    if (allocating_)
      rank[j] = compress::useful_rank(d.cand);
    else if (share && !explicit_rank)
      rank[j] =
          o.keep >= 1.0 ? 0 : compress::shared_rank_for_keep(o.keep, d.rows, d.cols, d.g1 - d.g0);
    else
      rank[j] = compress::rank_of(o, kind, d.rows, d.cols);
    rank[j] = compress::factor_rank(o, kind, rank[j]);
  }
  return rank;
}

// Matrix `spec` of layer l (with basis sharing, of the group it begins): the
// residual form's quantization, then the decomposition at the largest rank.
Decomposition Compressor::decompose(const WeightSpec& spec, int l) {
  const Site site = compress::input_site(spec.slot);
  const bool share = opt_.basis_sharing >= 2 && site != Site::AttnOut && site != Site::MlpMid;
  const Linear& src = slot_linear(*m_.weights, spec.slot, l);
  Decomposition d;
  d.spec = &spec;
  d.g0 = l;
  d.g1 = share ? std::min(c_.n_layers, l + opt_.basis_sharing) : l + 1;
  d.rows = src.w.rows;
  d.cols = src.w.cols;
  d.cand = candidate(src.w);
  d.ranks = job_ranks(d, share);
  const int64_t r_max = *std::max_element(d.ranks.begin(), d.ranks.end());
  std::string residual_note;
  std::vector<float> dense_buf, imp;  // imp: the Gram's diagonal, each input feature's energy
  const float* dense = nullptr;       // W as f32 (the residual form)
  if (opt_.residual) {
    if (opt_.residual_rounds > 1 && *std::min_element(d.ranks.begin(), d.ranks.end()) != r_max)
      fail(
          "--residual-rounds refits the quantized matrix to one correction: pass one --keep "
          "(blk.{}.{} "
          "gets ranks {} and {})",
          l, spec.kind, *std::min_element(d.ranks.begin(), d.ranks.end()), r_max);
    dense = compress::as_f32(src.w, dense_buf);
    if (need_calib_) {
      const MatD& g = gram_of(l, site);
      for (int64_t i = 0; i < d.cols; ++i) imp.push_back(float(g(i, i)));
    }
    d.quantized = compress::quantize_matrix(*opt_.residual, dense, d.rows, d.cols, imp,
                                            opt_.n_threads, residual_note);
    if (allocating_ && opt_.relative_loss) {
      if (need_calib_) {
        d.cand.energy = compress::output_energy(dense, d.rows, d.cols, gram_of(l, site));
      } else {
        for (int64_t i = 0; i < d.rows * d.cols; ++i) d.cand.energy += double(dense[i]) * dense[i];
      }
    }
  }
  compress::WhitenReport wr;
  if (r_max > 0 && share) factorize_shared(d, site, r_max, wr);
  if (r_max > 0 && !share) factorize(d, src, dense, imp, site, r_max, wr, residual_note);
  d.note = wr.note.empty()         ? residual_note
           : residual_note.empty() ? wr.note
                                   : residual_note + "; " + wr.note;
  return d;
}

// A basis-sharing group: one input basis for the layers [g0, g1), whitened
// by the sum of their Grams.
void Compressor::factorize_shared(Decomposition& d, Site site, int64_t r_max,
                                  compress::WhitenReport& wr) {
  std::vector<const float*> Ws;
  MatD gram(d.cols, d.cols);
  wide_.resize(size_t(d.g1 - d.g0));
  for (int i = d.g0; i < d.g1; ++i) {
    Ws.push_back(
        compress::as_f32(slot_linear(*m_.weights, d.spec->slot, i).w, wide_[size_t(i - d.g0)]));
    const MatD& gi = grams_->gram(i, site);
    for (size_t e = 0; e < gram.a.size(); ++e) gram.a[e] += gi.a[e];
  }
  compress::SharedFactors f = compress::shared_factorize(
      Ws, std::vector<int64_t>(Ws.size(), d.rows), d.cols, gram, r_max, &wr, opt_.whitening);
  d.in = std::move(f.basis);
  d.outs = std::move(f.outs);
  d.sigma = std::move(f.sigma);
}

// One matrix (or, in the residual form, its quantization error), refitted
// --residual-rounds times against the quantization, and its output factor
// refitted to the sequential calibration's streams with --refit.
void Compressor::factorize(Decomposition& d, const Linear& src, const float* dense,
                           const std::vector<float>& imp, Site site, int64_t r_max,
                           compress::WhitenReport& wr, std::string& residual_note) {
  const int64_t rows = d.rows, cols = d.cols;
  const int l = d.g0;
  wide_.resize(1);
  const float* W = compress::as_f32(src.w, wide_[0]);
  if (d.quantized.rows > 0) W = compress::quantization_error(d.quantized, W, wide_[0]);
  auto factorize = [&](const float* A) {
    return opt_.method == CompressMethod::Svd
               ? compress::svd_factorize(A, rows, cols, r_max)
               : compress::whiten_factorize(A, rows, cols, gram_of(l, site), r_max, &wr,
                                            opt_.whitening);
  };
  compress::Factors f = factorize(W);
  for (int round = 1; round < opt_.residual_rounds && d.quantized.rows > 0; ++round) {
    // Q refitted to what the correction leaves (W - U V), then U V to Q's new error.
    std::vector<float> left(dense, dense + rows * cols);
    compress::subtract_product(f.out, f.in, left.data());
    d.quantized = compress::quantize_matrix(*opt_.residual, left.data(), rows, cols, imp,
                                            opt_.n_threads, residual_note);
    f = factorize(compress::quantization_error(d.quantized, dense, wide_[0]));
  }
  d.in = std::move(f.in);
  if (seq_ && opt_.refit) {  // U: the compressed stream's inputs onto the dense layer's outputs
    std::vector<float> dense_w, q;
    const float* Wd = compress::as_f32(src.w, dense_w);
    const float* Qf = d.quantized.rows > 0 ? compress::as_f32(d.quantized, q) : nullptr;
    f.out =
        compress::refit_out(Wd, Qf, rows, cols, d.in, r_max, seq_->gram(site), seq_->cross(site));
  }
  d.outs.push_back(std::move(f.out));
  d.sigma = std::move(f.sigma);
}

// Writes job j's rank-r choice of d into its model (r = 0: left dense).
// Factors are held as they will be written (as_stored_factor: Q8_0 in 9/32
// of f32's bytes), except where sequential calibration runs them.
void Compressor::assign(size_t j, const Decomposition& d, int64_t r) {
  Matrix basis;
  if (r > 0 && !opts_[j].pivoted) basis = stored(j, compress::leading_rows(d.in, r));
  for (int i = d.g0; i < d.g1; ++i) {
    MatrixReport rep{
        fmt::format("blk.{}.{}", i, d.spec->kind), d.rows, d.cols, r, d.g1 - d.g0 > 1, d.note};
    if (r > 0 || d.cand.correction) rep.loss = compress::truncation_loss(d.sigma, r, d.cand.energy);
    results_[j].matrices.push_back(rep);
    Linear& dst = slot_linear(*outs_[j], d.spec->slot, i);
    if (d.quantized.rows > 0) dst.w = d.quantized;
    if (r == 0) continue;
    if (d.quantized.rows == 0) dst.w = Matrix();
    if (opts_[j].pivoted) {
      if (r >= d.rows)
        fail("{}: pivoted storage needs a rank below the {} rows (got {})", rep.name, d.rows, r);
      compress::PivotedFactors p = compress::pivot_factors(d.outs[0], d.in, r);
      dst.v = stored(j, compress::leading_rows(p.pivots, r));
      dst.u = stored(j, compress::leading_rows(p.coef, p.coef.rows));
      dst.pivots =
          std::make_shared<const Pivots>(Pivots::make(std::move(p.rows), d.rows, rep.name));
      continue;
    }
    dst.pivots = nullptr;
    dst.v = basis;
    dst.u = stored(j, compress::leading_cols(d.outs[size_t(i - d.g0)], r));
  }
}

// Job j's ranks under its budget: one per matrix type (ranks move between
// layers), or one for all of them. Matrices no rank makes smaller stay dense
// and spend their share first.
void Compressor::allocate(size_t j) {
  std::map<std::string, std::vector<const Decomposition*>> groups;
  for (const Decomposition& d : pending_)
    groups[opt_.allocate_scope == AllocateScope::All    ? std::string()
           : opt_.allocate_scope == AllocateScope::Type ? std::string(d.spec->kind)
                                                        : fmt::format("{}.{}", d.g0, d.spec->kind)]
        .push_back(&d);
  for (const auto& [kind, members] : groups) {
    std::vector<RankCandidate> cands;
    std::vector<const Decomposition*> which;
    double total = 0, fixed = 0;
    for (const Decomposition* d : members) {
      total += d->cand.dense_cost;
      if (d->sigma.empty()) {
        if (!d->cand.correction) fixed += d->cand.dense_cost;  // (no correction costs nothing)
        assign(j, *d, 0);
        continue;
      }
      RankCandidate rc = d->cand;
      rc.sigma = d->sigma;
      cands.push_back(std::move(rc));
      which.push_back(d);
    }
    if (cands.empty()) continue;
    const compress::Allocation a = compress::allocate_ranks(cands, jobs_[j].keep * total - fixed);
    for (size_t i = 0; i < which.size(); ++i) assign(j, *which[i], a.ranks[i]);
  }
}

std::vector<CompressResult> Compressor::run() {
  for (int l = 0; l < c_.n_layers; ++l) {
    calibrate(l);
    for (const WeightSpec& spec : kWeightTable) {
      if (!spec.is_linear() || !spec.per_layer || !selected(spec)) continue;
      const Site site = compress::input_site(spec.slot);
      const bool share = opt_.basis_sharing >= 2 && site != Site::AttnOut && site != Site::MlpMid;
      if (share && l % opt_.basis_sharing != 0) continue;  // done with the group's first layer
      Decomposition d = decompose(spec, l);
      if (allocating_) {
        pending_.push_back(std::move(d));
      } else {
        for (size_t j = 0; j < jobs_.size(); ++j) assign(j, d, d.ranks[j]);
      }
    }
    if (seq_) seq_->advance(*outs_[0], l);
    if (progress_) progress_(l + 1, c_.n_layers, "factorizing");
  }
  for (size_t j = 0; allocating_ && j < jobs_.size(); ++j) allocate(j);
  pending_.clear();
  grams_.reset();
  wide_.clear();
  for (size_t j = 0; j < jobs_.size(); ++j) {
    results_[j].calib_tokens = calib_tokens_;
    results_[j].params_after = outs_[j]->parameters();
    results_[j].factor_types =
        save_gguf(*outs_[j], *m_.file, GgufSource(m_.file), jobs_[j].out_path,
                  compress::save_options(opts_[j], need_calib_))
            .written_types;
  }
  return results_;
}

}  // namespace

std::vector<CompressResult> compress_model(const std::string& in_path,
                                           const std::vector<CompressJob>& jobs,
                                           const CompressOptions& opt,
                                           const CompressProgress& progress) {
  return Compressor(in_path, jobs, opt, progress).run();
}

}  // namespace lr
