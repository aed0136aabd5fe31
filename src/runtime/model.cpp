#include "runtime/model.h"

#include <filesystem>

#include "core/error.h"
#include "format/gguf_source.h"
#include "format/safetensors.h"
#include "model/config.h"
#include "model/load.h"

namespace lr {

namespace fs = std::filesystem;

Model load_model(const std::string& path, std::optional<DType> wtype) {
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    if (path == default_model_path())
      fail("default model not found at {}: run scripts/fetch-model.sh to download it, or pass -m",
           path);
    fail("{}: no such file or directory", path);
  }
  Model m;
  m.path = path;
  if (fs::is_directory(path, ec)) {
    Config cfg = config_from_hf_json(path + "/config.json");
    auto src = SafetensorsSource::open_dir(path);
    m.weights = load_weights(cfg, *src, Naming::HuggingFace, wtype);
    m.tokenizer = Tokenizer::from_hf_json(path + "/tokenizer.json");
  } else {
    m.file = gguf::File::open(path);
    Config cfg = config_from_gguf(*m.file);
    m.weights = load_weights(cfg, GgufSource(m.file), Naming::Gguf, wtype);
    m.tokenizer = Tokenizer::from_gguf(*m.file);
  }
  if (m.tokenizer->n_vocab() != m.weights->cfg.vocab)
    fail("{}: tokenizer has {} tokens but the model's vocabulary is {}", path,
         m.tokenizer->n_vocab(), m.weights->cfg.vocab);
  return m;
}

DType parse_weight_type(const std::string& name) {
  if (name == "f16") return DType::F16;
  if (name == "bf16") return DType::BF16;
  if (name == "f32") return DType::F32;
  if (name == "q8_0") return DType::Q8_0;
  fail("unknown weight type '{}' (expected f16, bf16, f32 or q8_0)", name);
}

DType parse_factor_type(const std::string& name) {
  if (name == "q4_k") return DType::Q4_K;
  if (name == "q5_k") return DType::Q5_K;
  if (name == "q6_k") return DType::Q6_K;
  if (name == "f16" || name == "bf16" || name == "f32" || name == "q8_0") return parse_weight_type(name);
  fail("unknown factor type '{}' (expected f16, bf16, f32, q8_0, q6_k, q5_k or q4_k)", name);
}

std::optional<DType> parse_run_weight_type(const std::string& name) {
  if (name == "auto") return std::nullopt;
  return parse_weight_type(name);
}

}  // namespace lr
