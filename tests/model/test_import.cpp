// `lowrank import`: a tiny model compressed by lowrank is written out in each
// family's checkpoint layout (HuggingFace names and q/k row order, the
// family's factor names), imported back, and must give the same logits.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "core/error.h"
#include "core/half.h"
#include "format/dobi_remap.h"
#include "format/safetensors.h"
#include "linalg/linalg.h"
#include "model/load.h"
#include "compress/compress_model.h"
#include "import/import_model.h"
#include "runtime/model.h"
#include "runtime/session.h"
#include "model_test_util.h"
#include "torch_writer.h"

namespace lr {
namespace {

using test::rel_err;

const std::vector<int32_t> kToks = {1, 80, 120, 33, 201, 7, 99, 150, 3, 42};

std::vector<float> logits_of(const std::string& path) {
  Model m = load_model(path, DType::F32);
  auto b = make_session(m, ExecPath::Reference, test::backend_options(32, 1));
  std::vector<float> out(kToks.size() * size_t(m.weights->cfg.vocab));
  b->forward(kToks.data(), int(kToks.size()), out.data(), true);
  return out;
}

// Row-major values of a matrix; q/k output rows back in HuggingFace order.
std::vector<float> values(const Matrix& m, bool hf_rows, int head_dim) {
  std::vector<float> v(size_t(m.rows * m.cols));
  for (int64_t r = 0; r < m.rows; ++r)
    m.row_to_f32(r, &v[size_t((hf_rows ? hf_row_for_gguf_row(r, head_dim) : r) * m.cols)]);
  return v;
}

struct Layout {
  std::string family;
  // (first, second) tensor names for module M (…self_attn.q_proj) of parent P and leaf x ("q"), layer l.
  std::function<std::pair<std::string, std::string>(const std::string& M, const std::string& P,
                                                    const std::string& x, int l)> names;
  bool a_first = true;  // the first name holds V [r, in]
};

// All tensors of `w` under HuggingFace names, factors named by `lay`.
std::vector<test::TorchTensor> hf_tensors(const Weights& w, const Layout& lay) {
  const Config& c = w.cfg;
  std::vector<test::TorchTensor> ts;
  std::map<const uint8_t*, std::string> storage_of;  // shared bases alias one storage
  auto add = [&](const std::string& name, const Matrix& m, bool hf_rows) {
    const std::string key = storage_of.count(m.ptr()) ? storage_of[m.ptr()] : std::to_string(storage_of.size());
    storage_of[m.ptr()] = key;
    ts.push_back({name, m.rows == 1 ? std::vector<int64_t>{m.cols} : std::vector<int64_t>{m.rows, m.cols},
                  values(m, hf_rows, c.head_dim), key});
  };
  add("model.embed_tokens.weight", w.tok_embd, false);
  add("model.norm.weight", w.out_norm, false);
  if (!c.tied_output) add("lm_head.weight", w.output.w, false);
  for (int l = 0; l < c.n_layers; ++l) {
    const Layer& L = w.layers[size_t(l)];
    add(fmt::format("model.layers.{}.input_layernorm.weight", l), L.attn_norm, false);
    add(fmt::format("model.layers.{}.post_attention_layernorm.weight", l), L.ffn_norm, false);
    for (const WeightSpec& spec : kWeightTable) {
      if (!spec.is_linear() || !spec.per_layer) continue;
      const std::string hf = fmt::format(fmt::runtime(spec.hf), l);
      const std::string M = hf.substr(0, hf.size() - 7), P = M.substr(0, M.rfind('.'));
      const std::string x = M.substr(M.rfind('.') + 1, M.size() - M.rfind('.') - 6);
      const Linear& lin = slot_linear(w, spec.slot, l);
      const bool qk = spec.slot == Slot::Q || spec.slot == Slot::K;
      if (!lin.low_rank()) {
        add(hf, lin.w, qk);
        continue;
      }
      auto [first, second] = lay.names(M, P, x, l);
      add(lay.a_first ? first : second, lin.v, false);
      add(lay.a_first ? second : first, lin.u, qk);
    }
  }
  return ts;
}

// The tensors as a whole-model pickle, as SVD-LLM v1 and Dobi-SVD (no
// remapping) torch.save it: {'model': LlamaForCausalLM, 'tokenizer': ...},
// one module object per name component, classed as those codes class them.
test::TorchNode whole_model(const std::vector<test::TorchTensor>& ts) {
  const std::string hf = "transformers.models.llama.modeling_llama.";
  auto cls = [&](const std::string& parent, const std::string& comp, const std::string& next) -> std::string {
    if (comp == "model") return hf + "LlamaModel";
    if (comp == "layers") return "torch.nn.modules.container.ModuleList";
    if (parent == "layers") return hf + "LlamaDecoderLayer";
    if (comp == "embed_tokens") return "torch.nn.modules.sparse.Embedding";
    if (comp.find("norm") != std::string::npos) return hf + "LlamaRMSNorm";
    if (comp == "self_attn") return next.find("_u_proj") != std::string::npos || next.find("_v_proj") != std::string::npos
                                        ? "component.svd_llama.SVD_LlamaAttention" : hf + "LlamaAttention";
    if (comp == "mlp") return next.find("_u_proj") != std::string::npos || next.find("_v_proj") != std::string::npos
                                  ? "component.svd_llama.SVD_LlamaMLP" : hf + "LlamaMLP";
    if (next == "ALinear" || next == "BLinear") return "modules.module.SVDTransformLayer";
    return "torch.nn.modules.linear.Linear";
  };
  test::TorchNode root = test::TorchNode::module(hf + "LlamaForCausalLM");
  for (const test::TorchTensor& t : ts) {
    std::vector<std::string> parts;
    for (size_t a = 0, b; a <= t.name.size(); a = b + 1) {
      b = t.name.find('.', a);
      if (b == std::string::npos) b = t.name.size();
      parts.push_back(t.name.substr(a, b - a));
    }
    test::TorchNode* node = &root;
    for (size_t i = 0; i + 1 < parts.size(); ++i)
      node = &node->at(parts[i], [&] { return test::TorchNode::module(cls(i ? parts[i - 1] : "", parts[i], parts[i + 1])); });
    node->set(parts.back(), test::TorchNode::of(t));
  }
  test::TorchNode top = test::TorchNode::dict();
  top.set("model", root);
  top.set("tokenizer", test::TorchNode::module("transformers.models.llama.tokenization_llama_fast.LlamaTokenizerFast"));
  return top;
}

void write_safetensors_dir(const std::string& dir, const std::vector<test::TorchTensor>& ts, const nlohmann::json& cfg) {
  std::filesystem::create_directories(dir);
  std::vector<SafetensorsTensor> st;
  for (const auto& t : ts) {
    SafetensorsTensor s{t.name, DType::F32, t.shape, std::vector<uint8_t>(t.data.size() * 4)};
    std::memcpy(s.bytes.data(), t.data.data(), s.bytes.size());
    st.push_back(std::move(s));
  }
  write_safetensors(dir + "/model.safetensors", st);
  std::ofstream(dir + "/config.json") << cfg.dump();
}

struct Fixture {
  test::TempDir t;
  std::string dense, lr;
  Fixture(int n_layers = 2, int basis_sharing = 0) {
    test::TinySpec s;
    s.tokenizer = true;
    s.n_layers = n_layers;
    dense = test::write_tiny(t, s, "dense.gguf");
    CompressOptions o;
    o.factor_type = DType::F32;
    if (basis_sharing) {
      o.basis_sharing = basis_sharing;
      o.calib_path = test::write_calib(t);
      o.calib_samples = 4;
      o.calib_len = 64;
    } else {
      o.method = CompressMethod::Svd;
      // Ranks that differ per matrix; the MLP's down projection stays dense.
      o.ranks = {{"attn_q", 7}, {"attn_k", 5}, {"attn_v", 3}, {"attn_output", 9}, {"ffn_gate", 11}, {"ffn_up", 6}};
      o.kinds = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up"};
    }
    compress_model(dense, {{0.5, t.file("lr.gguf")}}, o);
    lr = t.file("lr.gguf");
  }
  ImportReport import(const std::string& in, const std::string& from = "auto") {
    ImportOptions o;
    o.base = dense;
    o.from = from;
    o.factor_type = DType::F32;
    return import_checkpoint(in, t.file("imported.gguf"), o);
  }
};

const Layout kSvdLlmExport{"svdllm", [](auto& M, auto&, auto&, int) {
                             return std::pair{M + ".v_proj.weight", M + ".u_proj.weight"};
                           }};
const Layout kSvdLlmPickle{"svdllm", [](auto&, auto& P, auto& x, int) {
                             return std::pair{P + "." + x + "_v_proj.weight", P + "." + x + "_u_proj.weight"};
                           }};
const Layout kAsvd{"asvd", [](auto& M, auto&, auto&, int) {
                     return std::pair{M + ".BLinear.weight", M + ".ALinear.weight"};
                   }};
const Layout kDobi{"dobi", [](auto& M, auto&, auto&, int) {
                     return std::pair{M + ".ALinear.weight", M + ".BLinear.weight"};
                   }};

TEST(Import, EveryFamilyRoundTripsToTheSameLogits) {
  Fixture f;
  const auto want = logits_of(f.lr);
  Model m = load_model(f.lr, DType::F32);
  struct Case {
    Layout lay;
    bool torch;
    nlohmann::json cfg;
    std::string whole_model;  // a whole-model pickle file of this name
  };
  for (const Case& cs : {Case{kSvdLlmExport, true, {{"model_type", "svdllm-llama"}}, ""},
                         Case{kSvdLlmPickle, true, nullptr, "svdllm.pt"},
                         Case{kAsvd, false, {{"truncation_ranks", {{"model.layers.1.mlp.up_proj", 6}}}}, ""},
                         Case{kDobi, false, {{"dobi_target_modules", {}}}, ""},
                         Case{kDobi, true, nullptr, "DobiSVD_Model.pt"}}) {
    SCOPED_TRACE(cs.lay.family + " " + cs.whole_model);
    auto ts = hf_tensors(*m.weights, cs.lay);
    const std::string dir = f.t.file(cs.lay.family + (cs.torch ? "-bin" : "-st"));
    std::string in = dir;
    if (!cs.whole_model.empty()) {
      in = f.t.file(cs.whole_model);  // a single file: torch.save({'model': model, 'tokenizer': tok})
      test::write_torch(in, whole_model(ts));
    } else if (cs.torch) {
      std::filesystem::create_directories(dir);
      test::write_torch_state_dict(dir + "/pytorch_model.bin", ts);
      std::ofstream(dir + "/config.json") << cs.cfg.dump();
    } else {
      write_safetensors_dir(dir, ts, cs.cfg);
    }
    ImportReport r = f.import(in);
    EXPECT_EQ(r.family, cs.lay.family);
    if (cs.whole_model == "DobiSVD_Model.pt") {  // told apart from ASVD by the pickled class
      EXPECT_NE(r.detected_by.find("modules.module.SVDTransformLayer"), std::string::npos) << r.detected_by;
    }
    ASSERT_EQ(r.matrices.size(), 14u);
    EXPECT_EQ(r.matrices[0].rank, 7);   // blk.0.attn_q
    EXPECT_EQ(r.matrices[2].rank, 3);   // blk.0.attn_v
    EXPECT_EQ(r.matrices[6].rank, 0);   // blk.0.ffn_down: dense
    EXPECT_TRUE(r.from_base.empty());
    EXPECT_LT(rel_err(logits_of(f.t.file("imported.gguf")), want), 1e-5);
  }
}

TEST(Import, BasisSharingKeepsOneBasisPerGroup) {
  Fixture f(3, 2);
  Model m = load_model(f.lr, DType::F32);
  const Layout bs{"basis-sharing", [](auto& M, auto& P, auto& x, int) {
                    return std::pair{P + "." + x + "_basis.weight", M + ".weight"};
                  }};
  auto ts = hf_tensors(*m.weights, bs);
  const std::string dir = f.t.file("bs");
  std::filesystem::create_directories(dir);
  test::write_torch_state_dict(dir + "/pytorch_model.bin", ts);
  nlohmann::json cfg = {{"architectures", {"ShareLlamaForCausalLM"}}, {"q_groups", {{0, 1}, {2}}}};
  std::ofstream(dir + "/config.json") << cfg.dump();
  ImportReport r = f.import(dir);
  EXPECT_EQ(r.family, "basis-sharing");
  EXPECT_TRUE(r.matrices[0].shared);   // blk.0.attn_q
  EXPECT_FALSE(r.matrices[3].shared);  // blk.0.attn_output is private
  Model im = load_model(f.t.file("imported.gguf"), DType::F32);
  EXPECT_EQ(im.weights->layers[0].q.v.ptr(), im.weights->layers[1].q.v.ptr());
  EXPECT_NE(im.weights->layers[0].q.v.ptr(), im.weights->layers[2].q.v.ptr());
  EXPECT_LT(rel_err(logits_of(f.t.file("imported.gguf")), logits_of(f.lr)), 1e-5);

  // A basis count in config.json that disagrees with the tensors.
  std::ofstream(dir + "/config.json") << nlohmann::json{{"num_basis_q", 999}}.dump();
  try {
    f.import(dir);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("num_basis_q is 999, layer 0 has a q basis of 21 vectors"), std::string::npos)
        << e.what();
  }
  std::ofstream(dir + "/config.json") << cfg.dump();

