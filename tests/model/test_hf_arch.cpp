// HuggingFace directories of the architectures beyond LLaMA: each fixture of
// tests/fixtures/arch written back as transformers stores it (config.json,
// safetensors under HF names and in HF's layout, by the `gguf` package and
// numpy: scripts/make_hf_arch_fixtures.py, tests/fixtures/hf_arch/) must read
// to the GGUF's Config and weights, bit for bit (Gemma's norms: 1 + (w - 1)
// in f32, what the loader computes), and give llama.cpp's logits on the GGUF.
// What lowrank does not run is refused, naming the field.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../error_of.h"
#include "arch_golden.h"
#include "backend/cpu/cpu.h"
#include "format/gguf.h"
#include "format/gguf_source.h"
#include "format/safetensors.h"
#include "model/load.h"
#include "model_test_util.h"
#include "runtime/model.h"
#include "runtime/session.h"

namespace lr {
namespace {

using json = nlohmann::json;

const std::string kArch = LOWRANK_SOURCE_DIR "/tests/fixtures/arch/";
const std::string kHf = LOWRANK_SOURCE_DIR "/tests/fixtures/hf_arch/";
constexpr double kTol = 1e-3;  // as tests/model/test_architectures.cpp

using Golden = test::ArchGolden;
Golden golden(const std::string& arch) {
  return test::arch_golden(arch);
}
void expect_llamacpp(const std::vector<float>& logits, int vocab, const Golden& g) {
  test::expect_llamacpp(logits, vocab, g, kTol, "HF directory");
}

void expect_same_config(const Config& h, const Config& g) {
  EXPECT_EQ(h.arch, g.arch);
  EXPECT_EQ(h.n_layers, g.n_layers);
  EXPECT_EQ(h.dim, g.dim);
  EXPECT_EQ(h.ffn_dim, g.ffn_dim);
  EXPECT_EQ(h.n_heads, g.n_heads);
  EXPECT_EQ(h.n_kv_heads, g.n_kv_heads);
  EXPECT_EQ(h.head_dim, g.head_dim);
  EXPECT_EQ(h.vocab, g.vocab);
  EXPECT_EQ(h.ctx_train, g.ctx_train);
  EXPECT_EQ(h.rms_eps, g.rms_eps);
  EXPECT_EQ(h.rope_theta, g.rope_theta);
  EXPECT_EQ(h.rope_linear_factor, g.rope_linear_factor);
  EXPECT_EQ(h.rope_freq_factors, g.rope_freq_factors);
  EXPECT_EQ(h.rotary_dims(), g.rotary_dims());
  EXPECT_EQ(h.rope_factors_long, g.rope_factors_long);
  EXPECT_EQ(h.rope_orig_ctx, g.rope_orig_ctx);
  EXPECT_EQ(h.rope_mscale, g.rope_mscale);
  EXPECT_EQ(h.rope_neox, g.rope_neox);
  EXPECT_EQ(h.qk_norm, g.qk_norm);
  EXPECT_EQ(h.qk_norm_full, g.qk_norm_full);
  EXPECT_EQ(h.pre_norms, g.pre_norms);
  EXPECT_EQ(h.post_norms, g.post_norms);
  EXPECT_EQ(h.embed_scale, g.embed_scale);
  EXPECT_EQ(h.attention_scale(), g.attention_scale());
  EXPECT_EQ(h.ffn_act, g.ffn_act);
  EXPECT_EQ(h.swa_window, g.swa_window);
  EXPECT_EQ(h.swa_layers, g.swa_layers);
  EXPECT_EQ(h.rope_theta_swa, g.rope_theta_swa);
  EXPECT_EQ(h.no_rope_layers, g.no_rope_layers);
  EXPECT_EQ(h.residual_scale, g.residual_scale);
  EXPECT_EQ(h.logit_scale, g.logit_scale);
}

std::vector<float> matrix_values(const Matrix& m) {
  std::vector<float> v(size_t(m.rows * m.cols));
  for (int64_t r = 0; r < m.rows; ++r) m.row_to_f32(r, &v[size_t(r * m.cols)]);
  return v;
}

class HfArch : public ::testing::TestWithParam<std::string> {
 protected:
  std::string dir() const { return kHf + GetParam(); }
  std::string gguf_path() const { return kArch + GetParam() + ".gguf"; }
};

TEST_P(HfArch, ReadsAsItsGgufAndGivesLlamaCppsLogits) {
  auto f = gguf::File::open(gguf_path());
  const Config gc = config_from_gguf(*f);
  const Config hc = config_from_hf_json(dir() + "/config.json");
  expect_same_config(hc, gc);
  auto gw = load_weights(gc, GgufSource(f), Naming::Gguf, DType::F32);
  auto hw = load_weights(hc, *SafetensorsSource::open_dir(dir()), Naming::HuggingFace, DType::F32);
  EXPECT_EQ(hw->cfg.tied_output, gw->cfg.tied_output);
  for_each_tensor(gc, [&](const WeightSpec& spec, int l) {
    SCOPED_TRACE(fmt::format("{} of layer {}", spec.kind, l));
    if (spec.slot == Slot::Output && gc.tied_output) return;
    std::vector<float> want = matrix_values(slot_matrix(*gw, spec.slot, l));
    if (spec.is_norm && gc.arch == "gemma3")  // stored as w - 1, read as 1 + (w - 1)
      for (float& x : want) x = (x - 1.f) + 1.f;
    const std::vector<float> got = matrix_values(slot_matrix(*hw, spec.slot, l));
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0);
  });
  const Golden g = golden(GetParam());
  auto b = make_cpu_backend(hw, test::backend_options(128, 2));
  std::vector<float> logits(g.tokens.size() * size_t(hc.vocab));
  b->forward(g.tokens.data(), int(g.tokens.size()), logits.data(), true);
  expect_llamacpp(logits, hc.vocab, g);
  std::vector<float> last(logits.end() - hc.vocab, logits.end());
  std::vector<int32_t> greedy;
  for (size_t i = 0; i < g.greedy.size(); ++i) {
    greedy.push_back(int32_t(std::max_element(last.begin(), last.end()) - last.begin()));
    b->forward(&greedy.back(), 1, last.data(), false);
  }
  EXPECT_EQ(greedy, g.greedy);
}

// The directory as `lowrank run -m DIR` loads it (tokenizer.json too): the
// GGUF's vocabulary and text encoding.
TEST_P(HfArch, LoadsAsAModelDirectory) {
  const Model h = load_model(dir(), std::nullopt);
  const Model g = load_model(gguf_path(), std::nullopt);
  EXPECT_EQ(h.weights->cfg.arch, GetParam());
  EXPECT_EQ(h.tokenizer->n_vocab(), g.tokenizer->n_vocab());
  EXPECT_EQ(h.tokenizer->encode("Rivers run to the sea.", false),
            g.tokenizer->encode("Rivers run to the sea.", false));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HfArch,
                         ::testing::Values("gemma3", "smollm3", "granite", "phi3", "olmo2"),
                         [](const auto& info) { return info.param; });

json fixture_config(const std::string& arch) {
  std::ifstream in(kHf + arch + "/config.json");
  return json::parse(in);
}

Config read_config(const test::TempDir& t, const json& j) {
  std::ofstream(t.file("config.json")) << j.dump();
  return config_from_hf_json(t.file("config.json"));
}

std::string config_error(const json& j) {
  test::TempDir t;
  return test::error_of([&] { read_config(t, j); });
}

// The same models as transformers 5 writes them (rope_parameters, per layer
// type for Gemma 3), or with the older keys (sliding_window_pattern,
// SmolLM3's interval alone): the same Config.
TEST(HfArchConfig, OtherWaysOfWritingTheSameModel) {
  test::TempDir t;
  json g = fixture_config("gemma3");
  const Config want = read_config(t, g);
  json v5 = g;
  v5["rope_parameters"] = {
      {"full_attention", {{"rope_type", "default"}, {"rope_theta", 1000000.0}}},
      {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}}};
  for (const char* k : {"rope_scaling", "rope_theta", "rope_local_base_freq"}) v5.erase(k);
  expect_same_config(read_config(t, v5), want);
  json pattern = g;
  pattern.erase("layer_types");
  pattern.erase("_sliding_window_pattern");
  pattern["sliding_window_pattern"] = 2;
  expect_same_config(read_config(t, pattern), want);
  pattern["sliding_window_pattern"] = 6;  // Gemma's own: all 4 layers windowed here
  EXPECT_EQ(read_config(t, pattern).swa_layers, (std::vector<uint8_t>{1, 1, 1, 1}));
  json scaled = g;  // Gemma 3 4B's: linear scaling of the global layers
  scaled["rope_scaling"] = {{"factor", 8.0}, {"rope_type", "linear"}};
  EXPECT_EQ(read_config(t, scaled).rope_linear_factor, 8.f);
  json qpas = g;  // the 27B's query_pre_attn_scalar (dim / heads there)
  qpas["query_pre_attn_scalar"] = 168;
  EXPECT_FLOAT_EQ(read_config(t, qpas).attention_scale(), 1.f / std::sqrt(168.f));

