// The same tiny random LLaMA written as a GGUF file and as a HuggingFace
// directory (config.json + safetensors, HF names, q/k rows in rotate-half
// order) must load to bit-identical weights; a wrongly shaped HF tensor must be
// rejected by the loader with a message naming it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "format/gguf.h"
#include "format/gguf_source.h"
#include "format/safetensors.h"
#include "model/config.h"
#include "model/load.h"
#include "model/weights.h"

namespace lr {
namespace {

namespace fs = std::filesystem;

struct Spec {
  int n_layers = 2, dim = 64, n_heads = 4, n_kv_heads = 2, head_dim = 16, ffn_dim = 96,
      vocab = 50, ctx = 128;
  float rms_eps = 1e-5f, rope_theta = 10000.f;
  bool tied = false;
  DType file_dtype = DType::F32;  // storage type of the matrices in both files
};

// One weight in GGUF's conventions: [rows = out, cols = in], q/k rows in
// GGUF's interleaved RoPE order. Values are exactly representable in the
// file dtype so both files hold the same numbers.
struct Tensor {
  const WeightSpec* spec;
  int layer;
  int64_t rows, cols;
  std::vector<float> values;
};

std::string name_of(const WeightSpec& s, bool hf, int layer) {
  std::string pattern = hf ? s.hf : s.gguf;
  return s.per_layer ? fmt::format(fmt::runtime(pattern), layer) : pattern;
}

Config config_of(const Spec& s) {
  Config c;
  c.n_layers = s.n_layers;
  c.dim = s.dim;
  c.ffn_dim = s.ffn_dim;
  c.n_heads = s.n_heads;
  c.n_kv_heads = s.n_kv_heads;
  c.head_dim = s.head_dim;
  c.vocab = s.vocab;
  return c;
}

std::vector<Tensor> random_model(const Spec& s, uint64_t seed) {
  Config c = config_of(s);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.f, 0.5f);
  std::vector<Tensor> out;
  for (const WeightSpec& spec : kWeightTable) {
    if ((spec.slot == Slot::Output && s.tied) || !spec.present(c)) continue;
    for (int l = 0; l < (spec.per_layer ? s.n_layers : 1); ++l) {
      auto [rows, cols] = slot_shape(c, spec.slot);
      Tensor t{&spec, l, rows, cols, std::vector<float>(size_t(rows * cols))};
      DType dt = spec.is_norm ? DType::F32 : s.file_dtype;
      std::vector<uint8_t> tmp(t.values.size() * 4);
      for (float& x : t.values) x = (spec.is_norm ? 1.f : 0.f) + nd(rng);
      quantize(dt, t.values.data(), tmp.data(), int64_t(t.values.size()));  // round to dt
      dequantize(dt, tmp.data(), t.values.data(), int64_t(t.values.size()));
      out.push_back(std::move(t));
    }
  }
  return out;
}

std::vector<uint8_t> encode(DType dt, const std::vector<float>& v) {
  std::vector<uint8_t> b(*row_bytes(dt, v.size()));
  quantize(dt, v.data(), b.data(), int64_t(v.size()));
  return b;
}

void write_gguf(const std::string& path, const Spec& s, const std::vector<Tensor>& ts) {
  gguf::Writer w;
  w.set_string("general.architecture", "llama");
  w.set_string("general.name", "tiny-hf-test");
  w.set_u32("llama.block_count", uint32_t(s.n_layers));
  w.set_u32("llama.embedding_length", uint32_t(s.dim));
  w.set_u32("llama.feed_forward_length", uint32_t(s.ffn_dim));
  w.set_u32("llama.attention.head_count", uint32_t(s.n_heads));
  w.set_u32("llama.attention.head_count_kv", uint32_t(s.n_kv_heads));
  w.set_u32("llama.context_length", uint32_t(s.ctx));
  w.set_f32("llama.attention.layer_norm_rms_epsilon", s.rms_eps);
  w.set_f32("llama.rope.freq_base", s.rope_theta);
  w.set_u32("llama.vocab_size", uint32_t(s.vocab));
  for (const Tensor& t : ts) {
    DType dt = t.spec->is_norm ? DType::F32 : s.file_dtype;
    std::vector<uint8_t> b = encode(dt, t.values);
    std::vector<uint64_t> shape = t.spec->is_norm
                                      ? std::vector<uint64_t>{uint64_t(t.cols)}
                                      : std::vector<uint64_t>{uint64_t(t.cols), uint64_t(t.rows)};
    w.add_tensor(name_of(*t.spec, false, t.layer), dt, shape, b.data(), b.size());
  }
  w.write(path);
}

// GGUF row h*hd + 2i + j is HF row h*hd + j*hd/2 + i.
std::vector<float> to_hf_rope_order(const Tensor& t, int head_dim) {
  std::vector<float> out(t.values.size());
  for (int64_t r = 0; r < t.rows; ++r) {
    int64_t h = r / head_dim, within = r % head_dim, i = within / 2, j = within % 2;
    int64_t hf_row = h * head_dim + j * (head_dim / 2) + i;
    std::memcpy(&out[size_t(hf_row * t.cols)], &t.values[size_t(r * t.cols)],
                size_t(t.cols) * sizeof(float));
  }
  return out;
}

// HF directory: config.json + model.safetensors. `reshape` overrides the
// file shape (row-major) of one tensor by HF name, with data to match.
void write_hf(const std::string& dir, const Spec& s, const std::vector<Tensor>& ts,
              const std::map<std::string, std::vector<int64_t>>& reshape = {}) {
  fs::create_directories(dir);
  std::ofstream cfg(dir + "/config.json");
  cfg << fmt::format(R"({{
  "architectures": ["LlamaForCausalLM"],
  "model_type": "llama",
  "hidden_size": {},
  "intermediate_size": {},
  "num_attention_heads": {},
  "num_hidden_layers": {},
  "num_key_value_heads": {},
  "max_position_embeddings": {},
  "rms_norm_eps": {},
  "rope_theta": {},
  "tie_word_embeddings": {},
  "vocab_size": {},
  "hidden_act": "silu",
  "torch_dtype": "float32"
}}
)",
                     s.dim, s.ffn_dim, s.n_heads, s.n_layers, s.n_kv_heads, s.ctx, s.rms_eps,
                     s.rope_theta, s.tied ? "true" : "false", s.vocab);
  cfg.close();
  ASSERT_TRUE(cfg.good());

  std::vector<SafetensorsTensor> st;
  for (const Tensor& t : ts) {
    SafetensorsTensor o;
    o.name = name_of(*t.spec, true, t.layer);
    o.dtype = t.spec->is_norm ? DType::F32 : s.file_dtype;
    bool rope = t.spec->slot == Slot::Q || t.spec->slot == Slot::K;
    std::vector<float> v = rope ? to_hf_rope_order(t, s.head_dim) : t.values;
    o.shape = t.spec->is_norm ? std::vector<int64_t>{t.cols} : std::vector<int64_t>{t.rows, t.cols};
    if (auto it = reshape.find(o.name); it != reshape.end()) {
      o.shape = it->second;
      int64_t n = 1;
      for (int64_t d : o.shape) n *= d;
      v.assign(size_t(n), 0.25f);
    }
    o.bytes = encode(o.dtype, v);
    st.push_back(std::move(o));
  }
  // Non-weight tensors HF checkpoints may carry must not disturb loading.
  st.push_back({"model.rotary_emb.inv_freq", DType::F32, {s.head_dim / 2},
                std::vector<uint8_t>(size_t(s.head_dim / 2) * 4)});
  write_safetensors(dir + "/model.safetensors", st, {{"format", "pt"}});
}