  // Bases that the config says are shared but differ: an error.
  for (auto& t : ts)
    if (t.name == "model.layers.1.self_attn.q_basis.weight") {
      t.storage = "private";
      t.data[0] += 1.f;
    }
  test::write_torch_state_dict(dir + "/pytorch_model.bin", ts);
  try {
    f.import(dir);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layers 0 and 1 claim to share the q basis"), std::string::npos) << e.what();
  }
}

TEST(Import, MissingWeightsComeFromBase) {
  Fixture f;
  Model m = load_model(f.lr, DType::F32);
  auto ts = hf_tensors(*m.weights, kAsvd);
  std::erase_if(ts, [](const test::TorchTensor& t) { return t.name == "model.embed_tokens.weight" || t.name == "lm_head.weight"; });
  write_safetensors_dir(f.t.file("asvd"), ts, {});
  ImportReport r = f.import(f.t.file("asvd"));
  EXPECT_EQ(r.from_base, (std::vector<std::string>{"output.weight", "token_embd.weight"}));
  EXPECT_LT(rel_err(logits_of(f.t.file("imported.gguf")), logits_of(f.lr)), 1e-5);
}

// Palu: k and v factored per head group (V^T [sum r_g, in], one U.g per
// group), everything else dense. Built here from the tiny dense model by an
// SVD of each group's rows; the reference is the same checkpoint with k and v
// as their dense products blockdiag(U) V^T, imported as plain dense weights.
TEST(Import, PaluHeadGroupFactorsRoundTrip) {
  Fixture f;
  Model dense = load_model(f.dense, DType::F32);
  const Config& c = dense.weights->cfg;
  ASSERT_EQ(c.n_kv_heads, 2);  // two head groups of one head (16 rows each)
  auto palu = hf_tensors(*dense.weights, kAsvd), ref = palu;  // all dense so far
  nlohmann::json hw = nlohmann::json::object();
  const int ranks[2][2][2] = {{{5, 3}, {4, 6}}, {{2, 7}, {8, 1}}};  // [layer][k, v][group]
  for (int l = 0; l < c.n_layers; ++l)
    for (int x = 0; x < 2; ++x) {
      const std::string M = fmt::format("model.layers.{}.self_attn.{}_proj", l, x == 0 ? "k" : "v");
      auto it = std::find_if(palu.begin(), palu.end(), [&](const test::TorchTensor& t) { return t.name == M + ".weight"; });
      ASSERT_NE(it, palu.end());
      const test::TorchTensor W = *it;
      palu.erase(it);
      const int64_t out = W.shape[0], in = W.shape[1], rows = out / 2;
      std::vector<float> vt, prod(size_t(out * in), 0.f);
      int64_t R = 0;
      for (int g = 0; g < 2; ++g) {
        const int r = ranks[l][x][g];
        compress::MatD B(rows, in);
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t j = 0; j < in; ++j) B(i, j) = W.data[size_t((g * rows + i) * in + j)];
        const compress::Svd sv = compress::svd(B, r);
        test::TorchTensor U{fmt::format("{}.U.{}.weight", M, g), {rows, r}, {}, ""};
        for (int64_t i = 0; i < rows; ++i)
          for (int k = 0; k < r; ++k) U.data.push_back(float(sv.u(i, k) * sv.s[size_t(k)]));
        for (int k = 0; k < r; ++k)
          for (int64_t j = 0; j < in; ++j) vt.push_back(float(sv.vt(k, j)));
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t j = 0; j < in; ++j) {
            double p = 0;
            for (int k = 0; k < r; ++k) p += double(U.data[size_t(i * r + k)]) * double(float(sv.vt(k, j)));
            prod[size_t((g * rows + i) * in + j)] = float(p);
          }
        U.storage = U.name;
        palu.push_back(U);
        R += r;
      }
      palu.push_back({M + ".VT.weight", {R, in}, vt, M + ".VT"});
      hw[M] = {ranks[l][x][0], ranks[l][x][1]};
      for (auto& t : ref)
        if (t.name == M + ".weight") t.data = prod;
    }
  write_safetensors_dir(f.t.file("palu"), palu, {{"model_type", "palullama"}, {"head_wise_ranks", hw}});
  ImportReport r = f.import(f.t.file("palu"));
  EXPECT_EQ(r.family, "palu");
  ASSERT_EQ(r.matrices.size(), 14u);
  EXPECT_EQ(r.matrices[1].rank, 8);   // blk.0.attn_k: 5 + 3
  EXPECT_EQ(r.matrices[2].rank, 10);  // blk.0.attn_v: 4 + 6
  EXPECT_EQ(r.matrices[0].rank, 0);   // q stays dense
  EXPECT_NE(r.matrices[1].note.find("Palu: 2 head group(s), ranks 5+3; block-diagonal U stored dense (50% zeros)"),
            std::string::npos) << r.matrices[1].note;
  const auto got = logits_of(f.t.file("imported.gguf"));
  write_safetensors_dir(f.t.file("palu-ref"), ref, {});
  f.import(f.t.file("palu-ref"), "asvd");  // all dense: k and v as their products
  EXPECT_LT(rel_err(got, logits_of(f.t.file("imported.gguf"))), 1e-5);
  EXPECT_GT(rel_err(got, logits_of(f.dense)), 1e-3);  // and the factors really are truncated

  // Broken Palu checkpoints name what is wrong.
  auto err = [&](const std::string& dir) {
    try {
      f.import(dir);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  nlohmann::json bad_hw = hw;
  bad_hw["model.layers.1.self_attn.v_proj"] = {8, 2};
  write_safetensors_dir(f.t.file("palu-hw"), palu, {{"head_wise_ranks", bad_hw}});
  EXPECT_NE(err(f.t.file("palu-hw")).find("head_wise_ranks says model.layers.1.self_attn.v_proj has group ranks [8,2], "
                                          "its U.* blocks have [8,1]"),
            std::string::npos) << err(f.t.file("palu-hw"));
  auto missing = palu;
  std::erase_if(missing, [](const test::TorchTensor& t) { return t.name == "model.layers.0.self_attn.k_proj.U.1.weight"; });
  write_safetensors_dir(f.t.file("palu-missing"), missing, {});
  EXPECT_NE(err(f.t.file("palu-missing")).find("the 1 U.* blocks of 'model.layers.0.self_attn.k_proj' have 16 rows and "
                                               "ranks summing to 5; expected 32 rows and the 8 rows of its VT"),
            std::string::npos) << err(f.t.file("palu-missing"));
}

// Dobi-SVD's remapped layout: pytorch_model.bin holds only the non-linear
// weights, remapping_weight.pt per linear map the 8-bit codes of U*s and V^T
// (Σ on the longer side, its overhang in f16, tuple_info). Built here from a
// full SVD of each dense matrix, quantized to the nearest code; the reference
// is the all-dense model of the products of the dequantized factors.
TEST(Import, DobiRemappedFactorsRoundTrip) {
  Fixture f;
  Model dense = load_model(f.dense, DType::F32);
  const auto all = hf_tensors(*dense.weights, kAsvd);  // every matrix dense
  auto ref = all;
  std::vector<test::TorchTensor> rest;  // what pytorch_model.bin keeps
  test::TorchNode remap = test::TorchNode::dict();
  const std::array<float, 256>& code = dobi::dynamic_map();
  auto f16 = [](double x) { return f16_to_f32(f32_to_f16(float(x))); };
  auto half_bytes = [](const std::vector<float>& x) {
    std::vector<uint8_t> b(x.size() * 2);
    for (size_t i = 0; i < x.size(); ++i) {
      const uint16_t h = f32_to_f16(x[i]);
      std::memcpy(&b[2 * i], &h, 2);
    }
    return b;
  };
  // Ranks per projection (q, k, v, o, gate, up, down); up's 40 is past (out + in) k < out in: dense.
  const std::map<std::string, int> rank = {{"q", 9}, {"k", 5}, {"v", 3}, {"o", 12}, {"gate", 17}, {"up", 40}, {"down", 8}};
  int id = 0;
  for (const test::TorchTensor& W : all) {
    const std::string M = W.name.substr(0, W.name.size() - 7);
    const std::string x = M.substr(M.rfind('.') + 1, M.size() - M.rfind('.') - 6);
    if (W.shape.size() != 2 || !rank.count(x) || W.name.find("layers.") == std::string::npos) {
      rest.push_back(W);
      continue;
    }
    const int64_t m = W.shape[0], n = W.shape[1], q = std::min(m, n), k = rank.at(x);
    compress::MatD A(m, n);
    std::copy(W.data.begin(), W.data.end(), A.a.begin());
    const compress::Svd sv = compress::svd(A, q);
    // us [m, k] = U*s when m >= n else U; vt [k, n] = V^T when m >= n else s*V^T.
    auto us = [&](int64_t j, int64_t i) { return sv.u(j, i) * (m >= n ? sv.s[size_t(i)] : 1.0); };
    auto vt = [&](int64_t i, int64_t j) { return sv.vt(i, j) * (m >= n ? 1.0 : sv.s[size_t(i)]); };
    std::vector<uint8_t> us_q, vt_q;
    std::vector<float> us_max, vt_max, over;
    compress::MatD U2(m, k), V2(k, n);  // the dequantized factors, as Dobi's loader makes them
    auto quantize = [&](const std::function<double(int64_t)>& val, std::vector<uint8_t>& codes, std::vector<float>& maxes,
                        const std::function<void(int64_t, float)>& put) {
      double amax = 0;
      for (int64_t j = 0; j < q; ++j) amax = std::max(amax, std::abs(val(j)));
      const float scale = f16(amax);
      maxes.push_back(scale);
      for (int64_t j = 0; j < q; ++j) {
        const double y = val(j) / amax;
        size_t best = 0;
        for (size_t cc = 1; cc < 256; ++cc)
          if (std::abs(code[cc] - y) < std::abs(code[best] - y)) best = cc;
        codes.push_back(uint8_t(best));
        put(j, f16(double(code[best]) * double(scale)));
      }
    };
    for (int64_t i = 0; i < k; ++i) {
      quantize([&](int64_t j) { return us(j, i); }, us_q, us_max, [&](int64_t j, float v) { U2(j, i) = v; });
      quantize([&](int64_t j) { return vt(i, j); }, vt_q, vt_max, [&](int64_t j, float v) { V2(i, j) = v; });
    }
    if (m > n)  // overhang rows of us, [m - n, k]
      for (int64_t j = n; j < m; ++j)
        for (int64_t i = 0; i < k; ++i) over.push_back(U2(j, i) = f16(us(j, i)));
    if (m < n)  // overhang columns of vt, [k, n - m]
      for (int64_t i = 0; i < k; ++i)
        for (int64_t j = m; j < n; ++j) over.push_back(V2(i, j) = f16(vt(i, j)));
    auto tensor = [&](std::vector<int64_t> shape, std::string type, std::vector<uint8_t> bytes) {
      return test::TorchNode::of({"", std::move(shape), {}, std::to_string(id++), std::move(type), std::move(bytes)});
    };
    test::TorchNode& d = remap.set(M, test::TorchNode::dict());
    d.set("us_quan", tensor({k, q}, "ByteStorage", us_q));
    d.set("vt_quan", tensor({k, q}, "ByteStorage", vt_q));
    d.set("us_absmax", tensor({k}, "HalfStorage", half_bytes(us_max)));
    d.set("vt_absmax", tensor({k}, "HalfStorage", half_bytes(vt_max)));
    d.set("tuple_info", m == n ? test::TorchNode{}
                               : test::TorchNode::tuple({test::TorchNode::str(m > n ? "us" : "vt"),
                                                         tensor(m > n ? std::vector<int64_t>{m - n, k}
                                                                      : std::vector<int64_t>{k, n - m},
                                                                "HalfStorage", half_bytes(over))}));
    const compress::MatD P = compress::matmul(U2, V2);
    for (auto& t : ref)
      if (t.name == W.name) t.data.assign(P.a.begin(), P.a.end());
  }
  const std::string dir = f.t.file("dobi-remap");
  std::filesystem::create_directories(dir);
  test::write_torch_state_dict(dir + "/pytorch_model.bin", rest);
  test::write_torch(dir + "/remapping_weight.pt", remap);
  std::ofstream(dir + "/config.json") << nlohmann::json{{"model_type", "llama"}}.dump();
  ImportReport r = f.import(dir);
  EXPECT_EQ(r.family, "dobi");
  EXPECT_NE(r.detected_by.find("remapping_weight.pt"), std::string::npos) << r.detected_by;
  ASSERT_EQ(r.matrices.size(), 14u);
  const int64_t want[7] = {9, 5, 3, 12, 17, 0, 8};  // q k v o gate up(dense) down, in table order
  for (int i = 0; i < 7; ++i) {
    SCOPED_TRACE(r.matrices[size_t(i)].name);
    EXPECT_EQ(r.matrices[size_t(i)].rank, want[i]);
  }
  EXPECT_NE(r.matrices[5].note.find("Dobi-SVD remapped rank 40 is not smaller than the matrix"), std::string::npos)
      << r.matrices[5].note;
  EXPECT_TRUE(r.from_base.empty());
  const auto got = logits_of(f.t.file("imported.gguf"));
  write_safetensors_dir(f.t.file("dobi-ref"), ref, {});
  f.import(f.t.file("dobi-ref"), "asvd");  // all dense: every matrix as its dequantized product
  EXPECT_LT(rel_err(got, logits_of(f.t.file("imported.gguf"))), 1e-5);
  EXPECT_GT(rel_err(got, logits_of(f.dense)), 1e-3);  // truncated and quantized: not the dense model

  // A module whose codes are missing a scale: named.
  test::TorchNode broken = remap;
  broken.items[0].keys.erase(broken.items[0].keys.begin() + 3);
  broken.items[0].items.erase(broken.items[0].items.begin() + 3);
  test::write_torch(dir + "/remapping_weight.pt", broken);
  try {
    f.import(dir);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'model.layers.0.self_attn.q_proj.us_quan' has no "
                                         "'model.layers.0.self_attn.q_proj.vt_absmax' beside it"),
              std::string::npos)
        << e.what();
  }
}

