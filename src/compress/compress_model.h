// `lowrank compress`: turns a dense model into the low-rank representation
// with plain SVD, activation-whitened SVD (SVD-LLM v1 closed form) or
// whitened basis sharing across groups of consecutive layers.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "runtime/model.h"

namespace lr {

enum class CompressMethod { Svd, Whiten };

struct CompressOptions {
  double keep = 0.6;               // fraction of each matrix's parameters kept; 1.0 = leave dense
  std::map<std::string, int64_t> ranks;  // explicit rank per kind ("attn_q", ...; -1 = min(m, n))
  CompressMethod method = CompressMethod::Whiten;
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
  int n_threads = 2;
  // F16, BF16, F32, or quantized: Q8_0, Q4_K, Q5_K, Q6_K (model/save.h
  // factor_storage_type); with a quantized type the ranks --keep gives are
  // rounded down to a multiple of 32, so output factors are whole Q8_0 rows.
  DType factor_type = DType::F16;
};

struct MatrixReport {
  std::string name;   // e.g. "blk.3.attn_q"
  int64_t m = 0, n = 0, rank = 0;  // rank 0 = kept dense
  bool shared = false;
  std::string note;   // regularisation / fallback account
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
  double keep;
  std::string out_path;
};

// Compresses the dense model at `in_path` once per job (opt.keep is replaced by
// each job's keep); the calibration pass runs once for all of them.
std::vector<CompressResult> compress_model(const std::string& in_path,
                                           const std::vector<CompressJob>& jobs,
                                           const CompressOptions& opt,
                                           const CompressProgress& progress = {});

}  // namespace lr
