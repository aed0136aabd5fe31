// A loaded model: its file, read-only weights and tokenizer. Sessions
// (runtime/session.h) are created from it and share its weights.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "core/dtype.h"
#include "format/gguf.h"
#include "model/weights.h"
#include "tokenizer/tokenizer.h"

namespace lr {

struct Model {
  std::string path;
  std::shared_ptr<const gguf::File> file;  // null for HuggingFace directories
  std::shared_ptr<const Weights> weights;
  std::unique_ptr<Tokenizer> tokenizer;
};

// Loads a GGUF file or a HuggingFace directory (config.json, *.safetensors,
// tokenizer.json). Matrices are converted to `wtype` (F32, F16, BF16, Q8_0),
// or kept as stored with nullopt (model/load.h).
Model load_model(const std::string& path, std::optional<DType> wtype);

// Weight type the fast path runs on by default. F16 rather than BF16: the
// default model's Q4_1 values (d*q + m) keep ~11 significant bits in F16 and
// only 8 in BF16, which is enough to flip greedy choices (see README).
inline constexpr DType kDefaultFastWeightType = DType::F16;

// "f16" | "bf16" | "f32" | "q8_0" -> DType; throws lr::Error naming the accepted values.
DType parse_weight_type(const std::string& name);
// The storage of low-rank factors: those, or "q6_k" | "q5_k" | "q4_k".
DType parse_factor_type(const std::string& name);
// The weight type, or "auto" -> nullopt: every matrix as stored (the default of run,
// perplexity and bench).
std::optional<DType> parse_run_weight_type(const std::string& name);
// "auto" | the names above: what --wtype accepts.
inline constexpr const char* kWeightTypeHelp =
    "weight type: auto (as stored in the file: Q4_K, Q6_K, Q4_1, ... computed in their blocks), "
    "f16, bf16, f32 or q8_0 (int8, a scale per 32 values)";

}  // namespace lr