  json s = fixture_config("smollm3");
  const Config smol = read_config(t, s);
  EXPECT_EQ(smol.no_rope_layers, (std::vector<uint8_t>{0, 0, 0, 1}));
  s.erase("no_rope_layers");
  EXPECT_EQ(read_config(t, s).no_rope_layers, smol.no_rope_layers);
  s["no_rope_layer_interval"] = 2;
  EXPECT_EQ(read_config(t, s).no_rope_layers, (std::vector<uint8_t>{0, 1, 0, 1}));

  // Phi-3 without rope_scaling.attention_factor: the converter's factor,
  // sqrt(1 + ln(256 / 32) / ln 32).
  json p = fixture_config("phi3");
  p["rope_scaling"].erase("attention_factor");
  EXPECT_FLOAT_EQ(read_config(t, p).rope_mscale,
                  float(std::sqrt(1 + std::log(8.0) / std::log(32.0))));
  p["rope_parameters"] = p["rope_scaling"];  // transformers 5
  p["rope_parameters"]["partial_rotary_factor"] = 0.5;
  p["rope_parameters"]["short_factor"] = std::vector<double>(8, 1.0);
  p["rope_parameters"]["long_factor"] = std::vector<double>(8, 2.0);
  const Config half = read_config(t, p);
  EXPECT_EQ(half.rotary_dims(), 16);  // int(0.5 * 128) / 4
  EXPECT_EQ(half.rope_factors_long, std::vector<float>(8, 2.f));

