// Hyper-parameters of a LLaMA-family decoder, read from GGUF metadata or a
// HuggingFace config.json, and checked for consistency before anything is sized
// from them.
#pragma once

#include <string>
#include <vector>

namespace lr {
namespace gguf {
class File;
class Writer;
}

struct Config {
  std::string name;            // general.name, for messages
  int n_layers = 0;
  int dim = 0;                 // residual stream width
  int ffn_dim = 0;             // SwiGLU hidden width
  int n_heads = 0;             // query heads
  int n_kv_heads = 0;          // key/value heads (GQA: n_heads % n_kv_heads == 0)
  int head_dim = 0;
  int vocab = 0;
  int ctx_train = 0;           // context length the model was trained for
  float rms_eps = 1e-5f;
  float rope_theta = 10000.f;
  float rope_linear_factor = 1.f;  // positions are divided by this (linear RoPE scaling)
  // Llama-3.1-style RoPE scaling: frequency i is divided by factor i
  // ([head_dim / 2]; the GGUF tensor rope_freqs.weight, or computed from a
  // config.json's rope_scaling "llama3"). Empty: none.
  std::vector<float> rope_freq_factors;
  bool tied_output = false;    // output head shares the token embedding
  // The file's q/k rows keep each head's two RoPE halves apart (NEOX RoPE,
  // as Qwen2 GGUFs store them); the loader permutes them into the runtime's
  // interleaved order, so nothing after loading depends on it.
  bool rope_neox = false;

  int q_dim() const { return n_heads * head_dim; }
  int kv_dim() const { return n_kv_heads * head_dim; }

  // Throws lr::Error naming `source` and the offending field.
  void validate(const std::string& source) const;
};

// Reads `llama.*` (or `<arch>.*` for LLaMA-compatible architectures: mistral,
// smollm, qwen2 (q/k/v biases, NEOX RoPE)) metadata.
// Tied output is decided by the caller from the presence of `output.weight`.
Config config_from_gguf(const gguf::File& f);

// The inverse of config_from_gguf: `<arch>.*` keys, general.architecture and
// general.name (the vocabulary size as <arch>.vocab_size; no tokenizer).
void config_to_gguf(const Config& c, gguf::Writer& w, const std::string& arch = "llama");

// A SentencePiece-style vocabulary of `vocab` pieces (at least 259): <unk>,
// <s>, </s>, the 256 byte tokens (so every text encodes byte by byte), then
// filler pieces "<fillN>". For synthetic and test models.
void byte_vocab_to_gguf(int vocab, gguf::Writer& w);

// Reads a HuggingFace config.json (LlamaForCausalLM and compatible).
Config config_from_hf_json(const std::string& path);

}  // namespace lr