struct TempDir {
  fs::path path;
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path = fs::temp_directory_path() /
           fmt::format("lowrank_hf_{}_{}_{}", ::getpid(), info->test_suite_name(), info->name());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& f) const { return (path / f).string(); }
};

struct Loaded {
  std::shared_ptr<Weights> gguf, hf;
};

Loaded load_both(const TempDir& tmp, const Spec& s, const std::vector<Tensor>& ts, DType wtype) {
  write_gguf(tmp / "tiny.gguf", s, ts);
  write_hf(tmp / "hf", s, ts);
  auto gfile = gguf::File::open(tmp / "tiny.gguf");
  Config gcfg = config_from_gguf(*gfile);
  Config hcfg = config_from_hf_json(tmp / "hf/config.json");
  for (const Config* c : {&gcfg, &hcfg}) {
    EXPECT_EQ(c->n_layers, s.n_layers);
    EXPECT_EQ(c->dim, s.dim);
    EXPECT_EQ(c->ffn_dim, s.ffn_dim);
    EXPECT_EQ(c->n_heads, s.n_heads);
    EXPECT_EQ(c->n_kv_heads, s.n_kv_heads);
    EXPECT_EQ(c->head_dim, s.head_dim);
    EXPECT_EQ(c->vocab, s.vocab);
    EXPECT_EQ(c->ctx_train, s.ctx);
    EXPECT_EQ(c->rms_eps, s.rms_eps);
    EXPECT_EQ(c->rope_theta, s.rope_theta);
  }
  EXPECT_EQ(hcfg.tied_output, s.tied);

  GgufSource gsrc(gfile);
  auto hsrc = SafetensorsSource::open_dir(tmp / "hf");
  Loaded out;
  out.gguf = load_weights(gcfg, gsrc, Naming::Gguf, wtype);
  out.hf = load_weights(hcfg, *hsrc, Naming::HuggingFace, wtype);
  return out;
}

