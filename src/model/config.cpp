#include "model/config.h"

#include <fmt/ranges.h>

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "format/gguf.h"

namespace lr {

namespace {

// The architectures the plan runs: the LLaMA block (RMSNorm, RoPE, GQA,
// SwiGLU) and what each adds to it.
struct Arch {
  const char* name;
  bool rope_neox;         // q/k rows stored with each head's RoPE halves apart
  bool qk_norm;           // per-head RMSNorm of q and k before RoPE
  bool gemma = false;     // Gemma 3's block (Config's Gemma fields)
  int no_rope_every = 0;  // layers l with (l + 1) % no_rope_every == 0 have no RoPE (SmolLM3: 4)
  bool granite = false;   // Granite's multipliers (Config's Granite fields)
  bool olmo2 = false;     // no pre-norms, norms after attention and the FFN, full-width q/k norms
};
// clang-format off
constexpr Arch kArchs[] = {
    {"llama", false, false},
    {"mistral", false, false},
    {"smollm", false, false},
    {"qwen2", true, false},
    {"qwen3", true, true},
    {"gemma3", true, true, true},
    {"smollm3", false, false, false, 4},
    {"granite", false, false, false, 0, true},
    {"phi3", true, false},
    {"olmo2", true, true, false, 0, false, true},
};
// clang-format on

const Arch* find_arch(const std::string& name) {
  for (const Arch& a : kArchs)
    if (name == a.name) return &a;
  return nullptr;
}

int positive_int(const std::string& source, const char* field, int64_t v) {
  if (v <= 0 || v > (int64_t(1) << 30))
    fail("{}: field '{}' = {} is out of range (expected 1..2^30)", source, field, v);
  return int(v);
}

}  // namespace

float Config::attention_scale() const {
  return attn_scale > 0 ? attn_scale : 1.f / std::sqrt(float(head_dim));
}

void Config::validate(const std::string& source) const {
  auto need = [&](bool ok, const std::string& what) {
    if (!ok) fail("{}: inconsistent model config: {}", source, what);
  };
  need(n_layers > 0, fmt::format("block_count = {}", n_layers));
  need(dim > 0 && ffn_dim > 0 && vocab > 0, "dimensions must be positive");
  need(n_heads > 0 && n_kv_heads > 0, "head counts must be positive");
  need(n_heads % n_kv_heads == 0,
       fmt::format("head_count {} is not a multiple of head_count_kv {}", n_heads, n_kv_heads));
  need(head_dim > 0 && head_dim % 2 == 0,
       fmt::format("head_dim {} must be positive and even", head_dim));
  need(rms_eps > 0 && rms_eps < 1, fmt::format("rms epsilon {} out of range", rms_eps));
  need(rope_theta > 0, fmt::format("rope freq_base {} must be positive", rope_theta));
  need(rope_linear_factor > 0, "rope scaling factor must be positive");
  need(rope_dims >= 0 && rope_dims <= head_dim && rope_dims % 2 == 0,
       fmt::format("rotary dims {} must be even and within head_dim {}", rope_dims, head_dim));
  for (const std::vector<float>* fs : {&rope_freq_factors, &rope_factors_long}) {
    need(fs->empty() || fs->size() == size_t(rotary_dims() / 2),
         fmt::format("{} RoPE frequency factors for {} rotary dims", fs->size(), rotary_dims()));
    for (float f : *fs)
      need(std::isfinite(f) && f > 0, fmt::format("RoPE frequency factor {} must be positive", f));
  }
  need(rope_factors_long.empty() || !rope_freq_factors.empty(),
       "LongRoPE's long factors without its short ones");
  need(std::isfinite(rope_mscale) && rope_mscale > 0,
       fmt::format("RoPE attention factor {} must be positive", rope_mscale));
  need(swa_layers.empty() || (swa_layers.size() == size_t(n_layers) && swa_window > 0),
       fmt::format("{} sliding-window layer flags for {} layers, window {}", swa_layers.size(),
                   n_layers, swa_window));
  need(rope_theta_swa > 0,
       fmt::format("sliding-window rope freq_base {} must be positive", rope_theta_swa));
}

namespace {

// A RoPE factor tensor: F32 [rotary_dims / 2], or absent.
std::vector<float> rope_factor_tensor(const gguf::File& f, const Config& c, const char* name,
                                      const char* what) {
  const gguf::TensorInfo* t = f.find_tensor(name);
  if (!t) return {};
  const uint64_t n = uint64_t(c.rotary_dims() / 2);
  if (t->dtype != DType::F32 || t->shape.size() != 1 || t->shape[0] != n)
    fail("{}: tensor '{}' ({}) is {} of shape {}, expected F32 of shape [{}] (rotary dims / 2)",
         f.path(), name, what, dtype_name(t->dtype), fmt::join(t->shape, " x "), n);
  std::vector<float> v(n);
  std::memcpy(v.data(), t->data, n * 4);
  return v;
}

// RoPE beyond its base: partial rotary dimensions, Llama 3's frequency
// factors (rope_freqs), LongRoPE's short and long factors (Phi-3) with the
// context they switch at, the magnitude factor.
void read_rope_factors(const gguf::File& f, const std::string& arch, Config& c) {
  auto key = [&](const char* k) { return arch + "." + k; };
  const int64_t dims = f.get_int(key("rope.dimension_count"), c.head_dim);
  if (dims <= 0 || dims > c.head_dim || dims % 2)
    fail("{}: rope.dimension_count {} must be even and within head_dim {}", f.path(), dims,
         c.head_dim);
  c.rope_dims = int(dims);
  c.rope_freq_factors = rope_factor_tensor(f, c, "rope_freqs.weight", "RoPE frequency factors");
  std::vector<float> lo = rope_factor_tensor(f, c, "rope_factors_short.weight", "LongRoPE");
  std::vector<float> hi = rope_factor_tensor(f, c, "rope_factors_long.weight", "LongRoPE");
  if (lo.empty() != hi.empty())
    fail("{}: LongRoPE needs both 'rope_factors_short.weight' and 'rope_factors_long.weight'",
         f.path());
  if (!lo.empty() && !c.rope_freq_factors.empty())
    fail("{}: both 'rope_freqs.weight' and LongRoPE factors are present", f.path());
  if (!lo.empty()) {
    c.rope_freq_factors = std::move(lo);
    c.rope_factors_long = std::move(hi);
  }
  c.rope_orig_ctx = int(f.get_int(key("rope.scaling.original_context_length"), c.ctx_train));
  c.rope_mscale = float(f.get_float(key("rope.scaling.attn_factor"), 1.0));
}

// Gemma 3 (llama.cpp's reading of its keys): the embedding scaled by
// sqrt(dim); layer l windowed unless l % pattern == pattern - 1 (pattern 6
// unless the file says), the windowed layers' RoPE base 10000 unless the
// file says; scores scaled by 1/sqrt(head_dim) (the 27B's 62 layers:
// 1/sqrt(dim / heads)).
void read_gemma3(const gguf::File& f, const std::string& arch, Config& c) {
  auto key = [&](const char* k) { return arch + "." + k; };
  const std::string& src = f.path();
  c.embed_scale = std::sqrt(float(c.dim));  // (post_norms, ffn_act: set_architecture)
  if (c.n_layers == 62) c.attn_scale = 1.f / std::sqrt(float(c.dim / c.n_heads));
  if (f.get_float(key("final_logit_softcapping"), 0.0) != 0.0)
    fail("{}: final logit softcapping ('{}') is not supported", src,
         key("final_logit_softcapping"));
  const int64_t window = f.get_int(key("attention.sliding_window"), 0);
  if (window <= 0) return;
  c.swa_window = positive_int(src, "attention.sliding_window", window);
  c.swa_layers.assign(size_t(c.n_layers), 0);
  const std::string pk = key("attention.sliding_window_pattern");
  const gguf::Value* pv = f.find(pk);
  if (pv && pv->type == gguf::ValueType::ARRAY) {  // a flag per layer: windowed or not
    if (pv->elem != gguf::ValueType::BOOL)
      fail("{}: '{}' is an array of {} (expected bool, one per layer)", src, pk,
           gguf::value_type_name(pv->elem));
    if (pv->ints.size() != size_t(c.n_layers))
      fail("{}: '{}' has {} entries for {} layers", src, pk, pv->ints.size(), c.n_layers);
    for (int l = 0; l < c.n_layers; ++l) c.swa_layers[size_t(l)] = pv->ints[size_t(l)] != 0;
  } else {  // every pattern-th layer global (llama.cpp's default for gemma3: 6)
    const int64_t pattern = f.get_int(pk, 6);
    if (pattern < 0) fail("{}: '{}' = {} is negative", src, pk, pattern);
    for (int l = 0; l < c.n_layers; ++l)
      c.swa_layers[size_t(l)] = pattern == 0 || l % pattern < pattern - 1;
  }
  c.rope_theta_swa = float(f.get_float(key("rope.freq_base_swa"), 10000.0));
}

// Granite's multipliers, as llama.cpp reads them: logit_scale required, the
// others optional (0 or absent: none).
void read_granite(const gguf::File& f, const std::string& arch, Config& c) {
  auto scalar = [&](const char* k, bool required) {
    const std::string key = arch + "." + k;
    if (required && !f.has(key)) fail("{}: missing key '{}'", f.path(), key);
    const double v = f.get_float(key, 0.0);
    if (!std::isfinite(v) || v < 0)
      fail("{}: '{}' = {} (expected a finite positive number)", f.path(), key, v);
    return float(v);
  };
  c.logit_scale = scalar("logit_scale", true);
  if (c.logit_scale == 0) fail("{}: '{}.logit_scale' is 0", f.path(), arch);
  if (float r = scalar("residual_scale", false); r > 0) c.residual_scale = r;
  if (float e = scalar("embedding_scale", false); e > 0) c.embed_scale = e;
  c.attn_scale = scalar("attention.scale", false);
}

}  // namespace

void set_architecture(const std::string& source, const std::string& arch, Config& c) {
  const Arch* traits = find_arch(arch);
  if (!traits)
    fail("{}: unsupported architecture '{}' (supported: {})", source, arch,
         supported_architectures());
  c.arch = arch;
  c.rope_neox = traits->rope_neox;
  c.qk_norm = traits->qk_norm;
  if (traits->gemma) {
    c.post_norms = true;
    c.ffn_act = Activation::GeluTanh;
  }
  if (traits->olmo2) {
    c.qk_norm_full = c.post_norms = true;
    c.pre_norms = false;
  }
}

int no_rope_interval(const std::string& arch) {
  const Arch* traits = find_arch(arch);
  return traits ? traits->no_rope_every : 0;
}

std::string supported_architectures() {
  std::string s;
  for (const Arch& a : kArchs) s += (s.empty() ? "" : ", ") + std::string(a.name);
  return s;
}

Config config_from_gguf(const gguf::File& f) {
  const std::string& src = f.path();
  std::string arch = f.get_string("general.architecture");
  Config c;
  set_architecture(src, arch, c);
  const Arch* traits = find_arch(arch);
  auto key = [&](const char* k) { return arch + "." + k; };
  c.name = f.get_string("general.name", "");
  c.n_layers = positive_int(src, "block_count", f.get_int(key("block_count")));
  c.dim = positive_int(src, "embedding_length", f.get_int(key("embedding_length")));
  c.ffn_dim = positive_int(src, "feed_forward_length", f.get_int(key("feed_forward_length")));
  c.n_heads = positive_int(src, "attention.head_count", f.get_int(key("attention.head_count")));
  c.n_kv_heads = positive_int(src, "attention.head_count_kv",
                              f.get_int(key("attention.head_count_kv"), c.n_heads));
  if (c.dim % c.n_heads != 0)
    fail("{}: embedding_length {} is not a multiple of head_count {}", src, c.dim, c.n_heads);
  c.head_dim = positive_int(src, "attention.key_length",
                            f.get_int(key("attention.key_length"), c.dim / c.n_heads));
  c.ctx_train = positive_int(src, "context_length", f.get_int(key("context_length"), 2048));
  read_rope_factors(f, arch, c);
  c.rms_eps = float(f.get_float(key("attention.layer_norm_rms_epsilon"), 1e-5));
  c.rope_theta = float(f.get_float(key("rope.freq_base"), 10000.0));
  std::string scaling = f.get_string(key("rope.scaling.type"), "none");
  if (scaling == "linear") {
    c.rope_linear_factor = float(f.get_float(key("rope.scaling.factor"), 1.0));
  } else if (scaling != "none") {
    fail("{}: RoPE scaling type '{}' is not supported (supported: none, linear)", src, scaling);
  }
  if (f.has("tokenizer.ggml.tokens")) {
    c.vocab = int(f.get_strings("tokenizer.ggml.tokens").size());
  }
  c.vocab = positive_int(src, "vocab_size", f.get_int(key("vocab_size"), c.vocab));
  if (traits->gemma) read_gemma3(f, arch, c);
  if (traits->granite) read_granite(f, arch, c);
  // OLMo 3's windowed layers
  if (traits->olmo2 && f.get_int(key("attention.sliding_window"), 0) > 0)
    fail("{}: {} with sliding-window layers (OLMo 3) is not supported", src, arch);
  for (int l = 0; traits->no_rope_every > 0 && l < c.n_layers; ++l)
    c.no_rope_layers.push_back((l + 1) % traits->no_rope_every == 0);
  c.validate(src);
  return c;
}

void config_to_gguf(const Config& c, gguf::Writer& w) {
  const std::string& arch = c.arch;
  w.set_string("general.architecture", arch);
  if (!c.name.empty()) w.set_string("general.name", c.name);
  w.set_u32(arch + ".block_count", uint32_t(c.n_layers));
  w.set_u32(arch + ".embedding_length", uint32_t(c.dim));
  w.set_u32(arch + ".feed_forward_length", uint32_t(c.ffn_dim));
  w.set_u32(arch + ".attention.head_count", uint32_t(c.n_heads));
  w.set_u32(arch + ".attention.head_count_kv", uint32_t(c.n_kv_heads));
  w.set_u32(arch + ".context_length", uint32_t(c.ctx_train));
  w.set_u32(arch + ".vocab_size", uint32_t(c.vocab));
  w.set_f32(arch + ".attention.layer_norm_rms_epsilon", c.rms_eps);
  w.set_f32(arch + ".rope.freq_base", c.rope_theta);
  if (c.head_dim * c.n_heads != c.dim)
    w.set_u32(arch + ".attention.key_length", uint32_t(c.head_dim));
}

void byte_vocab_to_gguf(int vocab, gguf::Writer& w) {
  if (vocab < 259) fail("a byte vocabulary needs at least 259 pieces (got {})", vocab);
  std::vector<std::string> toks = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};  // unknown, control, control
  for (int b = 0; b < 256; ++b) {
    toks.push_back(fmt::format("<0x{:02X}>", b));
    types.push_back(6);  // byte
  }
  while (int(toks.size()) < vocab) {
    toks.push_back(fmt::format("<fill{}>", toks.size()));
    types.push_back(1);  // normal
  }
  w.set_string("tokenizer.ggml.model", "llama");
  w.set_strings("tokenizer.ggml.tokens", toks);
  w.set_f32s("tokenizer.ggml.scores", std::vector<float>(toks.size(), 0.f));
  w.set_i32s("tokenizer.ggml.token_type", types);
  w.set_u32("tokenizer.ggml.bos_token_id", 1);
  w.set_u32("tokenizer.ggml.eos_token_id", 2);
}

}  // namespace lr
