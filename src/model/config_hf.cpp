// config_from_hf_json: a HuggingFace config.json into Config. Each key is
// mapped as llama.cpp's convert_hf_to_gguf.py (conversion/*.py) maps it to
// the GGUF metadata config_from_gguf reads, so a directory and its
// converted GGUF give the same Config. Where the converter drops a key that
// transformers reads (Gemma 3's layer pattern, Granite's head_dim, Phi-3's
// rope_scaling.attention_factor), transformers' reading is taken; the
// comments say where.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/config.h"
#include "model/scalar_ops.h"

namespace lr {

namespace {

using json = nlohmann::json;

// The fields of config.json (or of one of its objects, `prefix` naming it),
// each read with a message naming the file, the field, what was expected
// and what is there. A null field counts as absent.
class Fields {
 public:
  Fields(const std::string& path, const json& j, std::string prefix = "")
      : path_(path), j_(j), prefix_(std::move(prefix)) {}
  const std::string& path() const { return path_; }
  const json& raw() const { return j_; }
  bool has(const std::string& k) const { return j_.contains(k) && !j_[k].is_null(); }
  const json& at(const std::string& k) const { return j_[k]; }
  std::string name(const std::string& k) const { return prefix_ + k; }

  [[noreturn]] void bad(const std::string& k, const std::string& expected) const {
    fail("{}: field '{}' is {} (expected {})", path_, name(k),
         j_.contains(k) ? j_[k].dump() : "absent", expected);
  }
  int64_t integer(const std::string& k) const {
    if (!has(k)) fail("{}: missing integer field '{}'", path_, name(k));
    if (!j_[k].is_number_integer()) bad(k, "an integer");
    return j_[k].get<int64_t>();
  }
  int64_t integer(const std::string& k, int64_t dflt) const {
    if (!has(k)) return dflt;
    if (!j_[k].is_number_integer()) bad(k, "an integer");
    return j_[k].get<int64_t>();
  }
  int positive(const std::string& k) const { return in_range(k, integer(k)); }
  int positive(const std::string& k, int64_t dflt) const { return in_range(k, integer(k, dflt)); }
  double number(const std::string& k, double dflt) const {
    if (!has(k)) return dflt;
    if (!j_[k].is_number() || !std::isfinite(j_[k].get<double>())) bad(k, "a finite number");
    return j_[k].get<double>();
  }
  double positive_number(const std::string& k, double dflt) const {
    const double v = number(k, dflt);
    if (!(v > 0)) bad(k, "a positive number");
    return v;
  }
  std::string string(const std::string& k, const std::string& dflt) const {
    if (!has(k)) return dflt;
    if (!j_[k].is_string()) bad(k, "a string");
    return j_[k].get<std::string>();
  }
  bool boolean(const std::string& k, bool dflt) const {
    if (!has(k)) return dflt;
    if (!j_[k].is_boolean()) bad(k, "true or false");
    return j_[k].get<bool>();
  }
  std::vector<float> numbers(const std::string& k) const {
    if (!has(k) || !j_[k].is_array()) bad(k, "a list of numbers");
    std::vector<float> v;
    for (const json& x : j_[k]) {
      if (!x.is_number()) bad(k, "a list of numbers");
      v.push_back(x.get<float>());
    }
    return v;
  }
  // An object field (absent or null: an empty one).
  Fields object(const std::string& k) const {
    static const json kEmpty = json::object();
    if (!has(k)) return Fields(path_, kEmpty, name(k) + ".");
    if (!j_[k].is_object()) bad(k, "an object");
    return Fields(path_, j_[k], name(k) + ".");
  }