TEST(Import, BadInputIsAClearError) {
  Fixture f;
  Model m = load_model(f.lr, DType::F32);
  auto err = [&](const std::string& in, const std::string& from = "auto") {
    try {
      f.import(in, from);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  // A factor pair whose shapes do not multiply to the matrix.
  auto ts = hf_tensors(*m.weights, kAsvd);
  for (auto& t : ts)
    if (t.name == "model.layers.1.self_attn.k_proj.ALinear.weight") {
      t.shape = {32, 4};
      t.data.resize(32 * 4);
    }
  write_safetensors_dir(f.t.file("bad"), ts, {});
  EXPECT_NE(err(f.t.file("bad")).find("'model.layers.1.self_attn.k_proj.BLinear.weight' [5, 64] and "
                                      "'model.layers.1.self_attn.k_proj.ALinear.weight' [32, 4] are not the two factors"),
            std::string::npos)
      << err(f.t.file("bad"));
  // A checkpoint that asks to run code.
  EXPECT_NE(err(LOWRANK_SOURCE_DIR "/tests/fixtures/torch/calls_system.pt").find("refusing to call posix.system"),
            std::string::npos);
  // A rank map in config.json that disagrees with the tensors.
  write_safetensors_dir(f.t.file("asvd-ranks"), hf_tensors(*m.weights, kAsvd),
                        {{"truncation_ranks", {{"model.layers.0.self_attn.q_proj", 8}}}});
  EXPECT_NE(err(f.t.file("asvd-ranks")).find("truncation_ranks says model.layers.0.self_attn.q_proj has rank 8, its "
                                             "tensors have rank 7"),
            std::string::npos)
      << err(f.t.file("asvd-ranks"));
  // Unknown family, missing files, no factors.
  EXPECT_NE(err(f.t.file("bad"), "palm").find("unknown family 'palm'"), std::string::npos);
  // The wrong family named explicitly: what was looked for, not a crash.
  EXPECT_NE(err(f.t.file("bad"), "palu").find("no factors and no dense weight for attn_q of layer 0 (looked for "
                                              "'model.layers.0.self_attn.q_proj.weight')"),
            std::string::npos)
      << err(f.t.file("bad"), "palu");
  EXPECT_NE(err(f.t.file("nothing")).find("no such file or directory"), std::string::npos);
  EXPECT_NE(err(LOWRANK_SOURCE_DIR "/tests/fixtures/torch/state_dict.pt").find("no factor tensors of a known family"),
            std::string::npos);
}

}  // namespace
}  // namespace lr