void expect_identical(const Weights& a, const Weights& b, const Spec& s) {
  EXPECT_EQ(a.cfg.tied_output, s.tied);
  EXPECT_EQ(b.cfg.tied_output, s.tied);
  EXPECT_EQ(a.wtype, b.wtype);
  for (const WeightSpec& spec : kWeightTable) {
    if (!spec.present(a.cfg)) continue;
    for (int l = 0; l < (spec.per_layer ? s.n_layers : 1); ++l) {
      SCOPED_TRACE(name_of(spec, false, l));
      const Matrix& ma = slot_matrix(a, spec.slot, l);
      const Matrix& mb = slot_matrix(b, spec.slot, l);
      ASSERT_EQ(ma.dtype, mb.dtype);
      ASSERT_EQ(ma.rows, mb.rows);
      ASSERT_EQ(ma.cols, mb.cols);
      ASSERT_TRUE(ma.data && mb.data);
      EXPECT_EQ(std::memcmp(ma.data.get(), mb.data.get(), size_t(ma.bytes())), 0);
    }
  }
  if (s.tied) {
    EXPECT_EQ(a.output.w.data, a.tok_embd.data);
    EXPECT_EQ(b.output.w.data, b.tok_embd.data);
  }
}

// The loaded matrices hold the values the model was built with (so the two
// loads do not agree by both being wrong, e.g. both unpermuted).
void expect_values(const Weights& w, const std::vector<Tensor>& ts) {
  std::vector<float> row;
  for (const Tensor& t : ts) {
    SCOPED_TRACE(name_of(*t.spec, false, t.layer));
    const Matrix& m = slot_matrix(w, t.spec->slot, t.layer);
    ASSERT_EQ(m.rows, t.rows);
    ASSERT_EQ(m.cols, t.cols);
    row.resize(size_t(m.cols));
    for (int64_t r = 0; r < m.rows; ++r) {
      m.row_to_f32(r, row.data());
      ASSERT_EQ(std::memcmp(row.data(), &t.values[size_t(r * m.cols)], row.size() * 4), 0)
          << "row " << r;
    }
  }
}

TEST(HfDir, F32MatchesGguf) {
  TempDir tmp;
  Spec s;
  auto ts = random_model(s, 1);
  Loaded w = load_both(tmp, s, ts, DType::F32);
  expect_identical(*w.gguf, *w.hf, s);
  expect_values(*w.hf, ts);
}

TEST(HfDir, Bf16FilesTiedEmbeddingsMatchGguf) {
  TempDir tmp;
  Spec s;
  s.tied = true;
  s.file_dtype = DType::BF16;
  auto ts = random_model(s, 2);
  Loaded w = load_both(tmp, s, ts, DType::F32);
  expect_identical(*w.gguf, *w.hf, s);
  expect_values(*w.hf, ts);
}

