// The model's plan (model/plan.h) and the rungs derived from it
// (model/plan_transforms.h), checked without running a kernel: the steps of
// a block as the planner writes them, what fuse() folds where on each
// target, the transforms' step lists, and every rung of both targets
// executed by the scalar plan executor against the independent reference
// forward pass.
#include <gtest/gtest.h>

#include "../error_of.h"
#include "backend/backend.h"
#include "backend/ref/ref.h"
#include "compress/synth_model.h"
#include "model/plan_transforms.h"
#include "model_test_util.h"
#include "runtime/model.h"

namespace lr {
namespace {

using test::Synth;

std::vector<std::string> names(const Plan& p, int layer) {
  std::vector<std::string> out;
  for (const Step& s : p.steps)
    if (s.layer == layer) out.push_back(s.name.substr(s.name.rfind('.') + 1));
  return out;
}

const Step& step(const Plan& p, const std::string& name) {
  for (const Step& s : p.steps)
    if (s.name == name) return s;
  throw std::runtime_error("no step " + name);
}

ExecOptions rung(KvMode kv, bool packed, bool fused) {
  ExecOptions e;
  e.kv = kv;
  e.packed = packed;
  e.fused = fused;
  return e;
}

TEST(Plan, TheModelsPlanReadsLikeItsBlocks) {
  Synth s(0.5);
  Model m = load_model(s.path, DType::F32);
  const Weights& w = *m.weights;
  const Layer& L = w.layers[0];
  const Plan cpu = plan_forward(w, {Target::Cpu});
  // x += o(attend(rope(q(h)), rope(k(h)), v(h))); x += down(silu(gate(h)) * up(h))
  EXPECT_EQ(names(cpu, 0), (std::vector<std::string>{
                               "attn_norm", "qkv_in", "qkv_out", "attend", "merge", "o_in", "o_out",
                               "attn_residual", "ffn_norm", "gate_up_in", "gate_up_out", "silu_mul",
                               "down_in", "down_out", "ffn_residual"}));
  EXPECT_EQ(names(cpu, -1), (std::vector<std::string>{"embed", "output_norm", "output"}));
  EXPECT_FALSE(cpu.fused);
  // The q/k/v input side is one product over the packed [Vq; Vk; Vv]; latents go to P in order.
  const Step& qkv_in = step(cpu, "blk.0.qkv_in");
  EXPECT_EQ(qkv_in.stacked, &L.qkv_in);
  ASSERT_EQ(qkv_in.jobs.size(), 3u);
  EXPECT_EQ(qkv_in.jobs[1].m, &L.k.v);
  EXPECT_EQ(qkv_in.jobs[1].out, Buf::P);
  EXPECT_EQ(qkv_in.jobs[1].out_off, L.q.rank());
  EXPECT_EQ(qkv_in.jobs[2].out_off, L.q.rank() + L.k.rank());
  EXPECT_EQ(cpu.p_width, L.q.rank() + L.k.rank() + L.v.rank() + L.o.rank() + L.gate.rank() +
                             L.up.rank() + L.down.rank());
  // CPU: the output-side product ropes q and k heads and appends k and v to the cache.
  const Step& qkv_out = step(cpu, "blk.0.qkv_out");
  ASSERT_EQ(qkv_out.jobs.size(), 3u);
  EXPECT_TRUE(qkv_out.jobs[0].rope && !qkv_out.jobs[0].append);
  EXPECT_TRUE(qkv_out.jobs[1].rope && qkv_out.jobs[1].append);
  EXPECT_TRUE(!qkv_out.jobs[2].rope && qkv_out.jobs[2].append);
  EXPECT_TRUE(qkv_out.observes(Site::Keys) && qkv_out.observes(Site::Queries));
  EXPECT_TRUE(step(cpu, "blk.0.attn_norm").observes(Site::AttnIn));
  EXPECT_TRUE(step(cpu, "blk.0.merge").observes(Site::AttnOut));
  EXPECT_TRUE(step(cpu, "blk.0.silu_mul").observes(Site::MlpMid));
  // GPU: RoPE and the append are a step of their own.
  const Plan gpu = plan_forward(w, {Target::Gpu});
  auto g0 = names(gpu, 0);
  EXPECT_EQ(std::vector<std::string>(g0.begin(), g0.begin() + 5),
            (std::vector<std::string>{"attn_norm", "qkv_in", "qkv_out", "rope_append", "attend"}));
  for (const Job& j : step(gpu, "blk.0.qkv_out").jobs) EXPECT_FALSE(j.rope || j.append);
  // A compressed key cache: the products rope, an Append step encodes.
  const Plan streamed = plan_forward(w, {Target::Cpu, true});
  EXPECT_EQ(names(streamed, 0)[3], "append");
  EXPECT_FALSE(step(streamed, "blk.0.qkv_out").jobs[1].append);
}

TEST(Plan, FuseFoldsWhereEachTargetFinishesItsRows) {
  Synth s(0.5);
  Model m = load_model(s.path, DType::F32);
  const Weights& w = *m.weights;
  const Plan cpu = fuse(plan_forward(w, {Target::Cpu}));
  EXPECT_EQ(names(cpu, 0),
            (std::vector<std::string>{"qkv_in", "qkv_out", "attend", "o_in", "o_out", "gate_up_in",
                                      "gate_up_out", "down_in", "down_out"}));
  EXPECT_EQ(cpu.steps.size(), 1 + 2u * 9 + 1);  // embed, two layers, the output head
  EXPECT_EQ(step(cpu, "blk.0.qkv_in").jobs[0].norm, &w.layers[0].attn_norm);
  EXPECT_EQ(step(cpu, "blk.0.qkv_in").jobs[0].in, Buf::X);
  EXPECT_TRUE(step(cpu, "blk.0.o_in").jobs[0].merge_in);
  EXPECT_TRUE(step(cpu, "blk.0.o_out").jobs[0].accumulate);
  EXPECT_EQ(step(cpu, "blk.0.o_out").jobs[0].out, Buf::X);
  EXPECT_TRUE(step(cpu, "blk.0.gate_up_out").silu_mul);  // CPU: SiLU*mul on the rows just computed
  EXPECT_EQ(step(cpu, "blk.0.down_in").jobs[0].in2, Buf::None);
  EXPECT_EQ(step(cpu, "output").jobs[0].norm, &w.out_norm);
  EXPECT_EQ(cpu.region_begin, (std::vector<size_t>{0, 10, 19}));
  const Plan gpu = fuse(plan_forward(w, {Target::Gpu}));
  EXPECT_TRUE(step(gpu, "blk.0.attend").rope_append);  // GPU: attention ropes and appends
  EXPECT_FALSE(step(gpu, "blk.0.gate_up_out").silu_mul);
  EXPECT_EQ(step(gpu, "blk.0.down_in").jobs[0].in2, Buf::U);  // GPU: SiLU*mul in down's input
  EXPECT_EQ(gpu.steps.size(), cpu.steps.size());
}

// The rungs of the bench, per layer, on the CPU (the counts the thread pool
// sees in tests/model/test_decode.cpp).
TEST(Plan, TheTransformsGiveTheRungs) {
  Synth s(0.5);
  Model m = load_model(s.path, DType::F32);
  const Weights& w = *m.weights;
  const Plan naive = derive(w, {Target::Cpu}, rung(KvMode::Static, false, false));
  EXPECT_EQ(names(naive, 1),
            (std::vector<std::string>{
                "attn_norm", "q_in",   "k_in",          "v_in",     "q_out",    "k_out",
                "v_out",     "rope",   "append",        "scores",   "softmax",  "mix",
                "o_in",      "o_out",  "attn_residual", "ffn_norm", "gate_in",  "up_in",
                "gate_out",  "up_out", "silu_mul",      "down_in",  "down_out", "ffn_residual"}));
  for (const Step& st : naive.steps)
    for (const Job& j : st.jobs) EXPECT_FALSE(j.rope || j.append) << st.name;
  const Plan legacy = derive(w, {Target::Cpu}, rung(KvMode::Legacy, false, false));
  auto l0 = names(legacy, 0);
  EXPECT_EQ(std::vector<std::string>(l0.begin(), l0.begin() + 8),
            (std::vector<std::string>{"attn_norm", "q_in", "k_in", "v_in", "q_out", "kv_rebuild",
                                      "attend", "merge"}));
  const Step& rebuild = step(legacy, "blk.0.kv_rebuild");
  EXPECT_TRUE(rebuild.latent.append);
  EXPECT_EQ(rebuild.latent.k_off, w.layers[0].q.rank());
  EXPECT_EQ(rebuild.latent.uk, &w.layers[0].k.u);
  EXPECT_EQ(legacy.k_latent, w.layers[0].k.rank());
  EXPECT_EQ(l0.size(), 20u);
  EXPECT_EQ(derive(w, {Target::Cpu}, rung(KvMode::Dense, false, false)).steps.size(),
            1 + 2u * 21 + 2);
  EXPECT_EQ(derive(w, {Target::Cpu}, rung(KvMode::Dense, true, false)).steps.size(),
            1 + 2u * 15 + 2);
  // Unpacking names each product after its map and drops the stacked product.
  const Plan unpacked = derive(w, {Target::Cpu}, rung(KvMode::Dense, false, true));
  EXPECT_EQ(step(unpacked, "blk.0.q_in").stacked, nullptr);
  EXPECT_TRUE(step(unpacked, "blk.0.up_out").silu_mul);
  EXPECT_FALSE(step(unpacked, "blk.0.gate_out").silu_mul);
  // Prefill: the unfused, packed plan, one dispatch per step, dense KV for a static rung.
  const ExecOptions pre = prefill_options(rung(KvMode::Static, false, true));
  EXPECT_EQ(pre.kv, KvMode::Dense);
  EXPECT_TRUE(pre.packed && !pre.fused);
  EXPECT_EQ(pre.unit, ExecUnit::PerOp);
}

TEST(Plan, LatentKvNeedsLowRankKeysAndValues) {
  Synth s(1.0);
  Model m = load_model(s.path, DType::F32);
  EXPECT_NE(
      test::error_of([&] { derive(*m.weights, {Target::Cpu}, rung(KvMode::Legacy, true, true)); })
          .find("--kv legacy caches the low-rank latents of k and v, but layer 0 has a dense k "
                "projection"),
      std::string::npos);
}

// Every rung's plan on each target, executed step by step in scalar loops,
// against the reference forward pass: prompt logits, a prompt over a cache,
// and decode steps.
TEST(Plan, EveryRungOfEveryTargetMatchesTheReference) {
  for (double keep : {1.0, 0.5}) {
    Synth s(keep);
    Model m = load_model(s.path, DType::F32);
    const int V = m.weights->cfg.vocab;
    for (Target target : {Target::Cpu, Target::Gpu})
      for (KvMode kv : {KvMode::Static, KvMode::Dense, KvMode::Legacy})
        for (bool packed : {false, true})
          for (bool fused : {false, true}) {
            if (keep == 1.0 && kv == KvMode::Legacy) continue;
            SCOPED_TRACE(fmt::format("keep {} target {} kv {} packed {} fused {}", keep,
                                     int(target), int(kv), packed, fused));
            BackendOptions o;
            o.ctx = 64;
            o.exec = rung(kv, packed, fused);
            auto ref = make_reference_backend(m.weights, o);
            auto plan = make_scalar_plan_backend(m.weights, o, target);
            std::vector<int32_t> toks;
            for (int i = 0; i < 13; ++i) toks.push_back(3 + (i * 37) % (V - 3));
            std::vector<float> a(toks.size() * size_t(V)), b(a.size());
            ref->forward(toks.data(), 9, a.data(), true);
            plan->forward(toks.data(), 9, b.data(), true);
            ref->forward(toks.data() + 9, 4, a.data() + 9 * size_t(V), true);
            plan->forward(toks.data() + 9, 4, b.data() + 9 * size_t(V), true);
            EXPECT_LT(test::rel_err(b, a), 1e-4) << "prefill";
            std::vector<float> la(static_cast<size_t>(V)), lb(static_cast<size_t>(V));
            for (int st = 0; st < 4; ++st) {
              const int32_t next = toks[size_t(st)];
              ref->forward(&next, 1, la.data(), false);
              plan->forward(&next, 1, lb.data(), false);
              EXPECT_LT(test::rel_err(lb, la), 1e-4) << "decode step " << st;
            }
          }
  }
}

}  // namespace
}  // namespace lr
