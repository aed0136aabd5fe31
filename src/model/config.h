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

// The gate's activation of the gated FFN: silu(gate) * up (SwiGLU), or
// gelu(gate) * up with GELU's tanh form (GeGLU, Gemma).
enum class Activation : uint8_t { Silu, GeluTanh };

struct Config {
  std::string name;            // general.name, for messages
  std::string arch = "llama";  // general.architecture (one of supported_architectures())
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
  // Partial RoPE (Phi-4-mini): only the first rope_dims of each head turn,
  // the rest pass through (0: all of head_dim).
  int rope_dims = 0;
  // LongRoPE (Phi-3): rope_freq_factors are the short factors; a session
  // whose context exceeds rope_orig_ctx uses these instead (as llama.cpp
  // chooses them, by the context size). Empty: none.
  std::vector<float> rope_factors_long;
  int rope_orig_ctx = 0;
  // The turned pairs are scaled by this too (rope.scaling.attn_factor:
  // LongRoPE's magnitude correction), the passing ones not.
  float rope_mscale = 1.f;
  bool tied_output = false;    // output head shares the token embedding
  // The file's q/k rows keep each head's two RoPE halves apart (NEOX RoPE,
  // as Qwen2 GGUFs store them); the loader permutes them into the runtime's
  // interleaved order, so nothing after loading depends on it.
  bool rope_neox = false;
  // Each head of q and of k is RMS-normalized (a weight [head_dim] per layer)
  // before RoPE (Qwen3).
  bool qk_norm = false;
  // OLMo 2: the q/k norms span the whole of q and of k (weights [q_dim],
  // [kv_dim]) rather than each head; and the blocks have no norms before
  // attention and the FFN (their inputs are x itself).
  bool qk_norm_full = false;
  bool pre_norms = true;
  // Gemma 3: the embedding scaled (by sqrt(dim)), the attention and FFN
  // outputs RMS-normalized before their residual adds, GeGLU, and
  // sliding-window layers with a RoPE base of their own.
  float embed_scale = 1.f;  // x = embed_scale * tok_embd[token]
  float attn_scale = 0.f;   // scores = attn_scale * q.k (0: 1 / sqrt(head_dim))
  bool post_norms = false;
  Activation ffn_act = Activation::Silu;
  int swa_window = 0;               // a windowed layer's query sees its last swa_window positions
  std::vector<uint8_t> swa_layers;  // [n_layers] 1: windowed (empty: no layer is)
  float rope_theta_swa = 10000.f;   // windowed layers' RoPE base (unscaled)
  std::vector<uint8_t> no_rope_layers;  // [n_layers] 1: q and k are not roped (SmolLM3), or empty
  // Granite: x += residual_scale * (a block's output); logits = head / logit_scale
  // (and embed_scale, attn_scale above).
  float residual_scale = 1.f;
  float logit_scale = 1.f;

  bool windowed(int layer) const { return !swa_layers.empty() && swa_layers[size_t(layer)]; }
  // Layer l's RoPE frequencies (scalar_ops.h rope_inv_freq): 0 the model's,
  // 1 a windowed layer's, 2 none (a layer without RoPE: every angle 0).
  uint8_t rope_set(int layer) const {
    if (!no_rope_layers.empty() && no_rope_layers[size_t(layer)]) return 2;
    return windowed(layer) ? 1 : 0;
  }
  float attention_scale() const;

  int rotary_dims() const { return rope_dims > 0 ? rope_dims : head_dim; }
  int q_dim() const { return n_heads * head_dim; }
  int kv_dim() const { return n_kv_heads * head_dim; }

  // Throws lr::Error naming `source` and the offending field.
  void validate(const std::string& source) const;
};

// The architectures lowrank runs, comma-separated for messages.
std::string supported_architectures();

// Sets c.arch and what comes with the architecture alone (rope_neox,
// qk_norm; Gemma 3's post-norms and GeGLU; OLMo 2's norms); an architecture
// lowrank does not run is an error naming `source` and the supported list.
void set_architecture(const std::string& source, const std::string& arch, Config& c);
// Every how many layers the architecture's GGUF has one without RoPE (layer
// l has none when (l + 1) % n == 0: SmolLM3's 4, as llama.cpp fixes it); 0: none.
int no_rope_interval(const std::string& arch);

// Reads `<arch>.*` metadata for a supported architecture: llama, mistral,
// smollm, qwen2 (q/k/v biases, NEOX RoPE), qwen3 (NEOX RoPE, q/k norms).
// Tied output is decided by the caller from the presence of `output.weight`.
Config config_from_gguf(const gguf::File& f);

// The inverse of config_from_gguf: `<arch>.*` keys, general.architecture and
// general.name (the vocabulary size as <arch>.vocab_size; no tokenizer), for
// the architecture c.arch.
void config_to_gguf(const Config& c, gguf::Writer& w);

// A SentencePiece-style vocabulary of `vocab` pieces (at least 259): <unk>,
// <s>, </s>, the 256 byte tokens (so every text encodes byte by byte), then
// filler pieces "<fillN>". For synthetic and test models.
void byte_vocab_to_gguf(int vocab, gguf::Writer& w);

// Reads a HuggingFace config.json (model/config_hf.cpp): model_type llama,
// mistral, qwen2, qwen3, gemma3_text (Gemma3ForCausalLM), smollm3, granite,
// phi3 and olmo2, each key as llama.cpp's convert_hf_to_gguf.py maps it to
// the metadata config_from_gguf reads. What lowrank does not run (Gemma's
// final logit softcapping, a sliding window on SmolLM3 or OLMo 2, RoPE
// scaling other than linear, llama3 and longrope, another FFN activation)
// is an error naming the file and the field.
Config config_from_hf_json(const std::string& path);

}  // namespace lr