TEST(HfDir, F16FilesBf16RuntimeMatchGguf) {
  TempDir tmp;
  Spec s;
  s.file_dtype = DType::F16;
  auto ts = random_model(s, 3);
  Loaded w = load_both(tmp, s, ts, DType::BF16);
  expect_identical(*w.gguf, *w.hf, s);
}

// MHA (n_kv_heads == n_heads) and a different head count exercise the
// permutation with other head layouts.
TEST(HfDir, OtherHeadLayoutsMatchGguf) {
  TempDir tmp;
  Spec s;
  s.n_heads = 8;
  s.n_kv_heads = 8;
  s.head_dim = 8;
  auto ts = random_model(s, 4);
  Loaded w = load_both(tmp, s, ts, DType::F32);
  expect_identical(*w.gguf, *w.hf, s);
  expect_values(*w.hf, ts);
}

std::string hf_load_error(const TempDir& tmp, const Spec& s,
                          const std::map<std::string, std::vector<int64_t>>& reshape) {
  auto ts = random_model(s, 5);
  write_hf(tmp / "hf", s, ts, reshape);
  Config cfg = config_from_hf_json(tmp / "hf/config.json");
  auto src = SafetensorsSource::open_dir(tmp / "hf");
  try {
    load_weights(cfg, *src, Naming::HuggingFace, DType::F32);
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.rfind(tmp / "hf", 0), 0u) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    return msg;
  }
  ADD_FAILURE() << "loaded without error";
  return "";
}

TEST(HfDir, ShapeMismatchNamesTheTensor) {
  TempDir tmp;
  Spec s;
  std::string msg = hf_load_error(tmp, s, {{"model.layers.1.mlp.up_proj.weight", {95, 64}}});
  EXPECT_NE(msg.find("'model.layers.1.mlp.up_proj.weight'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expected [96, 64]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("95"), std::string::npos) << msg;
}

TEST(HfDir, TransposedMatrixIsRejected) {
  TempDir tmp;
  Spec s;
  std::string msg = hf_load_error(tmp, s, {{"model.layers.0.mlp.down_proj.weight", {96, 64}}});
  EXPECT_NE(msg.find("'model.layers.0.mlp.down_proj.weight'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expected [64, 96]"), std::string::npos) << msg;
}

TEST(HfDir, NormWithTwoDimsIsRejected) {
  TempDir tmp;
  Spec s;
  std::string msg = hf_load_error(tmp, s, {{"model.norm.weight", {1, 64}}});
  EXPECT_NE(msg.find("'model.norm.weight'"), std::string::npos) << msg;
}

TEST(HfDir, UnsupportedDtypeOfAWeightNamesIt) {
  TempDir tmp;
  Spec s;
  auto ts = random_model(s, 6);
  write_hf(tmp / "hf", s, ts);
  // Replace model.safetensors with one whose k_proj of layer 0 is stored as I8.
  auto src = SafetensorsSource::open_dir(tmp / "hf");
  std::vector<SafetensorsTensor> kept;
  for (const std::string& n : src->names()) {
    auto v = src->find(n);
    std::vector<int64_t> shape(v->shape.rbegin(), v->shape.rend());
    kept.push_back({n, v->dtype, shape, std::vector<uint8_t>(v->data, v->data + v->nbytes)});
  }
  src.reset();
  std::vector<uint8_t> bytes = safetensors_to_bytes(kept);
  // Patch the dtype string in the header in place ("F32" -> "I32", same length).
  std::string header(bytes.begin() + 8, bytes.end());
  size_t at = header.find("\"model.layers.0.self_attn.k_proj.weight\"");
  ASSERT_NE(at, std::string::npos);
  size_t dt = header.find("\"F32\"", at);
  ASSERT_NE(dt, std::string::npos);
  bytes[8 + dt + 1] = 'I';
  {
    std::ofstream out(tmp / "hf/model.safetensors", std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  }
  Config cfg = config_from_hf_json(tmp / "hf/config.json");
  auto src2 = SafetensorsSource::open_dir(tmp / "hf");
  try {
    load_weights(cfg, *src2, Naming::HuggingFace, DType::F32);
    ADD_FAILURE() << "loaded without error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("'model.layers.0.self_attn.k_proj.weight'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("I32"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace lr
