// `lowrank compress`: turns a dense model into the low-rank representation
// with plain SVD, activation-whitened SVD (SVD-LLM v1 closed form) or
// whitened basis sharing across groups of consecutive layers.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "compress/factorize.h"
#include "runtime/model.h"

namespace lr {

enum class CompressMethod { Svd, Whiten };

// How ranks are chosen: every matrix keeps the same fraction of its
// parameters (--keep), or one global budget is spread over the matrices by
// compress/allocate.h, in parameters (--keep with --allocate) or in bytes
// as written against the source file's bytes of those matrices (--budget).
enum class RankBudget { PerMatrix, Parameters, Bytes };
enum class AllocateScope { Matrix, Type, All };

struct CompressOptions {
  double keep = 0.6;               // fraction of each matrix's parameters kept; 1.0 = leave dense
  std::map<std::string, int64_t> ranks;  // explicit rank per kind ("attn_q", ...; -1 = min(m, n))
  CompressMethod method = CompressMethod::Whiten;
  compress::Whitening whitening = compress::Whitening::Auto;
  RankBudget budget = RankBudget::PerMatrix;  // what a job's keep is a fraction of
  // Where a budget may move ranks: nowhere (each matrix spends its own share,
  // the same fraction of its cost: what --keep does), between the layers of
  // each matrix type, or between all the matrices.
  AllocateScope allocate_scope = AllocateScope::Matrix;
  // The loss a budget minimises: each matrix's truncated energy relative to
  // its own (true), or as is (false).
  bool relative_loss = true;
  int basis_sharing = 0;           // group size g >= 2: q, k, v, gate, up share an input basis
  std::vector<std::string> kinds = {"attn_q", "attn_k", "attn_v", "attn_output",
                                    "ffn_gate", "ffn_up", "ffn_down"};
  std::string calib_path;          // calibration text (whiten, basis sharing)
  int calib_samples = 64;
  int calib_len = 512;
  // Bytes for the calibration Grams of the layers one pass collects (0 =
  // half the available memory). A model whose Grams do not fit is calibrated
  // in several passes, each over the whole calibration text.
  uint64_t calib_memory = 0;
  // Bytes the outputs' factors may take in memory (as they will be stored,
  // until each file is written; with a global budget also every matrix's f32
  // decomposition until the ranks are chosen; 0 = 45% of the available
  // memory, the Grams holding up to half).
  uint64_t factor_memory = 0;
  int n_threads = 2;
  // F16, BF16, F32, or quantized: Q8_0, Q4_K, Q5_K, Q6_K (model/save.h
  // factor_storage_type); with a quantized type the ranks --keep gives are
  // rounded down to a multiple of 32, so output factors are whole Q8_0 rows.
  DType factor_type = DType::F16;
  // The residual form W ~ Q(W) + U V: W quantized to this block format
  // (compress/quantize.h; activation-weighted by the Gram's diagonal when
  // calibrated), then the factors fitted to W - Q(W); keep sizes the
  // correction. Unset: plain low rank.
  std::optional<DType> residual;
  // Rounds of the residual form's fit (>= 1): after the first, W - U V is
  // quantized again and the factors refitted to the new error, each round
  // (the alternating fit of CALDERA and LoftQ). More than one needs every
  // job at one rank (the quantized W depends on the correction).
  int residual_rounds = 1;
  // Pivoted storage (compress/pivot.h): each matrix's factors written as r of
  // its rows plus coefficients for the others, at the rank r (m + n - r)
  // <= keep m n affords (higher than r (m + n) <= keep m n). Not with basis
  // sharing or a global budget.
  bool pivoted = false;
  // Sequential calibration (compress/sequential.h): layer l is whitened with
  // the inputs the compressed layers before it produce. Whitened, one job,
  // not with basis sharing or a global budget.
  bool sequential = false;
  // With sequential: each output factor refitted by least squares to the
  // dense layer's outputs from its dense inputs (measured worse on SmolLM2,
  // docs/results/compression.md).
  bool refit = false;
};

struct MatrixReport {
  std::string name;   // e.g. "blk.3.attn_q"
  int64_t m = 0, n = 0, rank = 0;  // rank 0 = kept dense
  bool shared = false;
  std::string note;   // regularisation / fallback account
  double loss = 0;    // whitened truncation loss at this rank / the matrix's energy (0 when dense)
};

struct CompressResult {
  std::vector<MatrixReport> matrices;
  uint64_t params_before = 0, params_after = 0;  // whole model, shared bases once
  int64_t calib_tokens = 0;
  std::map<DType, int> factor_types;  // factor tensors written per type
};

// Per-layer progress: (layers done, total layers, phase).
using CompressProgress = std::function<void(int, int, const char*)>;

struct CompressJob {
  double keep;  // the fraction kept: of each matrix (PerMatrix) or of all of them (a budget)
  std::string out_path;
  // This job's factor storage and pivoting, when it differs from the options'.
  std::optional<DType> factor_type = std::nullopt;
  std::optional<bool> pivoted = std::nullopt;
};

// Compresses the dense model at `in_path` once per job (opt.keep, and where a
// job sets them opt.factor_type and opt.pivoted, replaced by the job's): the
// calibration pass runs once, and each matrix is decomposed once at the
// largest rank any job needs, for all of them.
std::vector<CompressResult> compress_model(const std::string& in_path,
                                           const std::vector<CompressJob>& jobs,
                                           const CompressOptions& opt,
                                           const CompressProgress& progress = {});

}  // namespace lr
