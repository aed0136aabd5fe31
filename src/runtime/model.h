// A loaded model: its file, read-only weights and tokenizer. Sessions
// (backends) are created from it and share its weights.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"
#include "core/dtype.h"
#include "format/gguf.h"
#include "model/weights.h"
#include "tokenizer/tokenizer.h"

namespace lr {

enum class ExecPath { Fast, Reference };

struct Model {
  std::string path;
  std::shared_ptr<const gguf::File> file;  // null for HuggingFace directories
  std::shared_ptr<const Weights> weights;
  std::unique_ptr<Tokenizer> tokenizer;
};

// Loads a GGUF file or a HuggingFace directory (config.json, *.safetensors,
// tokenizer.json). Matrices are converted to `wtype` (F32 or BF16).
Model load_model(const std::string& path, DType wtype);

// Weight type each path runs on.
inline DType weight_type_for(ExecPath p) { return p == ExecPath::Reference ? DType::F32 : DType::BF16; }

std::unique_ptr<Backend> make_backend(const Model& m, ExecPath path, const BackendOptions& opt);

}  // namespace lr
