// Writing a model (dense, low-rank or mixed) as GGUF; see docs/lowrank-gguf.md.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "format/gguf.h"
#include "format/tensor_source.h"
#include "model/weights.h"

namespace lr {

struct SaveOptions {
  DType factor_type = DType::F16;  // storage type of low-rank factors (F32, F16, BF16)
  // Extra metadata (lowrank.method, lowrank.keep, ...), written after the copied keys.
  std::vector<std::pair<std::string, gguf::Value>> metadata;
};

// Writes `w` to `path`. Metadata is copied from `meta` (architecture,
// tokenizer, chat template); every tensor that is still dense and present in
// `src` under its GGUF name is copied byte for byte (keeping its dtype, e.g.
// Q8_0 embeddings); low-rank factors are written in opt.factor_type, a shared
// basis once. Adds lowrank.format_version and lowrank.rank.<kind> (rank per
// layer, 0 = dense).
void save_gguf(const Weights& w, const gguf::File& meta, const TensorSource& src,
               const std::string& path, const SaveOptions& opt);

}  // namespace lr
