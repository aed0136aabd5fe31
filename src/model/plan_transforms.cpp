#include "model/plan_transforms.h"

#include <algorithm>
#include <utility>

#include "core/error.h"

namespace lr {

namespace {

Step make(Op op, int layer, const char* name) {
  Step s;
  s.op = op;
  s.layer = layer;
  s.name = step_name(layer, name);
  return s;
}

// Rewrites every step through f(step, out) (which appends zero or more
// steps), keeping each layer's region at the steps it became.
template <class F>
Plan rewrite(Plan p, F f) {
  std::vector<Step> out;
  std::vector<size_t> begin;
  size_t r = 0;
  for (size_t i = 0; i < p.steps.size(); ++i) {
    for (; r < p.region_begin.size() && p.region_begin[r] == i; ++r) begin.push_back(out.size());
    f(std::move(p.steps[i]), out);
  }
  for (; r < p.region_begin.size(); ++r) begin.push_back(out.size());
  p.steps = std::move(out);
  p.region_begin = std::move(begin);
  return p;
}

void require_unfused_dense(const Plan& p, const char* what) {
  LR_ASSERT(!p.fused && p.kv == KvMode::Dense);
  if (p.streamed_keys)
    fail("{} keeps its own cache; a compressed key cache (--cache-type-k) runs with --kv dense",
         what);
}

}  // namespace

Plan fuse(Plan p) {
  LR_ASSERT(!p.fused);
  p.fused = true;
  const Target target = p.target;
  const Matrix* norm = nullptr;  // an RmsNorm x -> h waiting for the products that read h
  bool normed = false;           // (without a norm: h = x, the products read x)
  bool merge = false;            // a Merge waiting for the product that reads att
  bool silu_in = false;          // GPU: a SiLU*mul waiting for the product that reads g
  Activation act = Activation::Silu;  // its activation
  bool rope_append = false;      // GPU: a RopeAppend waiting for attention
  Plan q = rewrite(std::move(p), [&](Step s, std::vector<Step>& out) {
    switch (s.op) {
      case Op::RmsNorm:
        if (s.a != Buf::X) break;  // a block output's norm (post_norms) stays a step
        LR_ASSERT(s.b == Buf::H);
        norm = s.norm;
        normed = true;
        return;
      case Op::Merge:
        merge = true;
        return;
      case Op::RopeAppend:
        if (target == Target::Cpu) break;
        rope_append = true;
        return;
      case Op::SiluMul:
        if (target == Target::Gpu) {
          silu_in = true;
          act = s.act;
          return;
        }
        LR_ASSERT(!out.empty() && out.back().op == Op::Linear);
        out.back().silu_mul = true;  // the gate/up product finishes its rows
        out.back().act = s.act;
        return;
      case Op::Add: {  // the product before it accumulates into x
        LR_ASSERT(s.a == Buf::Y && !out.empty());
        // y was normalized first (post_norms), or is scaled (Granite): the Add stays
        if (out.back().op != Op::Linear || s.scale != 1.f) break;
        const bool summed = std::any_of(out.back().jobs.begin(), out.back().jobs.end(),
                                        [](const Job& j) { return j.sum; });
        // A residual form's y = Q(W) h + U (V h) is summed over two steps:
        // then the first accumulates Q(W) h into x and the second adds onto x.
        LR_ASSERT(!summed || (out.size() >= 2 && out[out.size() - 2].op == Op::Linear));
        for (Job& j : out[out.size() - (summed ? 2 : 1)].jobs)
          if (j.out == Buf::Y) {
            j.out = Buf::X;
            j.accumulate = true;
          }
        for (Job& j : out.back().jobs)
          if (summed && j.out == Buf::Y) j.out = Buf::X;
        return;
      }
      case Op::Attend:
        s.rope_append = std::exchange(rope_append, false);
        break;
      case Op::Linear: {
        bool merged = false, silu = false;
        for (Job& j : s.jobs) {
          if (normed && j.in == Buf::H) {
            j.in = Buf::X;
            j.norm = norm;
          }
          if (merge && j.in == Buf::Att) merged = j.merge_in = true;
          if (silu_in && j.in == Buf::G) {
            j.in2 = Buf::U;
            j.act = act;
            silu = true;
          }
        }
        merge = merge && !merged;
        silu_in = silu_in && !silu;
        break;
      }
      default:
        break;
    }
    // What a fused plan folds is not observable: its activations are never written whole.
    s.observe &= uint8_t(site_bit(Site::Keys) | site_bit(Site::Queries));
    out.push_back(std::move(s));
  });
  LR_ASSERT(!merge && !silu_in && !rope_append);
  return q;
}

Plan unpack(Plan p) {
  p.packed = false;
  return rewrite(std::move(p), [](Step s, std::vector<Step>& out) {
    if (s.op != Op::Linear) return out.push_back(std::move(s));
    for (size_t i = 0; i < s.jobs.size(); ++i) {
      const Job& j = s.jobs[i];
      Step one = make(Op::Linear, s.layer, j.map);
      one.name += j.side == Side::In ? "_in" : j.side == Side::Out ? "_out" : "";
      one.jobs = {j};
      one.observe = observed_by(j);
      one.silu_mul = s.silu_mul && i + 1 == s.jobs.size();
      out.push_back(std::move(one));
    }
  });
}

Plan static_kv(Plan p) {
  require_unfused_dense(p, "--kv static");
  p.kv = KvMode::Static;
  return rewrite(std::move(p), [](Step s, std::vector<Step>& out) {
    switch (s.op) {
      case Op::Linear: {
        std::vector<Step> norms;  // q/k norms the products did before RoPE, now steps of their own
        for (Job& j : s.jobs) {
          if (j.head_norm) {
            Step& n = norms.emplace_back(
                make(Op::HeadNorm, s.layer, j.out == Buf::Q ? "q_norm" : "k_norm"));
            n.norm = j.head_norm;
            n.a = j.out;
            n.width = j.head_norm->cols;
          }
          j.rope = j.append = false;
          j.head_norm = nullptr;
        }
        s.observe &= uint8_t(~(site_bit(Site::Keys) | site_bit(Site::Queries)));
        out.push_back(std::move(s));
        for (Step& n : norms) out.push_back(std::move(n));
        return;
      }
      case Op::RopeAppend:
      case Op::Merge:
        return;
      case Op::Attend: {
        Step r = make(Op::Rope, s.layer, "rope");
        r.a = Buf::Q;
        r.b = Buf::K;
        r.rope_set = s.rope_set;
        r.observe = site_bit(Site::Keys) | site_bit(Site::Queries);
        out.push_back(std::move(r));
        out.push_back(make(Op::Append, s.layer, "append"));
        Step sc = make(Op::Scores, s.layer, "scores");
        sc.scale = s.scale;
        sc.window = s.window;
        out.push_back(std::move(sc));
        out.push_back(make(Op::Softmax, s.layer, "softmax"));
        Step m = make(Op::Mix, s.layer, "mix");
        m.observe = site_bit(Site::AttnOut);
        return out.push_back(std::move(m));
      }
      default:
        return out.push_back(std::move(s));
    }
  });
}

Plan latent_kv(Plan p) {
  require_unfused_dense(p, "--kv legacy");
  p.kv = KvMode::Legacy;
  for (const Step& s : p.steps)
    if (s.op == Op::HeadNorm ||
        std::any_of(s.jobs.begin(), s.jobs.end(), [](const Job& j) { return j.head_norm; }))
      fail(
          "--kv legacy rebuilds roped keys from their latents, but this model normalizes each key "
          "head before RoPE (q/k norms); use --kv dense");
  const Target target = p.target;
  Step::Latent lat;  // of the layer being rewritten
  int64_t k_latent = 0, v_latent = 0;
  Plan q = rewrite(std::move(p), [&](Step s, std::vector<Step>& out) {
    switch (s.op) {
      case Op::Linear: {
        std::vector<Job> keep;
        for (const Job& j : s.jobs) {
          const bool kv = j.out == Buf::K || j.out == Buf::V || j.map == std::string("k") ||
                          j.map == std::string("v");
          if (!kv || j.side == Side::In) {
            if (kv) (j.map == std::string("k") ? lat.k_off : lat.v_off) = j.out_off;
            if (kv) (j.map == std::string("k") ? lat.k_rank : lat.v_rank) = j.m->rows;
            keep.push_back(j);
            continue;
          }
          if (j.side == Side::Whole)
            fail(
                "--kv legacy caches the low-rank latents of k and v, but layer {} has a dense {} "
                "projection (use a compressed model, or --kv dense)",
                s.layer, j.map);
          if (j.bias)
            fail(
                "--kv legacy rebuilds k and v from their latents without a bias, but layer {}'s {} "
                "projection has one (use --kv dense)",
                s.layer, j.map);
          if (j.pivots)
            fail(
                "--kv legacy rebuilds k and v with their full output factors, but layer {}'s {} "
                "projection is stored pivoted (use --kv dense)",
                s.layer, j.map);
          (j.map == std::string("k") ? lat.uk : lat.uv) = j.m;  // the output side is dropped
        }
        if (keep.empty()) return;
        s.jobs = std::move(keep);
        s.observe &= uint8_t(~site_bit(Site::Keys));
        return out.push_back(std::move(s));
      }
      case Op::RopeAppend:
      case Op::Attend: {
        if (s.op == Op::Attend && target == Target::Gpu) return out.push_back(std::move(s));
        k_latent = std::max(k_latent, lat.k_rank);
        v_latent = std::max(v_latent, lat.v_rank);
        if (target ==
            Target::Cpu) {  // one step: the latents join the cache, the history is rebuilt
          Step r = make(Op::Reconstruct, s.layer, "kv_rebuild");
          r.latent = lat;
          r.latent.append = true;
          out.push_back(std::move(r));
          return out.push_back(std::move(s));
        }
        Step a = make(Op::LatentAppend, s.layer, "latent_append");
        a.latent = lat;
        a.latent.uk = a.latent.uv = nullptr;
        out.push_back(std::move(a));
        Step r = make(Op::Reconstruct, s.layer, "reconstruct");
        r.latent = lat;
        r.latent.k_off = r.latent.v_off = 0;
        out.push_back(std::move(r));
        Step rq = make(Op::Rope, s.layer, "rope_q");
        rq.a = Buf::Q;
        rq.observe = site_bit(Site::Queries);
        return out.push_back(std::move(rq));
      }
      default:
        return out.push_back(std::move(s));
    }
  });
  q.k_latent = k_latent;
  q.v_latent = v_latent;
  return q;
}

Plan with_unit(Plan p, ExecUnit u) {
  p.unit = u;
  return p;
}

Plan derive(const Weights& w, const PlanOptions& o, const ExecOptions& e) {
  Plan p = plan_forward(w, o);
  if (e.kv == KvMode::Static) p = static_kv(std::move(p));
  if (e.kv == KvMode::Legacy) p = latent_kv(std::move(p));
  if (!e.packed) p = unpack(std::move(p));
  if (e.fused) p = fuse(std::move(p));
  return with_unit(std::move(p), e.unit);
}

ExecOptions prefill_options(const ExecOptions& e) {
  ExecOptions p = e;
  p.fused = false;
  p.packed = true;
  p.unit = ExecUnit::PerOp;
  if (p.kv == KvMode::Static) p.kv = KvMode::Dense;
  return p;
}

}  // namespace lr
