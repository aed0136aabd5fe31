// Writing a model (dense, low-rank or mixed) as GGUF; see docs/lowrank-gguf.md.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "format/gguf.h"
#include "format/tensor_source.h"
#include "model/weights.h"

namespace lr {

struct SaveOptions {
  // Storage type of low-rank factors: F32, F16, BF16, Q8_0, Q4_K, Q5_K or
  // Q6_K (per factor as factor_storage_type decides).
  DType factor_type = DType::F16;
  // Extra metadata (lowrank.method, lowrank.keep, ...), written after the copied keys.
  std::vector<std::pair<std::string, gguf::Value>> metadata;
};

// Writes `w` to `path`. Metadata is copied from `meta` (architecture,
// tokenizer, chat template); every tensor that is still dense and present in
// `src` under its GGUF name is copied byte for byte (keeping its dtype, e.g.
// Q8_0 embeddings); low-rank factors are written in opt.factor_type, a shared
// basis once. Adds lowrank.format_version and lowrank.rank.<kind> (rank per
// layer, 0 = dense).
// What save_gguf wrote: how many matrices (factors, and dense maps not
// copied from the source) went into each type.
struct SaveReport {
  std::map<DType, int> written_types;
};
SaveReport save_gguf(const Weights& w, const gguf::File& meta, const TensorSource& src,
                     const std::string& path, const SaveOptions& opt);

// The type a factor with rows of `cols` values is stored in when `want` is
// asked for: `want` where a row is a whole number of its blocks; otherwise
// Q8_0 where it is a whole number of 32 (a K-quant asked for a row of, say,
// 896), and F16 for anything else (a Q8_0 or K-quant row of, say, 209).
DType factor_storage_type(DType want, int64_t cols);
// Factor f as save_gguf stores it when `want` is asked for (in
// factor_storage_type(want, f.cols)): a writer that keeps many outputs'
// factors until it saves them holds them in this, often smaller, form, and
// save_gguf writes it as it is, the same bytes as from f itself.
Matrix as_stored_factor(const Matrix& f, DType want);
// Throws lr::Error unless t is a type factors can be stored in.
void check_factor_type(DType t);

}  // namespace lr