  json gr = fixture_config("granite");  // GraniteConfig's defaults: every multiplier 1
  for (const char* k :
       {"attention_multiplier", "embedding_multiplier", "logits_scaling", "residual_multiplier"})
    gr.erase(k);
  const Config plain = read_config(t, gr);
  EXPECT_EQ(plain.attention_scale(), 1.f);
  EXPECT_EQ(plain.embed_scale, 1.f);
  EXPECT_EQ(plain.logit_scale, 1.f);
}

TEST(HfArchConfig, WhatIsNotRunIsRefusedByName) {
  auto with = [](const std::string& arch, const std::string& key, const json& v) {
    json j = fixture_config(arch);
    j[key] = v;
    return config_error(j);
  };
  LR_EXPECT_ERROR_HAS(with("gemma3", "final_logit_softcapping", 30.0),
                      "field 'final_logit_softcapping' is 30.0: logit softcapping is not "
                      "supported (expected null)");
  LR_EXPECT_ERROR_HAS(with("gemma3", "attn_logit_softcapping", 50.0),
                      "field 'attn_logit_softcapping' is 50.0");
  LR_EXPECT_ERROR_HAS(with("gemma3", "hidden_activation", "gelu"),
                      "field 'hidden_activation' is \"gelu\" (expected 'gelu_pytorch_tanh'");
  LR_EXPECT_ERROR_HAS(with("gemma3", "use_bidirectional_attention", true),
                      "field 'use_bidirectional_attention' is true");
  LR_EXPECT_ERROR_HAS(with("gemma3", "layer_types", json::array({"sliding_attention"})),
                      "field 'layer_types' is [\"sliding_attention\"] (expected a list of 4 layer "
                      "types)");
  LR_EXPECT_ERROR_HAS(with("gemma3", "model_type", "gemma3"),
                      "model_type 'gemma3' (Gemma3ForConditionalGeneration");
  LR_EXPECT_ERROR_HAS(with("olmo2", "sliding_window", 4096),
                      "field 'sliding_window' is 4096: olmo2 with sliding-window layers (OLMo 3)");
  LR_EXPECT_ERROR_HAS(with("olmo2", "model_type", "olmo3"),
                      "unsupported model_type 'olmo3' (lowrank imports llama, mistral, qwen2, "
                      "qwen3, gemma3_text, smollm3, granite, phi3, olmo2)");
  LR_EXPECT_ERROR_HAS(with("smollm3", "no_rope_layers", json::array({1, 1, 0})),
                      "field 'no_rope_layers' is [1,1,0] (expected a list of 4 flags");
  json smol = fixture_config("smollm3");
  smol["use_sliding_window"] = true;
  smol["sliding_window"] = 8;
  LR_EXPECT_ERROR_HAS(config_error(smol), "ask for sliding-window layers");
  LR_EXPECT_ERROR_HAS(with("granite", "logits_scaling", 0),
                      "field 'logits_scaling' is 0 (expected a positive number)");
  LR_EXPECT_ERROR_HAS(with("granite", "hidden_act", "gelu"),
                      "field 'hidden_act' is \"gelu\" (expected 'silu': a SwiGLU FFN)");
  json yarn = fixture_config("phi3");
  yarn["rope_scaling"]["type"] = "yarn";
  LR_EXPECT_ERROR_HAS(config_error(yarn), "rope_scaling type 'yarn' is not supported");
  json short_list = fixture_config("phi3");
  short_list["rope_scaling"]["long_factor"].erase(0);
  LR_EXPECT_ERROR_HAS(config_error(short_list),
                      "field 'rope_scaling.long_factor' has 11 factors, expected 12 (rotary dims "
                      "24 / 2)");
}

// A directory whose tensors do not fit its config: the tensor named.
TEST(HfArchConfig, AMissingFusedTensorIsNamed) {
  test::TempDir t;
  const std::string d = t.file("phi3");
  std::filesystem::create_directories(d);
  std::filesystem::copy_file(kHf + "phi3/config.json", d + "/config.json");
  auto src = SafetensorsSource::open_dir(kHf + "phi3");
  std::vector<SafetensorsTensor> kept;
  for (const std::string& n : src->names()) {
    if (n == "model.layers.1.mlp.gate_up_proj.weight") continue;
    auto v = src->find(n);
    kept.push_back({n, v->dtype, std::vector<int64_t>(v->shape.rbegin(), v->shape.rend()),
                    std::vector<uint8_t>(v->data, v->data + v->nbytes)});
  }
  write_safetensors(d + "/model.safetensors", kept);
  const Config c = config_from_hf_json(d + "/config.json");
  const std::string e = test::error_of(
      [&] { load_weights(c, *SafetensorsSource::open_dir(d), Naming::HuggingFace, DType::F32); });
  LR_EXPECT_ERROR_HAS(e, "missing tensor 'model.layers.1.mlp.gate_proj.weight'");
}

}  // namespace
}  // namespace lr