 private:
  int in_range(const std::string& k, int64_t v) const {
    if (v <= 0 || v > (int64_t(1) << 30))
      fail("{}: field '{}' = {} is out of range (expected 1..2^30)", path_, name(k), v);
    return int(v);
  }
  std::string path_;
  const json& j_;
  std::string prefix_;
};

// model_type -> the GGUF architecture it converts to. Qwen2 and Mistral read
// as LLaMA (their q/k rows reordered at load, so saved as a llama GGUF).
struct HfType {
  const char* model_type;
  const char* arch;
};
constexpr HfType kHfTypes[] = {
    {"llama", "llama"},     {"mistral", "llama"},      {"qwen2", "llama"},
    {"qwen3", "qwen3"},     {"gemma3_text", "gemma3"}, {"smollm3", "smollm3"},
    {"granite", "granite"}, {"phi3", "phi3"},          {"olmo2", "olmo2"}};

std::string hf_types() {
  std::string s;
  for (const HfType& t : kHfTypes) s += (s.empty() ? "" : ", ") + std::string(t.model_type);
  return s;
}

// Llama 3.1's scaling (its config.json: rope_scaling {"rope_type": "llama3",
// factor, low_freq_factor, high_freq_factor, original_max_position_embeddings}):
// wavelengths shorter than L / high_freq_factor keep their frequency, those
// longer than L / low_freq_factor are slowed by `factor`, and the band between
// is interpolated; returned as each frequency's divisor.
std::vector<float> llama3_rope_factors(const Fields& rs, const Config& c) {
  auto num = [&](const char* k) {
    if (!rs.has(k) || !rs.at(k).is_number())
      fail("{}: RoPE scaling type 'llama3' needs a number '{}'", rs.path(), k);
    return rs.at(k).get<double>();
  };
  const double factor = num("factor"), lo = num("low_freq_factor"), hi = num("high_freq_factor"),
               old_ctx = num("original_max_position_embeddings");
  if (!(factor > 0 && lo > 0 && hi > lo && old_ctx > 0))
    fail(
        "{}: RoPE scaling 'llama3' needs factor > 0, 0 < low_freq_factor < high_freq_factor and "
        "original_max_position_embeddings > 0 (got {}, {}, {}, {})",
        rs.path(), factor, lo, hi, old_ctx);
  const std::vector<double> base = scalar::rope_inv_freq(c);  // c has no factors yet
  std::vector<float> out(base.size());
  for (size_t i = 0; i < base.size(); ++i) {
    const double freq = base[i], wavelen = 2 * M_PI / freq;
    double scaled = freq;
    if (wavelen > old_ctx / lo) {
      scaled = freq / factor;
    } else if (wavelen >= old_ctx / hi) {
      const double smooth = (old_ctx / wavelen - lo) / (hi - lo);
      scaled = (1 - smooth) * freq / factor + smooth * freq;
    }
    out[i] = float(freq / scaled);
  }
  return out;
}

// LongRoPE (Phi-3): the short and long factors, the original context they
// switch at, and the attention factor: rope_scaling's attention_factor where
// it is given (transformers' reading; the converter recomputes it), else the
// converter's sqrt(1 + ln(s) / ln(original)), s = context / original.
void read_longrope(const Fields& f, const Fields& rs, Config& c) {
  c.rope_freq_factors = rs.numbers("short_factor");
  c.rope_factors_long = rs.numbers("long_factor");
  const size_t want = size_t(c.rotary_dims() / 2);
  for (const char* k : {"short_factor", "long_factor"})
    if (rs.at(k).size() != want)
      fail("{}: field '{}' has {} factors, expected {} (rotary dims {} / 2)", f.path(), rs.name(k),
           rs.at(k).size(), want, c.rotary_dims());
  const double scale = double(c.ctx_train) / c.rope_orig_ctx;
  const double computed =
      scale > 1 ? std::sqrt(1 + std::log(scale) / std::log(double(c.rope_orig_ctx))) : 1.0;
  c.rope_mscale = float(rs.positive_number("attention_factor", computed));
}

// RoPE: transformers 5's rope_parameters (one object, or one per layer type:
// full_attention for the global layers, sliding_attention for the windowed
// ones), or earlier versions' rope_theta, rope_scaling and rope_local_base_freq.
void read_rope(const Fields& f, Config& c) {
  const char* key = f.has("rope_parameters") ? "rope_parameters" : "rope_scaling";
  const Fields all = f.object(key);
  const bool per_type = all.has("full_attention") || all.has("sliding_attention");
  const Fields rs = per_type ? all.object("full_attention") : all;
  c.rope_theta =
      float(rs.positive_number("rope_theta", f.positive_number("rope_theta", c.rope_theta)));
  const Fields swa = all.object("sliding_attention");
  c.rope_theta_swa = float(swa.positive_number(
      "rope_theta", f.positive_number("rope_local_base_freq", c.rope_theta_swa)));
  c.rope_orig_ctx = c.ctx_train;
  if (c.arch == "phi3") {  // partial RoPE: the converter's int(factor * dim) / heads
    const double part = rs.number("partial_rotary_factor", f.number("partial_rotary_factor", 1.0));
    if (!(part > 0 && part <= 1)) f.bad("partial_rotary_factor", "a number in (0, 1]");
    c.rope_dims = int(part * c.dim) / c.n_heads;
    c.rope_orig_ctx = rs.positive("original_max_position_embeddings",
                                  f.integer("original_max_position_embeddings", c.ctx_train));
  }
  const std::string type = rs.string("rope_type", rs.string("type", "default"));
  if (type == "linear") {
    c.rope_linear_factor = float(rs.positive_number("factor", 1.0));
  } else if (type == "llama3") {
    c.rope_freq_factors = llama3_rope_factors(rs, c);
  } else if (type == "longrope" || type == "su") {
    read_longrope(f, rs, c);
  } else if (type != "default") {
    fail("{}: {} type '{}' is not supported (supported: linear, llama3, longrope)", f.path(), key,
         type);
  }
}

// Gemma 3 (Gemma3ForCausalLM, Gemma3TextConfig's defaults): scores scaled by
// query_pre_attn_scalar^-1/2 (llama.cpp: 1/sqrt(head_dim), the 27B's
// 1/sqrt(dim / heads): the same numbers for the published models); layer l
// windowed by layer_types, else by sliding_window_pattern (l windowed unless
// (l + 1) % pattern == 0, transformers' and llama.cpp's rule; the converter
// does not write the pattern, llama.cpp assumes 6).
void read_gemma3(const Fields& f, Config& c) {
  c.embed_scale = std::sqrt(float(c.dim));
  for (const char* k : {"final_logit_softcapping", "attn_logit_softcapping"})
    if (f.has(k))
      fail("{}: field '{}' is {}: logit softcapping is not supported (expected null)", f.path(), k,
           f.at(k).dump());
  if (f.boolean("use_bidirectional_attention", false))
    f.bad("use_bidirectional_attention", "false: EmbeddingGemma's attention is not run");
  const double qpas = f.positive_number("query_pre_attn_scalar", 256);
  if (qpas != c.head_dim) c.attn_scale = float(1 / std::sqrt(qpas));
  if (!f.has("sliding_window")) return;
  const int window = f.positive("sliding_window");
  std::vector<uint8_t> layers(size_t(c.n_layers), 0);
  if (f.has("layer_types")) {
    const json& t = f.at("layer_types");
    if (!t.is_array() || t.size() != size_t(c.n_layers))
      f.bad("layer_types", fmt::format("a list of {} layer types", c.n_layers));
    for (size_t l = 0; l < t.size(); ++l) {
      if (t[l] != "sliding_attention" && t[l] != "full_attention")
        f.bad("layer_types", "'sliding_attention' or 'full_attention' per layer");
      layers[l] = t[l] == "sliding_attention";
    }
  } else {
    const char* pk =
        f.has("sliding_window_pattern") ? "sliding_window_pattern" : "_sliding_window_pattern";
    const int64_t pattern = f.positive(pk, 6);
    for (int l = 0; l < c.n_layers; ++l) layers[size_t(l)] = (l + 1) % pattern != 0;
  }
  if (std::find(layers.begin(), layers.end(), 1) == layers.end()) return;
  c.swa_window = window;
  c.swa_layers = std::move(layers);
}

// SmolLM3: no_rope_layers, a flag per layer (1: RoPE, 0: none), else one
// layer in no_rope_layer_interval without (llama.cpp fixes it at 4).
void read_smollm3(const Fields& f, Config& c) {
  bool windowed = f.boolean("use_sliding_window", false) && f.has("sliding_window");
  if (f.has("layer_types") && f.at("layer_types").is_array())
    for (const json& t : f.at("layer_types")) windowed |= t == "sliding_attention";
  if (windowed)
    fail(
        "{}: fields 'use_sliding_window' / 'layer_types' ask for sliding-window layers, not "
        "supported for {} (expected use_sliding_window false, every layer full_attention)",
        f.path(), c.arch);
  c.no_rope_layers.assign(size_t(c.n_layers), 0);
  if (f.has("no_rope_layers")) {
    const json& v = f.at("no_rope_layers");
    if (!v.is_array() || v.size() != size_t(c.n_layers))
      f.bad("no_rope_layers", fmt::format("a list of {} flags (1: RoPE, 0: none)", c.n_layers));
    for (size_t l = 0; l < v.size(); ++l) {
      if (v[l] != 0 && v[l] != 1) f.bad("no_rope_layers", "a list of 0 and 1");
      c.no_rope_layers[l] = v[l] == 0;
    }
    return;
  }
  const int every = f.positive("no_rope_layer_interval", no_rope_interval(c.arch));
  for (int l = 0; l < c.n_layers; ++l) c.no_rope_layers[size_t(l)] = (l + 1) % every == 0;
}

// Granite's multipliers (GraniteConfig's defaults: 1). The converter writes
// each that is set; transformers scales the scores by attention_multiplier
// itself, not by 1/sqrt(head_dim).
void read_granite(const Fields& f, Config& c) {
  c.embed_scale = float(f.positive_number("embedding_multiplier", 1.0));
  c.residual_scale = float(f.positive_number("residual_multiplier", 1.0));
  c.attn_scale = float(f.positive_number("attention_multiplier", 1.0));
  c.logit_scale = float(f.positive_number("logits_scaling", 1.0));
}

// The FFN's activation: GELU's tanh form for Gemma 3, SiLU for the others.
void check_activation(const Fields& f, const Config& c) {
  const bool gelu = c.ffn_act == Activation::GeluTanh;
  for (const char* k : {"hidden_act", "hidden_activation"}) {
    if (!f.has(k)) continue;
    const std::string act = f.string(k, "");
    if (gelu ? (act != "gelu_pytorch_tanh" && act != "gelu_tanh") : act != "silu")
      f.bad(k, gelu ? "'gelu_pytorch_tanh': Gemma 3's GeGLU" : "'silu': a SwiGLU FFN");
  }
}

// The dimensions every model_type has.
void read_dimensions(const Fields& f, Config& c) {
  c.n_layers = f.positive("num_hidden_layers");
  c.dim = f.positive("hidden_size");
  c.ffn_dim = f.positive("intermediate_size");
  c.n_heads = f.positive("num_attention_heads");
  c.n_kv_heads = f.positive("num_key_value_heads", c.n_heads);
  if (c.dim % c.n_heads != 0)
    fail("{}: hidden_size {} is not a multiple of num_attention_heads {}", f.path(), c.dim,
         c.n_heads);
  // Granite's converter drops head_dim; transformers reads it (and the
  // weights' shapes follow it), so it is read for every model_type.
  c.head_dim = f.positive("head_dim", c.dim / c.n_heads);
  c.vocab = f.positive("vocab_size");
}

}  // namespace

Config config_from_hf_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("{}: cannot open", path);
  json j;
  try {
    j = json::parse(in);
  } catch (const std::exception& e) {
    fail("{}: invalid JSON: {}", path, e.what());
  }
  if (!j.is_object()) fail("{}: not a JSON object", path);
  const Fields f(path, j);
  const std::string model_type = f.string("model_type", "");
  const HfType* t = nullptr;
  for (const HfType& h : kHfTypes)
    if (model_type == h.model_type) t = &h;
  if (!t && model_type == "gemma3")
    fail(
        "{}: model_type 'gemma3' (Gemma3ForConditionalGeneration, with a vision tower) is not "
        "supported: lowrank reads the text model's directory (model_type gemma3_text)",
        path);
  if (!t)
    fail("{}: unsupported model_type '{}' (lowrank imports {})", path, model_type, hf_types());
  Config c;
  set_architecture(path, t->arch, c);
  c.name = f.string("_name_or_path", "");
  read_dimensions(f, c);
  const bool gemma = c.arch == "gemma3";
  c.ctx_train = f.positive("max_position_embeddings", gemma ? 131072 : 2048);
  c.rms_eps = float(f.positive_number("rms_norm_eps", gemma ? 1e-6 : 1e-5));
  c.tied_output = f.boolean("tie_word_embeddings", gemma);
  if (gemma) c.rope_theta = 1e6f;  // Gemma3TextConfig's defaults
  c.rope_dims = c.head_dim;
  read_rope(f, c);
  check_activation(f, c);
  if (gemma) read_gemma3(f, c);
  if (c.arch == "smollm3") read_smollm3(f, c);
  if (c.arch == "granite") read_granite(f, c);
  // Phi-3's sliding_window is not read: llama.cpp turns Phi's windows off
  // (its phi3 loader), and so does lowrank for its GGUF.
  if (c.arch == "olmo2" && f.has("sliding_window"))
    fail(
        "{}: field 'sliding_window' is {}: {} with sliding-window layers (OLMo 3) is not "
        "supported",
        path, f.at("sliding_window").dump(), c.arch);
  c.validate(path);
  return c;
}

}  // namespace lr
