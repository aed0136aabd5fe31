// `lowrank quantize`: re-encodes a model's per-layer linear maps in one GGUF
// block format with lowrank's own quantizers (compress/quantize.h), plain or
// activation-weighted; every other tensor is copied as stored.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "compress/calibration.h"
#include "core/dtype.h"

namespace lr {

struct QuantizeOptions {
  // The per-layer maps re-encoded; "output" adds the output head (with tied
  // embeddings: the embeddings, which are the head), plainly quantized.
  std::vector<std::string> kinds = {"attn_q",   "attn_k", "attn_v",  "attn_output",
                                    "ffn_gate", "ffn_up", "ffn_down"};
  // Non-empty path: activation-weighted, each column's error weighted by
  // the mean square of that input feature over the calibration text.
  compress::CalibrationText calib;
  // A matrix whose rows are not a whole number of the format's blocks is an
  // error, unless `fallback`: then it is stored in the type llama.cpp
  // chooses for it (fallback_type).
  bool fallback = false;
  int n_threads = 2;
};

struct QuantizeReport {
  std::map<DType, int> types;                  // matrices written per type
  std::vector<std::string> fell_back;          // "blk.0.attn_q.weight: Q4_0"
  uint64_t bytes_before = 0, bytes_after = 0;  // of the re-encoded matrices
  int64_t calib_tokens = 0;
};

// The type a matrix with rows of `cols` values gets when `want` does not
// fit them: Q2_K, Q3_K -> Q4_0; Q4_K -> Q5_0; Q5_K -> Q5_1; Q6_K -> Q8_0
// (llama.cpp's substitutes, with Q4_0 for its IQ4_NL).
DType fallback_type(DType want);

struct QuantizeJob {
  DType type;
  std::string out_path;
};

// One output per job; the calibration pass (when asked for) runs once for all.
std::vector<QuantizeReport> quantize_model(const std::string& in_path,
                                           const std::vector<QuantizeJob>& jobs,
                                           const QuantizeOptions& opt,
                                           const compress::CalibrationProgress& progress = {});

}  // namespace lr
