// The architectures beyond LLaMA and Qwen on the CUDA backend, each a
// configuration of the one plan: Gemma 3 (embedding scale, post norms,
// GeGLU, sliding-window layers with a RoPE base of their own, per-head q/k
// norms), SmolLM3 (layers without RoPE), Granite (embedding, attention,
// residual and logit scales), OLMo 2 (no pre-norms, q/k norms over all of q
// and k) and Phi-3 (partial RoPE, LongRoPE: short and long factors, the
// attention factor). The fixtures are llama.cpp's (tests/fixtures/arch,
// head_dim 32, with its golden logits); the same models with heads of 256
// (Gemma 3's) and 96 (Phi-3.5-mini's) are written here. Against the fast CPU
// path on the same bf16 weights (cuda_test_util.h), and against llama.cpp.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "../error_of.h"
#include "bench/harness/harness.h"
#include "compress/compress_model.h"
#include "cuda_test_util.h"
#include "format/gguf.h"
#include "model/load.h"

namespace lr {
namespace {

using test::compare_with_cpu;

const std::string kDir = LOWRANK_SOURCE_DIR "/tests/fixtures/arch/";

class GpuArch : public test::GpuTest, public ::testing::WithParamInterface<std::string> {
 protected:
  std::string fixture() const { return kDir + GetParam() + ".gguf"; }
};

// The ablation's rungs the tests run: the eager baseline (static KV, unfused,
// per-op) and the fastest (fused, one CUDA graph per token).
std::vector<BenchMode> rungs() {
  std::vector<BenchMode> out;
  for (const BenchMode& mode : bench_modes())
    if (mode.name == "naive" || mode.name == "per-token") out.push_back(mode);
  return out;
}

// Every step the GPU plan has for the architecture, in both rungs and with
// prefill on the own GEMM; dense and low-rank (plain SVD at keep 0.5).
// 37-token prompts: past Gemma 3's window of 16; Phi-3's session context
// (44) past its original one (32): the long factors.
TEST_P(GpuArch, FixtureMatchesTheCpu) {
  CompressOptions co;
  co.method = CompressMethod::Svd;
  co.factor_type = DType::F32;
  const std::string lowrank = t_.file("lowrank.gguf");
  compress_model(fixture(), {{0.5, lowrank}}, co);
  for (const std::string& path : {fixture(), lowrank}) {
    Model m = load_model(path, DType::BF16);
    ASSERT_EQ(m.weights->cfg.arch, GetParam());
    const std::string kind = path == lowrank ? "keep 0.5" : "dense";
    for (const BenchMode& mode : rungs())
      compare_with_cpu(m, mode.exec, 37, 6, fmt::format("{} {} {}", GetParam(), kind, mode.name));
    ASSERT_EQ(setenv("LOWRANK_CUDA_PREFILL", "own", 1), 0);
    compare_with_cpu(m, ExecOptions{}, 37, 2, fmt::format("{} {}, own GEMM", GetParam(), kind));
    unsetenv("LOWRANK_CUDA_PREFILL");
  }
}

struct Golden {
  std::vector<int32_t> tokens;
  std::vector<std::vector<int>> top5;
  std::vector<std::vector<double>> top5_logits;
  double scale = 1;
};

Golden golden(const std::string& arch) {
  std::ifstream in(kDir + arch + ".json");
  const nlohmann::json j = nlohmann::json::parse(in);
  return {j["tokens"].get<std::vector<int32_t>>(),
          j["top5_ids"].get<std::vector<std::vector<int>>>(),
          j["top5_logits"].get<std::vector<std::vector<double>>>(), j["logit_scale"].get<double>()};
}

// Of the logit scale: llama.cpp ran the fixtures' f32 weights (the CPU
// tests hold every path within 1e-3 of it, tests/model/test_architectures.cpp);
// the CUDA backend reads them rounded to bf16, which alone moves the top
// logits by up to 8e-3 of their scale (the fast CPU path on the same bf16
// weights, printed beside, is as far: gemma3 8e-3, the others 2e-3 to 7e-3).
constexpr double kGoldenTol = 1.5e-2;

// The worst of the top-5 logits against llama.cpp's at every position, of
// the logit scale; llama.cpp's top token wherever its margin over the next
// is more than twice the tolerance.
double golden_error(const std::vector<float>& logits, int V, const Golden& g) {
  double worst = 0;
  for (size_t p = 0; p < g.tokens.size(); ++p) {
    const float* row = logits.data() + p * size_t(V);
    for (size_t k = 0; k < 5; ++k)
      worst = std::max(worst, std::abs(double(row[g.top5[p][k]]) - g.top5_logits[p][k]));
    if (g.top5_logits[p][0] - g.top5_logits[p][1] > 2 * kGoldenTol * g.scale) {
      EXPECT_EQ(test::argmax(row, V), g.top5[p][0]) << "position " << p;
    }
  }
  return worst / g.scale;
}

// llama.cpp's top-5 logits at every position of the 80-token golden prompt,
// from the prompt at once (prefill, on cuBLAS) and one token a step (the
// per-token graph), session context 128 (Phi-3: the long factors, as
// llama.cpp's 256).
TEST_P(GpuArch, FixtureGivesLlamaCppsLogits) {
  const Golden g = golden(GetParam());
  Model m = load_model(fixture(), DType::BF16);
  const int V = m.weights->cfg.vocab;
  const size_t n = g.tokens.size();
  std::vector<float> logits(n * size_t(V));
  make_session(m, ExecPath::Fast, test::backend_options(128, 2))
      ->forward(g.tokens.data(), int(n), logits.data(), true);
  const double cpu = golden_error(logits, V, g);
  for (bool one_by_one : {false, true}) {
    SCOPED_TRACE(one_by_one ? "decode" : "prefill");
    auto b = make_session(m, ExecPath::Cuda, test::backend_options(128, 2));
    if (!one_by_one) b->forward(g.tokens.data(), int(n), logits.data(), true);
    for (size_t i = 0; one_by_one && i < n; ++i)
      b->forward(&g.tokens[i], 1, logits.data() + i * size_t(V), false);
    const double err = golden_error(logits, V, g);
    EXPECT_LT(err, kGoldenTol);
    fmt::print("  {:<8} {:<8} top-5 logits within {:.1e} of llama.cpp's (the CPU on bf16 {:.1e})\n",
               GetParam(), one_by_one ? "decode" : "prefill", err, cpu);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GpuArch,
                         ::testing::Values("gemma3", "smollm3", "granite", "olmo2", "phi3"),
                         [](const auto& info) { return info.param; });

class GpuArchitectures : public test::GpuTest {};

// Gemma 3's windowed layers across a split-K chunk (256 keys): windows that
// span two chunks (positions 262..270) and windows wholly in the second, whose
// first chunk the attention skips and the merge does not read (271..).
TEST_F(GpuArchitectures, WindowsAcrossSplitKChunks) {
  Model m = load_model(kDir + "gemma3.gguf", DType::BF16);
  ASSERT_EQ(m.weights->cfg.swa_window, 16);
  for (const BenchMode& mode : rungs())
    compare_with_cpu(m, mode.exec, 262, 14, "gemma3 windows past 256 keys, " + mode.name);
}

// Phi-3's LongRoPE with a session context of at most the original one (32):
// the short factors (the fixture tests above run the long ones).
TEST_F(GpuArchitectures, LongRopeShortFactors) {
  Model m = load_model(kDir + "phi3.gguf", DType::BF16);
  ASSERT_EQ(m.weights->cfg.rope_orig_ctx, 32);
  for (const BenchMode& mode : rungs())
    compare_with_cpu(m, mode.exec, 20, 8, "phi3 short factors (context 32), " + mode.name, 32);
}

// The fixture of `arch` with heads of `hd` values: its q, k, v, o (or fused
// qkv) matrices and q/k norms written anew (random, seeded), the rest as it is.
std::string with_head_dim(const test::TempDir& t, const std::string& arch, uint64_t hd) {
  auto f = gguf::File::open(kDir + arch + ".gguf");
  const Model m = load_model(kDir + arch + ".gguf", DType::F32);
  const Config& c = m.weights->cfg;
  const uint64_t h0 = uint64_t(c.head_dim), H = uint64_t(c.n_heads), KV = uint64_t(c.n_kv_heads);
  gguf::Writer w;
  for (const auto& [key, value] : f->metadata()) w.set(key, value);
  w.set_u32(arch + ".attention.key_length", uint32_t(hd));
  w.set_u32(arch + ".attention.value_length", uint32_t(hd));
  std::mt19937_64 rng(7);
  std::normal_distribution<float> nd(0.f, 1.f);
  auto ends = [](const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
  };
  for (const auto& ti : f->tensors()) {
    std::vector<uint64_t> shape = ti.shape;   // GGML order: [cols, rows]
    const auto heads = [&](uint64_t width) {  // a head's width, or all of q's or k's
      return width == h0 ? hd : width == H * h0 ? H * hd : width == KV * h0 ? KV * hd : width;
    };
    bool norm = false;
    if (ends(ti.name, "attn_q.weight"))
      shape[1] = H * hd;
    else if (ends(ti.name, "attn_k.weight") || ends(ti.name, "attn_v.weight"))
      shape[1] = KV * hd;
    else if (ends(ti.name, "attn_qkv.weight"))
      shape[1] = (H + 2 * KV) * hd;
    else if (ends(ti.name, "attn_output.weight"))
      shape[0] = H * hd;
    else if (ends(ti.name, "attn_q_norm.weight") || ends(ti.name, "attn_k_norm.weight"))
      shape[0] = heads(shape[0]), norm = true;
    else {
      w.add_tensor(ti.name, ti.dtype, ti.shape, ti.data, ti.nbytes);
      continue;
    }
    LR_ASSERT(ti.dtype == DType::F32);
    std::vector<float> v(shape[0] * (shape.size() > 1 ? shape[1] : 1));
    for (float& x : v) x = norm ? 1.f + 0.2f * nd(rng) : nd(rng) / std::sqrt(float(shape[0]));
    w.add_tensor(ti.name, DType::F32, shape, v.data(), v.size() * 4);
  }
  const std::string out = t.file(fmt::format("{}-head{}.gguf", arch, hd));
  w.write(out);
  return out;
}

// Gemma 3's heads of 256 (every Gemma 3 but 27B), and Phi-3.5-mini's of 96
// (an odd number of a head's values per lane: RoPE pairs across lanes).
TEST_F(GpuArchitectures, HeadDims256And96) {
  for (const auto& [arch, hd] : {std::pair<std::string, int>{"gemma3", 256}, {"phi3", 96}}) {
    Model m = load_model(with_head_dim(t_, arch, uint64_t(hd)), DType::BF16);
    ASSERT_EQ(m.weights->cfg.head_dim, hd);
    for (const BenchMode& mode : rungs())
      compare_with_cpu(m, mode.exec, 37, 6, fmt::format("{} head_dim {}, {}", arch, hd, mode.name));
    ASSERT_EQ(setenv("LOWRANK_CUDA_PREFILL", "own", 1), 0);
    compare_with_cpu(m, ExecOptions{}, 37, 2, fmt::format("{} head_dim {}, own GEMM", arch, hd));
    unsetenv("LOWRANK_CUDA_PREFILL");
  }
}

// What the CUDA backend does not run is refused, by name: heads of a width
// the attention kernels are not built for, and the legacy rung (which
// rebuilds every key with the model's one RoPE) over layers without RoPE.
TEST_F(GpuArchitectures, WhatItDoesNotRunIsRefused) {
  test::TinySpec s;
  s.head_dim = 80;
  s.tokenizer = true;
  Model m = load_model(test::write_tiny(t_, s, "hd80.gguf"), DType::BF16);
  LR_EXPECT_ERROR_HAS(
      test::error_of([&] { make_session(m, ExecPath::Cuda, test::backend_options(64, 2)); }),
      "the CUDA backend runs head_dim 32, 64, 96, 128 or 256 (the model has 80)");
  Model smol = load_model(kDir + "smollm3.gguf", DType::BF16);
  BackendOptions o = test::backend_options(64, 2);
  for (const BenchMode& mode : bench_modes())
    if (mode.name == "legacy") o.exec = mode.exec;
  ASSERT_EQ(o.exec.kv, KvMode::Legacy);
  LR_EXPECT_ERROR_HAS(test::error_of([&] { make_session(smol, ExecPath::Cuda, o); }),
                      "--kv legacy on the CUDA backend rebuilds every key with the model's one "
                      "RoPE, but layer 3 of this smollm3 model has no RoPE (use --kv dense)");
}

}  // namespace
}  // namespace lr
