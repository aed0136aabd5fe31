// `lowrank import` on architectures beyond LLaMA: SVD-LLM / ASVD factor pairs
// of the Gemma 3 and Phi-3 fixtures (tests/fixtures/arch), written under the
// HuggingFace modules' names (Phi-3's fused qkv_proj and gate_up_proj) from
// the GGUF's own tensors (NEOX-RoPE models: the GGUF keeps HF's row order),
// imported onto the fixture as --base. Full-rank factors give the base's
// logits up to the factors' rounding; truncated ones give the logits of the
// same checkpoint with each matrix as its dense product.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "../error_of.h"
#include "format/gguf.h"
#include "format/safetensors.h"
#include "import/import_model.h"
#include "linalg/linalg.h"
#include "model_test_util.h"
#include "runtime/model.h"
#include "runtime/session.h"

namespace lr {
namespace {

const std::string kArch = LOWRANK_SOURCE_DIR "/tests/fixtures/arch/";
const std::vector<int32_t> kToks = {1, 80, 120, 33, 201, 7, 99, 150, 3, 42, 17, 260};

std::vector<float> logits_of(const std::string& path, ExecPath p = ExecPath::Reference) {
  Model m = load_model(path, DType::F32);
  auto b = make_session(m, p, test::backend_options(32, 1));
  std::vector<float> out(kToks.size() * size_t(m.weights->cfg.vocab));
  b->forward(kToks.data(), int(kToks.size()), out.data(), true);
  return out;
}

struct Mat {
  int64_t rows = 0, cols = 0;
  std::vector<float> v;
};

// A tensor of the GGUF as stored (f32), row-major [rows, cols] or [n].
Mat gguf_tensor(const gguf::File& f, const std::string& name) {
  const gguf::TensorInfo* t = f.find_tensor(name);
  EXPECT_NE(t, nullptr) << name;
  EXPECT_EQ(t->dtype, DType::F32);
  Mat m{t->shape.size() == 2 ? int64_t(t->shape[1]) : 1, int64_t(t->shape[0]), {}};
  m.v.resize(size_t(m.rows * m.cols));
  std::memcpy(m.v.data(), t->data, m.v.size() * 4);
  return m;
}

// SVD factors of a rank-r truncation: V [r, cols] (applied first), U [rows, r] (U * s).
struct Pair {
  Mat v, u, product;  // product: U V, the dense matrix the pair stands for
};
Pair factor(const Mat& w, int64_t r) {
  linalg::MatD a(w.rows, w.cols);
  for (size_t i = 0; i < w.v.size(); ++i) a.a[i] = w.v[i];
  const linalg::Svd s = linalg::svd(a, r);
  Pair p{{r, w.cols, {}}, {w.rows, r, {}}, {w.rows, w.cols, {}}};
  for (int64_t k = 0; k < r; ++k)
    for (int64_t j = 0; j < w.cols; ++j) p.v.v.push_back(float(s.vt(k, j)));
  for (int64_t i = 0; i < w.rows; ++i)
    for (int64_t k = 0; k < r; ++k) p.u.v.push_back(float(s.u(i, k) * s.s[size_t(k)]));
  for (int64_t i = 0; i < w.rows; ++i)
    for (int64_t j = 0; j < w.cols; ++j) {
      double x = 0;
      for (int64_t k = 0; k < r; ++k)
        x += double(p.u.v[size_t(i * r + k)]) * double(p.v.v[size_t(k * w.cols + j)]);
      p.product.v.push_back(float(x));
    }
  return p;
}

struct Ckpt {
  std::vector<SafetensorsTensor> ts;
  void add(const std::string& name, const Mat& m, bool vector = false) {
    SafetensorsTensor t{
        name, DType::F32,
        vector ? std::vector<int64_t>{m.cols} : std::vector<int64_t>{m.rows, m.cols},
        std::vector<uint8_t>(m.v.size() * 4)};
    std::memcpy(t.bytes.data(), m.v.data(), t.bytes.size());
    ts.push_back(std::move(t));
  }
  std::string write(const test::TempDir& t, const std::string& dir) const {
    std::filesystem::create_directories(t.file(dir));
    write_safetensors(t.file(dir) + "/model.safetensors", ts);
    return t.file(dir);
  }
};

// How a module is stored: its factor names (V's, U's) by family, or dense.
enum class Form { SvdLlm, Asvd, Dense };
void add_module(Ckpt& ck, const std::string& M, const Mat& w, int64_t rank, Form form) {
  if (rank <= 0) return ck.add(M + ".weight", w);
  const Pair p = factor(w, rank);
  if (form == Form::Dense) return ck.add(M + ".weight", p.product);
  ck.add(M + (form == Form::SvdLlm ? ".v_proj.weight" : ".BLinear.weight"), p.v);
  ck.add(M + (form == Form::SvdLlm ? ".u_proj.weight" : ".ALinear.weight"), p.u);
}

ImportReport import(const std::string& in, const std::string& base, const std::string& out,
                    DType factor_type, const std::string& from = "auto") {
  ImportOptions o;
  o.base = base;
  o.from = from;
  o.factor_type = factor_type;
  return import_checkpoint(in, out, o);
}

// Gemma 3 (NEOX RoPE, q/k norms, norms after attention and the FFN, tied
// embedding) from SVD-LLM's HuggingFace-style export.
Ckpt gemma3_checkpoint(const gguf::File& f, int64_t rank, Form form, bool with_norms) {
  static const std::vector<std::pair<std::string, std::string>> maps = {
      {"attn_q", "self_attn.q_proj"}, {"attn_k", "self_attn.k_proj"},
      {"attn_v", "self_attn.v_proj"}, {"attn_output", "self_attn.o_proj"},
      {"ffn_gate", "mlp.gate_proj"},  {"ffn_up", "mlp.up_proj"},
      {"ffn_down", "mlp.down_proj"}};
  static const std::vector<std::pair<std::string, std::string>> norms = {
      {"attn_norm", "input_layernorm"},
      {"attn_q_norm", "self_attn.q_norm"},
      {"attn_k_norm", "self_attn.k_norm"},
      {"post_attention_norm", "post_attention_layernorm"},
      {"ffn_norm", "pre_feedforward_layernorm"},
      {"post_ffw_norm", "post_feedforward_layernorm"}};
  Ckpt ck;
  auto hf_norm = [&](const std::string& hf, const std::string& gguf_name) {
    Mat n = gguf_tensor(f, gguf_name);
    for (float& x : n.v) x -= 1.f;  // Gemma3RMSNorm's weight: the scale is 1 + w
    ck.add(hf, n, true);
  };
  if (with_norms) {
    ck.add("model.embed_tokens.weight", gguf_tensor(f, "token_embd.weight"));
    hf_norm("model.norm.weight", "output_norm.weight");
  }
  for (int l = 0; l < 4; ++l) {
    const std::string P = fmt::format("model.layers.{}.", l), b = fmt::format("blk.{}.", l);
    for (const auto& [g, hf] : maps) {
      const Mat w = gguf_tensor(f, b + g + ".weight");
      add_module(ck, P + hf, w, std::min({rank, w.rows, w.cols}), form);
    }
    for (const auto& [g, hf] : norms)
      if (with_norms) hf_norm(P + hf + ".weight", b + g + ".weight");
  }
  return ck;
}

TEST(ImportArch, Gemma3FullRankPairsGiveTheBase) {
  test::TempDir t;
  const std::string base = kArch + "gemma3.gguf";
  auto f = gguf::File::open(base);
  const std::string in = gemma3_checkpoint(*f, 1 << 20, Form::SvdLlm, false).write(t, "svdllm");
  const ImportReport r = import(in, base, t.file("full.gguf"), DType::F16);
  EXPECT_EQ(r.family, "svdllm");
  ASSERT_EQ(r.matrices.size(), 28u);
  EXPECT_EQ(r.matrices[0].rank, 64);  // blk.0.attn_q [128, 64]
  EXPECT_EQ(r.matrices[1].rank, 32);  // blk.0.attn_k [32, 64]
  // Every non-linear tensor from the base: the embedding (tied), the output
  // norm, and per layer its six norms (q/k norms, post-norms included).
  EXPECT_EQ(r.from_base.size(), 2u + 4u * 6u);
  for (const char* n : {"blk.3.post_attention_norm.weight", "blk.3.post_ffw_norm.weight",
                        "blk.0.attn_q_norm.weight", "token_embd.weight"})
    EXPECT_NE(std::find(r.from_base.begin(), r.from_base.end(), n), r.from_base.end()) << n;
  const Model m = load_model(t.file("full.gguf"), DType::F32);
  EXPECT_EQ(m.weights->cfg.arch, "gemma3");
  EXPECT_TRUE(m.weights->layers[0].q.low_rank());
  EXPECT_EQ(m.weights->layers[0].q_norm.cols, 32);  // dense, a head's
  EXPECT_TRUE(m.weights->cfg.tied_output);
  const std::vector<float> want = logits_of(base), got = logits_of(t.file("full.gguf"));
  const double err = test::rel_err(got, want);
  fmt::print("  gemma3 full-rank F16 factors: logits within {:.1e} of the base's\n", err);
  EXPECT_LT(err, 1e-2);
  EXPECT_LT(test::rel_err(logits_of(t.file("full.gguf"), ExecPath::Fast), got), 1e-4);
}

// Rank 12, the norms (HF's w, scale 1 + w; the FFN's named
// pre_feedforward_layernorm) and the embedding from the checkpoint: the same
// logits as the checkpoint of the dense products U V, and the base's norms.
TEST(ImportArch, Gemma3TruncatedPairsAndTheirNorms) {
  test::TempDir t;
  const std::string base = kArch + "gemma3.gguf";
  auto f = gguf::File::open(base);
  const std::string in = gemma3_checkpoint(*f, 12, Form::SvdLlm, true).write(t, "svdllm");
  const ImportReport r = import(in, base, t.file("r12.gguf"), DType::F32);
  EXPECT_TRUE(r.from_base.empty());
  const std::string ref = gemma3_checkpoint(*f, 12, Form::Dense, true).write(t, "dense");
  const ImportReport rr = import(ref, base, t.file("dense.gguf"), DType::F32, "asvd");
  EXPECT_EQ(rr.matrices[0].rank, 0);  // q dense: its rows kept in the GGUF's (HF's) order
  const std::vector<float> got = logits_of(t.file("r12.gguf"));
  EXPECT_LT(test::rel_err(got, logits_of(t.file("dense.gguf"))), 1e-5);
  EXPECT_GT(test::rel_err(got, logits_of(base)), 1e-3);  // truncated: not the base
  const Model a = load_model(t.file("r12.gguf"), DType::F32), b = load_model(base, DType::F32);
  for (int l = 0; l < 4; ++l) {
    const Layer &x = a.weights->layers[size_t(l)], &y = b.weights->layers[size_t(l)];
    using Norms = std::vector<std::pair<const Matrix*, const Matrix*>>;
    for (const auto& [p, q] : Norms{{&x.ffn_norm, &y.ffn_norm},
                                    {&x.attn_post_norm, &y.attn_post_norm},
                                    {&x.k_norm, &y.k_norm}})
      for (int64_t i = 0; i < p->cols; ++i)
        ASSERT_EQ(p->f32()[i], (q->f32()[i] - 1.f) + 1.f) << "layer " << l << " element " << i;
  }
}

// Phi-3: qkv_proj and gate_up_proj fused (GGUF attn_qkv and ffn_up hold the
// same rows), o_proj and down_proj as LLaMA's.
Ckpt phi3_checkpoint(const gguf::File& f, int64_t qkv, int64_t gate_up, int64_t o, Form form) {
  Ckpt ck;
  for (int l = 0; l < 2; ++l) {
    const std::string P = fmt::format("model.layers.{}.", l), b = fmt::format("blk.{}.", l);
    add_module(ck, P + "self_attn.qkv_proj", gguf_tensor(f, b + "attn_qkv.weight"), qkv, form);
    add_module(ck, P + "mlp.gate_up_proj", gguf_tensor(f, b + "ffn_up.weight"), gate_up, form);
    add_module(ck, P + "self_attn.o_proj", gguf_tensor(f, b + "attn_output.weight"), o, form);
    add_module(ck, P + "mlp.down_proj", gguf_tensor(f, b + "ffn_down.weight"), 0, form);
  }
  return ck;
}

// ASVD pairs of the fused matrices: split by rows, V shared. At rank 48 the
// q part (128 x 128) keeps its factors, k and v (64 x 128) come out dense
// (48 (64 + 128) > 64 * 128), gate and up keep rank 40.
TEST(ImportArch, Phi3FusedPairsAreSplitByRows) {
  test::TempDir t;
  const std::string base = kArch + "phi3.gguf";
  auto f = gguf::File::open(base);
  const std::string in = phi3_checkpoint(*f, 48, 40, 20, Form::Asvd).write(t, "asvd");
  const ImportReport r = import(in, base, t.file("lr.gguf"), DType::F32);
  EXPECT_EQ(r.family, "asvd");
  ASSERT_EQ(r.matrices.size(), 14u);
  const int64_t ranks[7] = {48, 0, 0, 20, 40, 40, 0};  // q k v o gate up down
  for (int i = 0; i < 7; ++i) {
    SCOPED_TRACE(r.matrices[size_t(i)].name);
    EXPECT_EQ(r.matrices[size_t(i)].rank, ranks[i]);
  }
  EXPECT_NE(r.matrices[1].note.find("qkv_proj's rank-48 pair split: rank 48 is not smaller than "
                                    "this part: multiplied back to dense"),
            std::string::npos)
      << r.matrices[1].note;
  const Model m = load_model(t.file("lr.gguf"), DType::F32);
  EXPECT_EQ(m.weights->cfg.arch, "phi3");
  EXPECT_EQ(m.weights->layers[1].q.rank(), 48);
  EXPECT_EQ(m.weights->layers[1].up.u.rows, 128);
  EXPECT_EQ(m.weights->layers[1].k.w.rows, 64);
  const std::string ref = phi3_checkpoint(*f, 48, 40, 20, Form::Dense).write(t, "dense");
  import(ref, base, t.file("dense.gguf"), DType::F32, "asvd");
  const std::vector<float> got = logits_of(t.file("lr.gguf"));
  EXPECT_LT(test::rel_err(got, logits_of(t.file("dense.gguf"))), 1e-5);
  EXPECT_GT(test::rel_err(got, logits_of(base)), 1e-3);
  EXPECT_LT(test::rel_err(logits_of(t.file("lr.gguf"), ExecPath::Fast), got), 1e-4);
}

// Full rank (128) everywhere, SVD-LLM's names, F16 factors: the fused parts
// come out dense, o keeps its pair; the base's logits within f16 rounding.
TEST(ImportArch, Phi3FullRankGivesTheBase) {
  test::TempDir t;
  const std::string base = kArch + "phi3.gguf";
  auto f = gguf::File::open(base);
  const std::string in = phi3_checkpoint(*f, 128, 128, 128, Form::SvdLlm).write(t, "svdllm");
  const ImportReport r = import(in, base, t.file("full.gguf"), DType::F16);
  EXPECT_EQ(r.family, "svdllm");
  EXPECT_EQ(r.matrices[0].rank, 0);
  EXPECT_EQ(r.matrices[3].rank, 128);
  const double err = test::rel_err(logits_of(t.file("full.gguf")), logits_of(base));
  fmt::print("  phi3 full-rank F16 factors: logits within {:.1e} of the base's\n", err);
  EXPECT_LT(err, 1e-2);
}

TEST(ImportArch, Phi3FusedFactorsOfOtherFamiliesAreRefused) {
  test::TempDir t;
  const std::string base = kArch + "phi3.gguf";
  auto f = gguf::File::open(base);
  Ckpt ck = phi3_checkpoint(*f, 0, 0, 0, Form::Dense);
  ck.add("model.layers.0.self_attn.qkv_proj.VT.weight", Mat{8, 128, std::vector<float>(8 * 128)});
  const std::string in = ck.write(t, "palu");
  LR_EXPECT_ERROR_HAS(test::error_of([&] { import(in, base, t.file("x.gguf"), DType::F32); }),
                      "'model.layers.0.self_attn.qkv_proj' is phi3's fused qkv_proj module: "
                      "Palu's per-head-group factors of a fused module are not supported");
  // A pair whose shapes do not multiply to the fused matrix: both named.
  Ckpt bad = phi3_checkpoint(*f, 0, 0, 0, Form::Dense);
  bad.ts.erase(bad.ts.begin());  // layer 0's dense qkv_proj
  bad.add("model.layers.0.self_attn.qkv_proj.v_proj.weight",
          Mat{8, 128, std::vector<float>(8 * 128)});
  bad.add("model.layers.0.self_attn.qkv_proj.u_proj.weight",
          Mat{128, 8, std::vector<float>(128 * 8)});
  const std::string in2 = bad.write(t, "bad");
  LR_EXPECT_ERROR_HAS(
      test::error_of([&] { import(in2, base, t.file("x.gguf"), DType::F32); }),
      "'model.layers.0.self_attn.qkv_proj.v_proj.weight' [8, 128] and "
      "'model.layers.0.self_attn.qkv_proj.u_proj.weight' [128, 8] are not the two factors of a "
      "[256, 128] matrix (qkv_proj of layer 0)");
}

}  // namespace
}  // namespace lr
