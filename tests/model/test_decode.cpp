// The fast CPU executor of the plan: every rung (kv mode, packing, fusion,
// execution unit) against the scalar reference, exact dispatch and barrier
// counts, and packing at load time.
#include <gtest/gtest.h>

#include <algorithm>

#include "backend/backend.h"
#include "core/error.h"
#include "model/pack.h"
#include "compress/compress_model.h"
#include "runtime/model.h"
#include "runtime/session.h"
#include "model_test_util.h"

namespace lr {
namespace {

using test::rel_err;

// 80 token ids: decode attends over up to 80 positions, more than one block
// of 32 keys of the attention kernel (the running-max rescale is exercised).
const std::vector<int32_t> kSeq = [] {
  std::vector<int32_t> s;
  for (int i = 0; i < 80; ++i) s.push_back(int32_t(1 + (i * 97 + 13) % 250));
  return s;
}();
constexpr int kPrompt = 40;

std::vector<ExecOptions> all_exec(bool legacy) {
  std::vector<ExecOptions> out;
  for (KvMode kv : {KvMode::Static, KvMode::Dense, KvMode::Legacy}) {
    if (kv == KvMode::Legacy && !legacy) continue;
    for (bool packed : {false, true})
      for (bool fused : {false, true})
        for (ExecUnit u : {ExecUnit::PerOp, ExecUnit::PerLayer, ExecUnit::PerToken})
          out.push_back({kv, packed, fused, u});
  }
  return out;
}

std::string describe(const ExecOptions& e, int threads) {
  const char* kv[] = {"static", "dense", "legacy"};
  const char* unit[] = {"per-op", "per-layer", "per-token"};
  return fmt::format("kv={} packed={} fused={} unit={} threads={}", kv[int(e.kv)], e.packed,
                     e.fused, unit[int(e.unit)], threads);
}

// Logits of positions kPrompt-1 .. end: the prompt as one prefill, then every
// further token as one decode step (teacher forcing).
std::vector<float> decode_logits(const Model& m, ExecPath path, const ExecOptions& e, int threads) {
  BackendOptions o;
  o.ctx = 96;
  o.cpu.n_threads = threads;
  o.exec = e;
  auto b = make_session(m, path, o);
  const size_t V = size_t(m.weights->cfg.vocab);
  std::vector<float> out((kSeq.size() - kPrompt + 1) * V);
  b->forward(kSeq.data(), kPrompt, out.data(), false);
  for (size_t t = kPrompt; t < kSeq.size(); ++t)
    b->forward(&kSeq[t], 1, out.data() + (t - kPrompt + 1) * V, false);
  return out;
}

std::vector<int32_t> greedy(const Model& m, ExecPath path, const ExecOptions& e, int threads, int n) {
  BackendOptions o;
  o.ctx = 96;
  o.cpu.n_threads = threads;
  o.exec = e;
  auto b = make_session(m, path, o);
  std::vector<float> logits(size_t(m.weights->cfg.vocab));
  b->forward(kSeq.data(), kPrompt, logits.data(), false);
  std::vector<int32_t> toks;
  for (int i = 0; i < n; ++i) {
    int32_t t = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    toks.push_back(t);
    b->forward(&t, 1, logits.data(), false);
  }
  return toks;
}

// Every switch combination, at 1 and 3 threads (3 splits the tiny shapes
// unevenly), against the reference: logits within 1e-4 (f32 weights: only
// summation order differs) and identical greedy tokens.
void check_all_modes(const std::string& path, bool legacy) {
  Model m = load_model(path, DType::F32);
  const ExecOptions def;
  const auto ref = decode_logits(m, ExecPath::Reference, def, 1);
  const auto ref_greedy = greedy(m, ExecPath::Reference, def, 1, 10);
  for (const ExecOptions& e : all_exec(legacy))
    for (int threads : {1, 3}) {
      SCOPED_TRACE(describe(e, threads));
      EXPECT_LT(rel_err(decode_logits(m, ExecPath::Fast, e, threads), ref), 1e-4);
      EXPECT_EQ(greedy(m, ExecPath::Fast, e, threads, 10), ref_greedy);
    }
}

test::TinySpec tiny() {
  test::TinySpec s;
  s.tokenizer = true;
  return s;
}

// GQA 3:1 with head_dim 12 and widths that are not multiples of 8 or 16.
test::TinySpec odd_tiny() {
  test::TinySpec s = tiny();
  s.dim = 72;
  s.n_heads = 6;
  s.n_kv_heads = 2;
  s.ffn_dim = 100;
  s.n_layers = 3;
  s.seed = 7;
  return s;
}

// Ranks that differ between the packed parts, including rank 1 and full rank.
std::string compress_hetero(const test::TempDir& t, const std::string& dense,
                            const std::string& name, std::vector<std::string> kinds = {}) {
  CompressOptions o;
  o.method = CompressMethod::Svd;
  o.factor_type = DType::F32;
  o.ranks = {{"attn_q", 7}, {"attn_k", 5}, {"attn_v", 3}, {"attn_output", 9},
             {"ffn_gate", 11}, {"ffn_up", -1}, {"ffn_down", 1}};
  if (!kinds.empty()) o.kinds = kinds;
  compress_model(dense, {{0.5, t.file(name)}}, o);
  return t.file(name);
}

TEST(Decode, DenseModelEveryModeMatchesReference) {
  test::TempDir t;
  check_all_modes(test::write_tiny(t, odd_tiny(), "dense.gguf"), false);
}

TEST(Decode, LowRankHeterogeneousRanksEveryModeMatchesReference) {
  test::TempDir t;
  std::string dense = test::write_tiny(t, odd_tiny(), "dense.gguf");
  check_all_modes(compress_hetero(t, dense, "lr.gguf"), true);
}

TEST(Decode, PartlyLowRankLayersEveryModeMatchesReference) {
  // q and up low-rank, k, v and gate dense: neither group can be packed.
  test::TempDir t;
  std::string dense = test::write_tiny(t, odd_tiny(), "dense.gguf");
  std::string lr = compress_hetero(t, dense, "part.gguf", {"attn_q", "ffn_up", "ffn_down"});
  Model m = load_model(lr, DType::F32);
  EXPECT_EQ(packed_input(m.weights->layers[0].qkv_in, {&m.weights->layers[0].q, &m.weights->layers[0].k,
                                                       &m.weights->layers[0].v}),
            nullptr);
  check_all_modes(lr, false);
}

// A 3-layer tiny model with basis sharing in groups of 2 (layers 0 and 1
// share the input bases of q, k, v, gate, up; layer 2 keeps its own).
std::string compress_shared(const test::TempDir& t) {
  test::TinySpec s = tiny();
  s.n_layers = 3;
  std::string dense = test::write_tiny(t, s, "dense.gguf");
  CompressOptions o;
  o.basis_sharing = 2;
  o.factor_type = DType::F32;
  o.calib_path = test::write_calib(t);
  o.calib_samples = 4;
  o.calib_len = 64;
  compress_model(dense, {{0.6, t.file("bs.gguf")}}, o);
  return t.file("bs.gguf");
}

TEST(Decode, BasisSharingEveryModeMatchesReference) {
  test::TempDir t;
  check_all_modes(compress_shared(t), true);
}

TEST(Decode, SixteenBitWeightsWithinTolerance) {
  test::TempDir t;
  std::string dense = test::write_tiny(t, odd_tiny(), "dense.gguf");
  std::string lr = compress_hetero(t, dense, "lr.gguf");
  for (const std::string& path : {dense, lr}) {
    const auto ref = decode_logits(load_model(path, DType::F32), ExecPath::Reference, {}, 1);
    // Q8_0: int8 weights and int8 activations in decode (f32 activations in
    // prefill), a scale per 32 values.
    for (auto [wtype, tol] : {std::pair{DType::F16, 5e-3}, std::pair{DType::BF16, 3e-2},
                              std::pair{DType::Q8_0, 5e-2}}) {
      Model m = load_model(path, wtype);
      for (const ExecOptions& e : all_exec(path == lr)) {
        SCOPED_TRACE(describe(e, 2) + " " + std::string(dtype_name(wtype)));
        EXPECT_LT(rel_err(decode_logits(m, ExecPath::Fast, e, 2), ref), tol);
      }
    }
  }
}

// Dispatches and barriers of one decode step, counted by the thread pool.
ExecCounters one_step(const Model& m, const ExecOptions& e, int threads) {
  BackendOptions o;
  o.ctx = 64;
  o.cpu.n_threads = threads;
  o.exec = e;
  auto b = make_session(m, ExecPath::Fast, o);
  std::vector<float> logits(size_t(m.weights->cfg.vocab));
  b->forward(kSeq.data(), kPrompt, logits.data(), false);
  b->reset_counters();
  b->forward(&kSeq[kPrompt], 1, logits.data(), false);
  return b->counters();
}

TEST(Decode, DispatchAndBarrierCountsFollowThePlan) {
  test::TempDir t;
  test::TinySpec s = tiny();  // 2 layers
  std::string dense = test::write_tiny(t, s, "dense.gguf");
  std::string lr = compress_hetero(t, dense, "lr.gguf");
  Model mlr = load_model(lr, DType::F32), md = load_model(dense, DType::F32);
  for (int threads : {1, 2}) {
    SCOPED_TRACE(threads);
    // Low-rank, packed, fused, dense KV: 9 steps per layer (qkv_in, qkv_out,
    // attend, o_in, o_out, gate_up_in, gate_up_out, down_in, down_out) and
    // one for the output head: 19 steps.
    auto c = one_step(mlr, {KvMode::Dense, true, true, ExecUnit::PerToken}, threads);
    EXPECT_EQ(c.dispatches, 1u);
    EXPECT_EQ(c.barriers, 18u);
    c = one_step(mlr, {KvMode::Dense, true, true, ExecUnit::PerLayer}, threads);
    EXPECT_EQ(c.dispatches, 3u);
    EXPECT_EQ(c.barriers, 16u);
    c = one_step(mlr, {KvMode::Dense, true, true, ExecUnit::PerOp}, threads);
    EXPECT_EQ(c.dispatches, 19u);
    EXPECT_EQ(c.barriers, 0u);
    // Naive eager: 24 operations per layer (attn_norm, q/k/v_in, q/k/v_out,
    // rope, append, scores, softmax, mix, o_in, o_out, attn_residual,
    // ffn_norm, gate/up_in, gate/up_out, silu_mul, down_in, down_out,
    // ffn_residual) and output_norm, output: 50 dispatches.
    c = one_step(mlr, {KvMode::Static, false, false, ExecUnit::PerOp}, threads);
    EXPECT_EQ(c.dispatches, 50u);
    EXPECT_EQ(c.barriers, 0u);
    // Legacy: attn_norm, q/k/v_in, q_out, kv_rebuild, attend, merge, o_in,
    // o_out, attn_residual and the same 9 MLP operations: 20 per layer.
    c = one_step(mlr, {KvMode::Legacy, false, false, ExecUnit::PerOp}, threads);
    EXPECT_EQ(c.dispatches, 42u);
    // Dense model, packed, fused: qkv, attend, o, gate_up, down per layer.
    c = one_step(md, {KvMode::Dense, true, true, ExecUnit::PerToken}, threads);
    EXPECT_EQ(c.dispatches, 1u);
    EXPECT_EQ(c.barriers, 10u);
  }
}

TEST(Decode, PackingStacksInputFactorsWithoutCopies) {
  test::TempDir t;
  test::TinySpec s = tiny();
  std::string dense = test::write_tiny(t, s, "dense.gguf");
  std::string lr = compress_hetero(t, dense, "lr.gguf");
  Model m = load_model(lr, DType::F32);
  const Layer& L = m.weights->layers[1];
  ASSERT_NE(packed_input(L.qkv_in, {&L.q, &L.k, &L.v}), nullptr);
  EXPECT_EQ(L.qkv_in.rows, 7 + 5 + 3);
  EXPECT_EQ(L.qkv_in.cols, 64);
  EXPECT_EQ(L.k.v.ptr(), L.qkv_in.ptr() + 7 * 64 * 4);
  ASSERT_NE(packed_input(L.gate_up_in, {&L.gate, &L.up}), nullptr);
  EXPECT_EQ(L.gate_up_in.rows, 11 + 64);  // up at full rank min(96, 64)
  // The views are the factors: row 2 of the packed matrix is row 2 of Vq,
  // row 7 is row 0 of Vk; and memory is counted once.
  auto f = gguf::File::open(lr);
  EXPECT_EQ(m.weights->bytes(), [&] {
    uint64_t b = 0;
    for (const auto& ti : f->tensors()) b += ti.nbytes;
    return b;
  }());
  // Editing a copy of the weights (as compress does) invalidates the packing.
  Weights copy = *m.weights;
  copy.layers[1].k.v = Matrix::allocate(DType::F32, 5, 64);
  const Layer& C = copy.layers[1];
  EXPECT_EQ(packed_input(C.qkv_in, {&C.q, &C.k, &C.v}), nullptr);
}

TEST(Decode, SharedBasesStaySharedWhenPacked) {
  test::TempDir t;
  Model m = load_model(compress_shared(t), DType::F32);
  const auto& L = m.weights->layers;
  ASSERT_NE(packed_input(L[0].qkv_in, {&L[0].q, &L[0].k, &L[0].v}), nullptr);
  EXPECT_EQ(L[0].qkv_in.ptr(), L[1].qkv_in.ptr());  // one packed basis for the group
  EXPECT_NE(L[0].qkv_in.ptr(), L[2].qkv_in.ptr());
  EXPECT_EQ(L[0].gate_up_in.ptr(), L[1].gate_up_in.ptr());
}

TEST(Decode, LegacyKvNeedsLowRankKeysAndValues) {
  test::TempDir t;
  Model m = load_model(test::write_tiny(t, tiny(), "dense.gguf"), DType::F32);
  BackendOptions o;
  o.exec.kv = KvMode::Legacy;
  try {
    make_session(m, ExecPath::Fast, o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--kv legacy"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("layer 0 has a dense k"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lr
