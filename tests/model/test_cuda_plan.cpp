// The CUDA backend's host side, checked without a GPU: the launches one
// decode token makes in every rung of the ablation (counted by hand from the
// model's blocks), what the host issues per execution unit (graphs and their
// nodes), the device weight layout (shared storage once, rows padded) and the
// device memory plan; and `lowrank synth`, which makes the models the GPU
// check runs on.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>

#include "../error_of.h"
#include "backend/cuda/cuda.h"
#include "backend/cuda/plan.h"
#include "bench/harness/harness.h"
#include "compress/factorize.h"
#include "compress/synth_model.h"
#include "core/dtype.h"
#include "core/error.h"
#include "format/gguf.h"
#include "model/load.h"
#include "model/pack.h"
#include "model_test_util.h"
#include "runtime/model.h"
#include "runtime/session.h"

namespace lr {
namespace {

using cuda::launch_stats;
using cuda::plan_forward;

using test::error_of;

using test::Synth;

std::vector<std::string> names(const Plan& p, int layer) {
  std::vector<std::string> out;
  for (const Step& l : p.steps)
    if (l.layer == layer) out.push_back(l.name);
  return out;
}

ExecOptions exec(KvMode kv, bool packed, bool fused, ExecUnit unit) {
  ExecOptions e;
  e.kv = kv;
  e.packed = packed;
  e.fused = fused;
  e.unit = unit;
  return e;
}

TEST(CudaPlan, LaunchesPerTokenInEveryRung) {
  Synth s(0.5);  // every block matrix low-rank, the output head dense
  Model m = load_model(s.path, DType::BF16);
  const Weights& w = *m.weights;
  // Fastest: 9 launches per layer, the embedding, the output head (norm fused).
  const Plan fast = plan_forward(w, exec(KvMode::Dense, true, true, ExecUnit::PerToken));
  EXPECT_EQ(names(fast, 0),
            (std::vector<std::string>{"blk.0.qkv_in", "blk.0.qkv_out", "blk.0.attend", "blk.0.o_in",
                                      "blk.0.o_out", "blk.0.gate_up_in", "blk.0.gate_up_out",
                                      "blk.0.down_in", "blk.0.down_out"}));
  EXPECT_EQ(fast.steps.size(), 2u * 9 + 2);
  EXPECT_TRUE(fast.steps[3].rope_append);  // attend ropes q and k and appends k, v
  const Step& qkv_in = fast.steps[1];
  ASSERT_EQ(qkv_in.jobs.size(), 3u);  // one launch, three matrices, one normed input
  EXPECT_EQ(qkv_in.jobs[1].m, &w.layers[0].k.v);
  EXPECT_EQ(qkv_in.jobs[1].out_off, w.layers[0].q.rank());
  EXPECT_EQ(qkv_in.jobs[2].norm, &w.layers[0].attn_norm);
  const Step& o_in = fast.steps[4];
  EXPECT_TRUE(o_in.jobs[0].merge_in);  // the attention partials merged into the GEMV input
  EXPECT_EQ(o_in.jobs[0].m, &w.layers[0].o.v);
  const Step& down_in = fast.steps[8];
  EXPECT_EQ(down_in.jobs[0].in, Buf::G);
  EXPECT_EQ(down_in.jobs[0].in2, Buf::U);      // SiLU*mul fused into the GEMV input
  EXPECT_TRUE(fast.steps[9].jobs[0].accumulate);  // down_out: x += U P
  EXPECT_EQ(fast.steps.back().name, "output");
  // Ranks of a layer add up in the latent scratch.
  const Layer& L = w.layers[0];
  EXPECT_EQ(fast.p_width, L.q.rank() + L.k.rank() + L.v.rank() + L.o.rank() + L.gate.rank() +
                              L.up.rank() + L.down.rank());

  // Naive (static KV, unpacked, unfused): 24 per layer; every input side, then every output side.
  const Plan naive = plan_forward(w, exec(KvMode::Static, false, false, ExecUnit::PerOp));
  EXPECT_EQ(names(naive, 1),
            (std::vector<std::string>{
                "blk.1.attn_norm", "blk.1.q_in",    "blk.1.k_in",          "blk.1.v_in",
                "blk.1.q_out",     "blk.1.k_out",   "blk.1.v_out",         "blk.1.rope",
                "blk.1.append",    "blk.1.scores",  "blk.1.softmax",       "blk.1.mix",
                "blk.1.o_in",      "blk.1.o_out",   "blk.1.attn_residual", "blk.1.ffn_norm",
                "blk.1.gate_in",   "blk.1.up_in",   "blk.1.gate_out",      "blk.1.up_out",
                "blk.1.silu_mul",  "blk.1.down_in", "blk.1.down_out",      "blk.1.ffn_residual"}));
  EXPECT_EQ(naive.steps.size(), 2u * 24 + 3);  // + embed, output_norm, output
  // Legacy: k and v stay latents, the history is rebuilt: 22 per layer.
  const Plan legacy = plan_forward(w, exec(KvMode::Legacy, false, false, ExecUnit::PerOp));
  auto l0 = names(legacy, 0);
  EXPECT_EQ(std::vector<std::string>(l0.begin(), l0.begin() + 10),
            (std::vector<std::string>{"blk.0.attn_norm", "blk.0.q_in", "blk.0.k_in", "blk.0.v_in",
                                      "blk.0.q_out", "blk.0.latent_append", "blk.0.reconstruct",
                                      "blk.0.rope_q", "blk.0.attend", "blk.0.merge"}));
  EXPECT_EQ(legacy.steps.size(), 2u * 22 + 3);
  EXPECT_EQ(legacy.k_latent, L.k.rank());
  // Packed alone (dense KV, unfused): q/k/v and gate/up inputs one launch each.
  const Plan packed = plan_forward(w, exec(KvMode::Dense, true, false, ExecUnit::PerOp));
  EXPECT_EQ(packed.steps.size(), 2u * 16 + 3);
  const Plan densekv = plan_forward(w, exec(KvMode::Dense, false, false, ExecUnit::PerOp));
  EXPECT_EQ(densekv.steps.size(), 2u * 22 + 3);

  // What the host issues for the fastest plan in each unit.
  const auto eager = launch_stats(fast, ExecUnit::PerOp);
  EXPECT_EQ(eager.host_launches, 20 + 2);
  EXPECT_EQ(eager.graphs, 0);
  const auto per_layer = launch_stats(fast, ExecUnit::PerLayer);
  EXPECT_EQ(per_layer.host_launches, 3);
  EXPECT_EQ(per_layer.nodes_per_graph, (std::vector<int64_t>{1 + 1 + 9, 9, 1 + 1}));
  const auto per_token = launch_stats(fast, ExecUnit::PerToken);
  EXPECT_EQ(per_token.host_launches, 1);
  EXPECT_EQ(per_token.nodes_per_graph, (std::vector<int64_t>{20 + 2}));
}

// The plan itself, executed by the scalar plan executor against the reference
// forward pass in every rung of both targets: tests/model/test_plan.cpp.

TEST(CudaPlan, DenseModelAndWhatTheGpuDoesNotRun) {
  Synth s(1.0);
  Model m = load_model(s.path, DType::BF16);
  // Dense maps: one GEMV each, q/k/v and gate/up grouped, rope and append in attend, the
  // merge in o's input: 5 per layer.
  const Plan p =
      plan_forward(*m.weights, exec(KvMode::Dense, true, true, ExecUnit::PerToken));
  EXPECT_EQ(names(p, 0), (std::vector<std::string>{"blk.0.qkv", "blk.0.attend", "blk.0.o",
                                                   "blk.0.gate_up", "blk.0.down"}));
  EXPECT_TRUE(p.steps[3].jobs[0].merge_in);
  EXPECT_EQ(p.steps.size(), 2u * 5 + 2);
  EXPECT_NE(
      error_of([&] {
        plan_forward(*m.weights, exec(KvMode::Legacy, false, false, ExecUnit::PerOp));
      }).find("--kv legacy caches the low-rank latents of k and v, but layer 0 has a dense k projection"),
      std::string::npos);
  Model q8 = load_model(s.path, DType::Q8_0);
  EXPECT_NE(error_of([&] {
              cuda::plan_weights(*q8.weights);
            }).find("reads F32, F16 or BF16 weights, not Q8_0"),
            std::string::npos);
  // Prefill runs unfused and packed, eagerly; static KV attends with the split-K kernels there.
  const ExecOptions pre =
      prefill_options(exec(KvMode::Static, false, true, ExecUnit::PerToken));
  EXPECT_EQ(pre.kv, KvMode::Dense);
  EXPECT_TRUE(pre.packed);
  EXPECT_FALSE(pre.fused);
  EXPECT_EQ(pre.unit, ExecUnit::PerOp);
}

TEST(CudaPlan, WeightLayoutStoresEachAllocationOnceWithPaddedRows) {
  Synth s(0.5);
  Model m = load_model(s.path, DType::BF16);
  Weights& w = const_cast<Weights&>(*m.weights);
  pack_projections(w);  // q/k/v input factors become row views of one allocation
  const cuda::WeightLayout lay = cuda::plan_weights(w);
  const Layer& L = w.layers[0];
  const int64_t ld = cuda::padded_cols(w.cfg.dim);
  EXPECT_EQ(ld, 256);
  EXPECT_EQ(lay.offset_of(L.k.v), lay.offset_of(L.q.v) + uint64_t(L.q.rank() * ld));
  EXPECT_EQ(lay.offset_of(L.v.v), lay.offset_of(L.k.v) + uint64_t(L.k.rank() * ld));
  // U factors have rank columns: padded to 8.
  EXPECT_EQ(cuda::padded_cols(L.q.rank()), (L.q.rank() + 7) / 8 * 8);
  uint64_t want = 0;  // every matrix once, rows x padded cols
  auto count = [&](const Matrix& x) {
    want += uint64_t(x.rows) * uint64_t(cuda::padded_cols(x.cols));
  };
  count(w.tok_embd);
  count(w.output.w);
  for (const Layer& y : w.layers)
    for (const Linear* l : {&y.q, &y.k, &y.v, &y.o, &y.gate, &y.up, &y.down}) {
      count(l->v);
      count(l->u);
    }
  EXPECT_EQ(lay.elements, want);
  const Plan p = plan_forward(w, exec(KvMode::Dense, true, true, ExecUnit::PerToken));
  const cuda::MemoryPlan mem =
      cuda::plan_memory(w, p, exec(KvMode::Dense, true, true, ExecUnit::PerToken), 100, 16);
  const Config& c = w.cfg;
  EXPECT_EQ(mem.weights, want * 2 + uint64_t(c.dim) * 4 * (2 * c.n_layers + 1));  // + the f32 norms
  EXPECT_EQ(mem.kv, 2ull * c.n_layers * 100 * c.kv_dim() * 2);                    // f16 K and V
  EXPECT_EQ(mem.partials,
            16ull * c.n_heads * 1 * (c.head_dim + 2) * 4);  // 100 positions: one split-K block
  EXPECT_EQ(mem.prefill_inputs, 2ull * 16 * 384 * 2);  // hi and lo of the widest input (ffn 384)
  // A tied embedding is one allocation with the output head.
  Synth tied(0.5, "smollm2-135m");
  Model t = load_model(tied.path, DType::BF16);
  ASSERT_TRUE(t.weights->cfg.tied_output);
  const cuda::WeightLayout tl = cuda::plan_weights(*t.weights);
  EXPECT_EQ(tl.offset_of(t.weights->output.w), tl.offset_of(t.weights->tok_embd));
}

TEST(Synth, ShapesKeepAndDeterminism) {
  Synth a(0.5), b(0.5), c(0.5, "tiny", 2);
  auto bytes = [](const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  EXPECT_EQ(bytes(a.path), bytes(b.path));  // the same seed: the same file
  EXPECT_NE(bytes(a.path), bytes(c.path));
  Model m = load_model(a.path, DType::F32);
  const Config& cfg = m.weights->cfg;
  EXPECT_EQ(cfg.n_layers, 2);
  EXPECT_EQ(cfg.vocab, 300);
  for (const Layer& L : m.weights->layers) {
    EXPECT_EQ(L.q.rank(), compress::rank_for_keep(0.5, 256, 256));
    EXPECT_EQ(L.k.rank(), compress::rank_for_keep(0.5, 128, 256));
    EXPECT_EQ(L.gate.rank(), compress::rank_for_keep(0.5, 384, 256));
    EXPECT_EQ(L.down.rank(), compress::rank_for_keep(0.5, 256, 384));
  }
  // Values: uniform with the stated spread (V of q: sd 1/sqrt(256) = 0.0625, |x| <= 0.0625 sqrt 3).
  const Matrix& v = m.weights->layers[0].q.v;
  double ss = 0, mx = 0;
  for (int64_t i = 0; i < v.rows * v.cols; ++i) {
    ss += double(v.f32()[i]) * v.f32()[i];
    mx = std::max(mx, double(std::abs(v.f32()[i])));
  }
  EXPECT_NEAR(std::sqrt(ss / double(v.rows * v.cols)), 0.0625, 0.002);
  EXPECT_LE(mx, 0.0625 * std::sqrt(3.0) * (1 + 1.0 / 128));  // bf16 rounding
  // It runs, and its logits are finite and not all alike.
  auto be = make_session(m, ExecPath::Fast, test::backend_options(64, 1));
  std::vector<int32_t> toks = {1, 50, 100, 150, 7};
  std::vector<float> out(size_t(cfg.vocab));
  be->forward(toks.data(), int(toks.size()), out.data(), false);
  float lo = out[0], hi = out[0];
  for (float x : out) {
    ASSERT_TRUE(std::isfinite(x));
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
  EXPECT_GT(hi - lo, 0.1f);
  EXPECT_NE(error_of([] { synth_config("llama-70b"); })
                .find("unknown synthetic model shape 'llama-70b' (expected one of: tiny, "
                      "tiny-mha128, tiny-k, smollm2-135m, llama-7b, llama3.2-3b, qwen2.5-7b)"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              SynthOptions o;
              o.keep = 0;
              write_synthetic_model(a.t.file("x.gguf"), o);
            }).find("--keep must be in (0, 1]"),
            std::string::npos);
}

// Block formats: llama.cpp's Q4_K_M mix tensor by tensor, and each value within
// half a quantization step of the f32 file's (the same seed draws the same values).
TEST(Synth, Q4KMMixHoldsTheF32FilesValues) {
  test::TempDir t;
  SynthOptions o;
  o.shape = "tiny-k";
  o.wtype = DType::F32;
  write_synthetic_model(t.file("f32.gguf"), o);
  o.wtype = DType::Q4_K;
  o.q4_k_m = true;
  write_synthetic_model(t.file("q4km.gguf"), o);
  auto exact = gguf::File::open(t.file("f32.gguf")), km = gguf::File::open(t.file("q4km.gguf"));
  ASSERT_EQ(exact->tensors().size(), km->tensors().size());
  int q6 = 0, q4 = 0, biases = 0;
  for (const gguf::TensorInfo& e : exact->tensors()) {
    const gguf::TensorInfo& k = km->tensor(e.name);
    ASSERT_EQ(k.shape, e.shape) << e.name;
    if (e.shape.size() == 1) {  // norms and biases stay f32, bit for bit
      EXPECT_EQ(k.dtype, DType::F32) << e.name;
      EXPECT_EQ(std::memcmp(k.data, e.data, e.nbytes), 0) << e.name;
      biases += e.name.find(".bias") != std::string::npos;
      continue;
    }
    // Q6_K: the output head and the value and FFN-down matrices of layers 0, 3, 6 and 7 (of
    // 8: the first and last eighth, every third between); Q4_K: the rest and the embedding.
    const bool six = e.name == "output.weight" ||
                     ((e.name.find("attn_v") != std::string::npos ||
                       e.name.find("ffn_down") != std::string::npos) &&
                      (e.name.rfind("blk.0.", 0) == 0 || e.name.rfind("blk.3.", 0) == 0 ||
                       e.name.rfind("blk.6.", 0) == 0 || e.name.rfind("blk.7.", 0) == 0));
    ASSERT_EQ(k.dtype, six ? DType::Q6_K : DType::Q4_K) << e.name;
    (six ? q6 : q4) += 1;
    EXPECT_EQ(k.nbytes, e.elements() / 256 * (six ? 210 : 144)) << e.name;
    std::vector<float> got(e.elements());
    dequantize(k.dtype, k.data, got.data(), int64_t(got.size()));
    const float* want = reinterpret_cast<const float*>(e.data);
    float range = 0, err = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      range = std::max(range, std::abs(want[i]));
      err = std::max(err, std::abs(got[i] - want[i]));
    }
    // Uniform values over [-range, range]. Q4_K: half a step of about 2 range / 15, with room
    // for the 6-bit sub-block scales. Q6_K: a step of range / 32 (a group's longer side maps
    // to -32, the other ends at +31), a little more where the group's int8 scale stops at
    // +127 rather than -128 (range / 25.8 at worst).
    EXPECT_LE(err, range * (six ? 1.f / 25 : 1.2f / 15)) << e.name;
    EXPECT_GT(err, 0.f) << e.name;  // quantized, not copied
  }
  EXPECT_EQ(q6, 1 + 2 * 4);
  EXPECT_EQ(q4, 1 + 7 * 8 - 2 * 4);
  EXPECT_EQ(biases, 3 * 8);
  // It loads and runs as qwen2 with its biases.
  Model m = load_model(t.file("q4km.gguf"), std::nullopt);
  EXPECT_EQ(m.weights->cfg.arch, "qwen2");
  EXPECT_EQ(m.weights->layers[0].q.b.cols, 256);
  // The tiny shape's FFN rows (384) hold no whole Q4_K super-block: the writer says so.
  o.shape = "tiny";
  o.q4_k_m = false;
  EXPECT_NE(error_of([&] {
              write_synthetic_model(t.file("bad.gguf"), o);
            }).find("row of 384 elements is not a multiple of the Q4_K block size 256"),
            std::string::npos);
  o.shape = "tiny-k";
  o.keep = 0.5;
  EXPECT_NE(error_of([&] {
              write_synthetic_model(t.file("bad.gguf"), o);
            }).find("block formats are written for dense models"),
            std::string::npos);
}

// The default model's shape, as the GPU check's stand-in for it (skipped when not cached).
TEST(DefaultModel, SynthShapeIsTheDefaultModels) {
  if (!std::filesystem::exists(default_model_path())) GTEST_SKIP() << "default model not cached";
  Model real = load_model(default_model_path(), DType::BF16);
  const Config s = synth_config("smollm2-135m"), &r = real.weights->cfg;
  EXPECT_EQ(s.n_layers, r.n_layers);
  EXPECT_EQ(s.dim, r.dim);
  EXPECT_EQ(s.ffn_dim, r.ffn_dim);
  EXPECT_EQ(s.n_heads, r.n_heads);
  EXPECT_EQ(s.n_kv_heads, r.n_kv_heads);
  EXPECT_EQ(s.head_dim, r.head_dim);
  EXPECT_EQ(s.vocab, r.vocab);
  EXPECT_EQ(s.tied_output, r.tied_output);
  EXPECT_FLOAT_EQ(s.rope_theta, r.rope_theta);
}

TEST(CudaBackend, WithoutCudaOrAGpuTheErrorSaysSo) {
  Synth s(0.5);
  Model m = load_model(s.path, DType::BF16);
  bool ok = true;
  const std::string info = cuda_device_info(&ok);
  if (ok) GTEST_SKIP() << "a GPU is present: " << info;
  const std::string e = error_of([&] { make_session(m, ExecPath::Cuda, test::backend_options(64, 1)); });
#ifdef LOWRANK_HAVE_CUDA
  EXPECT_NE(e.find("the CUDA backend needs a GPU"), std::string::npos) << e;
#else
  EXPECT_NE(e.find("built without the CUDA backend (configure with -DLOWRANK_CUDA=ON"),
            std::string::npos)
      << e;
#endif
}

}  // namespace
}  // namespace lr
