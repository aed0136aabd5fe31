#include "compress/compress_jobs.h"

#include "compress/factorize.h"
#include "compress/pivot.h"
#include "compress/quantize.h"
#include "core/error.h"

namespace lr::compress {

std::vector<CompressOptions> job_options(const std::vector<CompressJob>& jobs,
                                         const CompressOptions& opt_in) {
  if (jobs.empty()) fail("compress: nothing to do (no output)");
  for (const CompressJob& j : jobs)
    if (!(j.keep > 0 && j.keep <= 1)) fail("--keep must be in (0, 1], got {}", j.keep);
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
    fail(
        "sequential calibration (--sequential) compresses one --keep with --method whiten, without "
        "--basis-sharing or a global budget");
  if (opt_in.refit && !opt_in.sequential)
    fail("--refit refits against sequential calibration: add --sequential");
  if (any_pivoted && (opt_in.basis_sharing >= 2 || opt_in.budget != RankBudget::PerMatrix))
    fail(
        "pivoted storage (--pivoted) takes --keep or --rank, without --basis-sharing (a shared "
        "basis is not rows of each layer's matrix) or a global budget");
  for (const std::string& k : opt_in.kinds) block_linear_spec(k);  // known kinds only
  const bool allocating = opt_in.budget != RankBudget::PerMatrix;
  if (allocating && opt_in.basis_sharing >= 2)
    fail("a global budget (--budget, --allocate) does not combine with --basis-sharing");
  if (allocating && !opt_in.ranks.empty())
    fail("--rank and a global budget (--budget, --allocate) both choose ranks: pass one");
  if (allocating && !one_factor_type)
    fail(
        "a global budget (--budget, --allocate) weighs one factor type's bytes: pass one "
        "--factor-type");
  if (opt_in.residual && opt_in.basis_sharing >= 2)
    fail(
        "the residual form (--residual) corrects each matrix on its own: not with --basis-sharing");
  if (opt_in.residual_rounds > 1 && allocating)
    fail(
        "--residual-rounds refits each matrix's correction at one rank: pass --keep without "
        "--allocate or --budget");
  if (opt_in.residual_rounds < 1)
    fail("--residual-rounds must be at least 1, got {}", opt_in.residual_rounds);
  if (opt_in.residual_rounds > 1 && !opt_in.residual)
    fail("--residual-rounds refits the residual form: pass --residual");
  if (opt_in.residual && !can_quantize(*opt_in.residual))
    fail("--residual quantizes to a block format (q2_k, q3_k, q4_k, ...), not {}",
         dtype_name(*opt_in.residual));
  return opts;
}

bool quantized_factors(DType t) {
  return t == DType::Q8_0 || is_block_format(t);
}

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
  return opt.pivoted ? pivoted_rank_for_keep(opt.keep, m, n) : rank_for_keep(opt.keep, m, n);
}

// The costs a global budget weighs for dense matrix w (sigma filled later
// with zeros of its length, so useful_rank can be asked first): parameters,
// or bytes as written (the source's bytes dense; a row of V and a column of
// U in the factor type; a quantized U column counted at Q8_0's 34/32 bytes
// per value, what a rank that is not a multiple of 256 is written in).
RankCandidate rank_candidate(const CompressOptions& opt, const Matrix& w, int64_t granularity) {
  RankCandidate c;
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
      "lowrank.method",
      str(opt.residual ? fmt::format("residual({})+{}", dtype_name(*opt.residual), stored)
                       : stored));
  so.metadata.emplace_back("lowrank.keep", keep);
  so.metadata.emplace_back(
      "lowrank.keep_meaning",
      str(opt.budget == RankBudget::PerMatrix
              ? (opt.pivoted
                     ? "fraction of each compressed matrix's parameters kept: pivoted storage, "
                       "the largest rank r < min(m, n) with r*(m+n-r) <= keep*m*n; keep 1 leaves "
                       "matrices dense"
                     : "fraction of each compressed matrix's parameters kept: rank = "
                       "floor(keep*m*n/(m+n)) (basis sharing: floor(keep*g*m*n/(n+g*m))); keep 1 "
                       "leaves matrices dense")
          : opt.residual
              ? (opt.budget == RankBudget::Parameters
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
  so.metadata.emplace_back("lowrank.whitening", str(opt.method == CompressMethod::Svd   ? "none"
                                                    : opt.whitening == Whitening::Eigen ? "eigen"
                                                    : opt.whitening == Whitening::Cholesky
                                                        ? "cholesky"
                                                        : "auto (cholesky, eigen where it fails)"));
  so.metadata.emplace_back(
      "lowrank.calibration",
      str(calibrated ? fmt::format("{}: {} samples x {} tokens", opt.calib_path, opt.calib_samples,
                                   opt.calib_len)
                     : "none"));
  return so;
}

}  // namespace lr::compress