namespace lr {
namespace {

// The default model compressed by lowrank (whitened SVD, and whitened basis
// sharing), written in the SVD-LLM v1 and Basis Sharing layouts, imported
// back: the same logits. Skipped when the model is not cached.
TEST(DefaultModel, ImportRoundTripsSvdLlmAndBasisSharing) {
  if (!std::filesystem::exists(default_model_path())) GTEST_SKIP() << "default model not cached";
  test::TempDir t;
  std::ofstream(t.file("calib.txt")) << std::ifstream(LOWRANK_SHARED_DIR "/data/wiki.calib.raw").rdbuf();
  for (int g : {0, 2}) {
    SCOPED_TRACE(g ? "basis sharing" : "svd-llm");
    CompressOptions o;
    o.factor_type = DType::F32;
    o.calib_path = t.file("calib.txt");
    o.calib_samples = 4;
    o.calib_len = 128;
    o.basis_sharing = g;
    compress_model(default_model_path(), {{0.6, t.file("lr.gguf")}}, o);
    Model m = load_model(t.file("lr.gguf"), DType::F32);
    const Layout lay = g ? Layout{"basis-sharing", [](auto& M, auto& P, auto& x, int) {
                                    return std::pair{P + "." + x + "_basis.weight", M + ".weight"};
                                  }}
                         : kSvdLlmPickle;
    auto ts = hf_tensors(*m.weights, lay);
    // The tied embedding is left out: it comes from --base.
    std::erase_if(ts, [](const test::TorchTensor& x) { return x.name == "model.embed_tokens.weight"; });
    if (g)
      test::write_torch_state_dict(t.file("ckpt.pt"), ts);  // Basis Sharing: a state dict
    else
      test::write_torch(t.file("ckpt.pt"), whole_model(ts));  // SVD-LLM v1: the pickled model
    ImportOptions io;
    io.base = default_model_path();
    io.factor_type = DType::F32;
    ImportReport r = import_checkpoint(t.file("ckpt.pt"), t.file("imported.gguf"), io);
    EXPECT_EQ(r.family, lay.family);
    EXPECT_EQ(r.from_base, std::vector<std::string>{"token_embd.weight"});
    Model a = load_model(t.file("lr.gguf"), DType::F32), b = load_model(t.file("imported.gguf"), DType::F32);
    auto run = [&](const Model& mm) {
      auto be = make_session(mm, ExecPath::Fast, test::backend_options(32, 2));
      std::vector<int32_t> toks = mm.tokenizer->encode("The capital of France is", true);
      std::vector<float> out(toks.size() * size_t(mm.weights->cfg.vocab));
      be->forward(toks.data(), int(toks.size()), out.data(), true);
      return out;
    };
    EXPECT_LT(rel_err(run(b), run(a)), 1e-5);
    if (g) {
      EXPECT_EQ(b.weights->layers[0].q.v.ptr(), b.weights->layers[1].q.v.ptr());
    }
  }
}

}  // namespace
}  // namespace lr
