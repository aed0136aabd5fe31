#include "backend/cuda/plan.h"

#include <algorithm>

#include "core/error.h"

namespace lr::cuda {

const char* buf_name(Buf b) {
  switch (b) {
    case Buf::None:
      return "-";
    case Buf::X:
      return "x";
    case Buf::H:
      return "h";
    case Buf::Y:
      return "y";
    case Buf::Q:
      return "q";
    case Buf::K:
      return "k";
    case Buf::V:
      return "v";
    case Buf::Att:
      return "att";
    case Buf::P:
      return "p";
    case Buf::G:
      return "g";
    case Buf::U:
      return "u";
    case Buf::Logits:
      return "logits";
  }
  return "?";
}

const char* op_name(Op o) {
  switch (o) {
    case Op::Embed:
      return "embed";
    case Op::RmsNorm:
      return "rms_norm";
    case Op::Gemv:
      return "gemv";
    case Op::Add:
      return "add";
    case Op::SiluMul:
      return "silu_mul";
    case Op::RopeAppend:
      return "rope_append";
    case Op::Rope:
      return "rope";
    case Op::Append:
      return "append";
    case Op::Scores:
      return "scores";
    case Op::Softmax:
      return "softmax";
    case Op::Mix:
      return "mix";
    case Op::Attend:
      return "attend";
    case Op::Merge:
      return "merge";
    case Op::LatentAppend:
      return "latent_append";
    case Op::Reconstruct:
      return "reconstruct";
  }
  return "?";
}

namespace {

// Builds the launches of one forward call, block by block.
class Planner {
 public:
  Planner(const Weights& w, const ExecOptions& e) : w_(w), e_(e), c_(w.cfg) {}

  Plan run() {
    for (int l = 0; l < c_.n_layers; ++l) {
      plan_.region_begin.push_back(plan_.launches.size());
      if (l == 0) add(Op::Embed, -1, "embed");
      layer(l);
    }
    plan_.region_begin.push_back(plan_.launches.size());
    output();
    return std::move(plan_);
  }

 private:
  Launch& add(Op op, int layer, std::string name) {
    Launch& L = plan_.launches.emplace_back();
    L.op = op;
    L.layer = layer;
    L.name = std::move(name);
    return L;
  }
  void gemv(int layer, std::string name, std::vector<Job> jobs) {
    add(Op::Gemv, layer, std::move(name)).jobs = std::move(jobs);
  }

  // The input of a block's first GEMVs: rms_norm(x) fused, or h from an RmsNorm launch.
  Job norm_input(int l, const Matrix& norm, const std::string& name) {
    Job in;
    if (e_.fused) {
      in.in = Buf::X;
      in.norm = &norm;
    } else {
      Launch& n = add(Op::RmsNorm, l, name);
      n.norm = &norm;
      n.a = Buf::X;
      n.b = Buf::H;
      n.width = c_.dim;
      in.in = Buf::H;
    }
    return in;
  }

  // y = W x for a group of linear maps reading the same input `in`: the input
  // side (V, or W for dense maps) of every map, then the output side U of the
  // low-rank ones. Packed: each side is one launch; else one launch per matrix.
  // Latents go to P from `p0` on. Returns the P offsets of the maps' latents.
  std::vector<int64_t> group(int l, const std::string& base, const std::vector<const Linear*>& maps,
                             const std::vector<std::string>& names, const Job& in,
                             const std::vector<Buf>& outs, int64_t p0,
                             const std::vector<bool>& reconstruct, bool accumulate = false) {
    std::vector<int64_t> off(maps.size(), -1);
    std::vector<Job> first, second;
    int64_t p = p0;
    for (size_t i = 0; i < maps.size(); ++i) {
      const Linear& m = *maps[i];
      Job j = in;
      if (m.low_rank()) {
        j.m = &m.v;
        j.out = Buf::P;
        j.out_off = off[i] = p;
        p += m.rank();
        if (reconstruct[i]) {
          Job u;
          u.m = &m.u;
          u.in = Buf::P;
          u.in_off = off[i];
          u.out = outs[i];
          u.accumulate = accumulate;
          second.push_back(u);
        }
      } else {
        j.m = &m.w;
        j.out = outs[i];
        j.accumulate = accumulate;
      }
      first.push_back(j);
    }
    plan_.p_width = std::max(plan_.p_width, p);
    auto emit = [&](std::vector<Job>& jobs, const char* suffix, bool lowrank_side) {
      if (jobs.empty()) return;
      if (e_.packed) {
        std::string n = base;
        if (n.empty())
          for (size_t i = 0; i < maps.size(); ++i) n += names[i];
        gemv(l, prefix(l) + n + suffix, jobs);
        return;
      }
      size_t k = 0;
      for (size_t i = 0; i < maps.size(); ++i) {
        if (lowrank_side && (!maps[i]->low_rank() || !reconstruct[i])) continue;
        const bool lr = maps[i]->low_rank();
        gemv(l, prefix(l) + names[i] + (lowrank_side ? "_out" : lr ? "_in" : ""), {jobs[k++]});
      }
    };
    const bool any_lowrank =
        std::any_of(maps.begin(), maps.end(), [](const Linear* m) { return m->low_rank(); });
    emit(first, any_lowrank ? "_in" : "", false);
    emit(second, "_out", true);
    return off;
  }

  static std::string prefix(int l) { return l < 0 ? "" : "blk." + std::to_string(l) + "."; }

  void layer(int l) {
    const Layer& L = w_.layers[size_t(l)];
    const std::string b = prefix(l);
    const bool legacy = e_.kv == KvMode::Legacy;
    if (legacy && (!L.k.low_rank() || !L.v.low_rank()))
      fail("legacy KV on the GPU caches the k and v latents: layer {} has a dense {} projection", l,
           L.k.low_rank() ? "v" : "k");
    // Attention: x += o(attend(rope(q), rope(k), v)).
    const Job x_in = norm_input(l, L.attn_norm, b + "attn_norm");
    const std::vector<int64_t> off = group(l, "qkv", {&L.q, &L.k, &L.v}, {"q", "k", "v"}, x_in,
                                           {Buf::Q, Buf::K, Buf::V}, 0, {true, !legacy, !legacy});
    int64_t p = L.q.rank() + L.k.rank() + L.v.rank();
    if (e_.kv == KvMode::Dense) {
      if (!e_.fused) add(Op::RopeAppend, l, b + "rope_append");  // fused: attend does it
    } else if (e_.kv == KvMode::Static) {
      Launch& r = add(Op::Rope, l, b + "rope");
      r.a = Buf::Q;
      r.b = Buf::K;
      add(Op::Append, l, b + "append");
    } else {
      Launch& a = add(Op::LatentAppend, l, b + "latent_append");
      a.k_off = off[1];
      a.v_off = off[2];
      a.k_rank = L.k.rank();
      a.v_rank = L.v.rank();
      plan_.k_latent = std::max(plan_.k_latent, a.k_rank);
      plan_.v_latent = std::max(plan_.v_latent, a.v_rank);
      Launch& rc = add(Op::Reconstruct, l, b + "reconstruct");
      rc.uk = &L.k.u;
      rc.uv = &L.v.u;
      rc.k_rank = L.k.rank();
      rc.v_rank = L.v.rank();
      Launch& r = add(Op::Rope, l, b + "rope_q");
      r.a = Buf::Q;
    }
    if (e_.kv == KvMode::Static) {
      add(Op::Scores, l, b + "scores");
      add(Op::Softmax, l, b + "softmax");
      add(Op::Mix, l, b + "mix");
    } else {
      add(Op::Attend, l, b + "attend").rope_append = e_.fused && e_.kv == KvMode::Dense;
      if (!e_.fused) add(Op::Merge, l, b + "merge");  // fused: the o GEMV merges as it stages
    }
    Job att;
    att.in = Buf::Att;
    att.merge_in = e_.fused && e_.kv != KvMode::Static;
    const Buf o_out = e_.fused ? Buf::X : Buf::Y;
    group(l, "", {&L.o}, {"o"}, att, {o_out}, p, {true}, e_.fused);
    p += L.o.rank();
    residual(l, b + "attn_residual");
    // MLP: x += down(silu(gate(h)) * up(h)).
    const Job h_in = norm_input(l, L.ffn_norm, b + "ffn_norm");
    group(l, "gate_up", {&L.gate, &L.up}, {"gate", "up"}, h_in, {Buf::G, Buf::U}, p, {true, true});
    p += L.gate.rank() + L.up.rank();
    Job g_in;
    g_in.in = Buf::G;
    if (e_.fused) {
      g_in.in2 = Buf::U;
    } else {
      Launch& s = add(Op::SiluMul, l, b + "silu_mul");
      s.width = c_.ffn_dim;
    }
    group(l, "", {&L.down}, {"down"}, g_in, {o_out}, p, {true}, e_.fused);
    residual(l, b + "ffn_residual");
  }

  void residual(int l, const std::string& name) {
    if (e_.fused) return;
    Launch& a = add(Op::Add, l, name);
    a.a = Buf::Y;
    a.width = c_.dim;
  }

  void output() {
    const Job in = norm_input(-1, w_.out_norm, "output_norm");
    group(-1, "output", {&w_.output}, {"output"}, in, {Buf::Logits}, 0, {true});
  }

  const Weights& w_;
  const ExecOptions& e_;
  const Config& c_;
  Plan plan_;
};

}  // namespace

Plan plan_forward(const Weights& w, const ExecOptions& e) {
  if (w.cfg.head_dim != 64 && w.cfg.head_dim != 128)
    fail("the CUDA backend runs head_dim 64 or 128 (the model has {})", w.cfg.head_dim);
  if (w.cfg.n_heads / w.cfg.n_kv_heads > 8)
    fail("the CUDA backend runs up to 8 query heads per KV head (the model has {})",
         w.cfg.n_heads / w.cfg.n_kv_heads);
  return Planner(w, e).run();
}

ExecOptions prefill_options(const ExecOptions& e) {
  ExecOptions p = e;
  p.fused = false;
  p.packed = true;
  p.unit = ExecUnit::PerOp;
  if (p.kv == KvMode::Static) p.kv = KvMode::Dense;
  return p;
}

LaunchStats launch_stats(const Plan& p, ExecUnit unit) {
  LaunchStats s;
  s.kernels = int64_t(p.launches.size());
  s.memcpys = 2;  // token and position in, logits out
  switch (unit) {
    case ExecUnit::PerOp:
      s.host_launches = s.kernels + s.memcpys;
      break;
    case ExecUnit::PerLayer:
      for (size_t r = 0; r < p.region_begin.size(); ++r) {
        const size_t end =
            r + 1 < p.region_begin.size() ? p.region_begin[r + 1] : p.launches.size();
        int64_t nodes = int64_t(end - p.region_begin[r]);
        if (r == 0) ++nodes;                          // the copy of token and position
        if (r + 1 == p.region_begin.size()) ++nodes;  // the copy of the logits
        s.nodes_per_graph.push_back(nodes);
      }
      s.graphs = int64_t(s.nodes_per_graph.size());
      s.host_launches = s.graphs;
      break;
    case ExecUnit::PerToken:
      s.graphs = 1;
      s.nodes_per_graph = {s.kernels + s.memcpys};
      s.host_launches = 1;
      break;
  }
  return s;
}

WeightLayout plan_weights(const Weights& w) {
  std::vector<const Matrix*> ms = {&w.tok_embd};
  auto add = [&](const Linear& l) {
    for (const Matrix* m : {&l.w, &l.v, &l.u})
      if (m->rows > 0) ms.push_back(m);
  };
  add(w.output);
  for (const Layer& L : w.layers)
    for (const Linear* l : {&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down}) add(*l);
  for (const Matrix* m : ms)
    if (m->dtype != DType::F32 && m->dtype != DType::F16 && m->dtype != DType::BF16)
      fail("the CUDA backend reads F32, F16 or BF16 weights, not {} (load the model as bf16)",
           dtype_name(m->dtype));
  std::sort(ms.begin(), ms.end(),
            [](const Matrix* a, const Matrix* b) { return a->ptr() < b->ptr(); });
  WeightLayout lay;
  for (const Matrix* m : ms) {
    const uint8_t* end = m->ptr() + m->data_bytes();
    if (!lay.ranges.empty() && m->ptr() < lay.ranges.back().end) {  // overlaps: the same allocation
      WeightLayout::Range& r = lay.ranges.back();
      LR_ASSERT(r.cols == m->cols && r.dtype == m->dtype);
      r.end = std::max(r.end, end);
      continue;
    }
    lay.ranges.push_back({m->ptr(), end, m->cols, m->dtype, 0});
  }
  for (WeightLayout::Range& r : lay.ranges) {
    r.offset = lay.elements;
    lay.elements += uint64_t(r.rows()) * uint64_t(padded_cols(r.cols));
  }
  return lay;
}

uint64_t WeightLayout::offset_of(const Matrix& m) const {
  auto it = std::upper_bound(ranges.begin(), ranges.end(), m.ptr(),
                             [](const uint8_t* p, const Range& r) { return p < r.begin; });
  LR_ASSERT(it != ranges.begin());
  const Range& r = *(it - 1);
  LR_ASSERT(m.ptr() >= r.begin && m.ptr() + m.data_bytes() <= r.end && m.cols == r.cols);
  const uint64_t row_bytes = uint64_t(r.cols) * m.elem_bytes();
  LR_ASSERT(uint64_t(m.ptr() - r.begin) % row_bytes == 0);
  return r.offset + uint64_t(m.ptr() - r.begin) / row_bytes * uint64_t(padded_cols(r.cols));
}

MemoryPlan plan_memory(const Weights& w, const Plan& p, const ExecOptions& e, int ctx,
                       int max_tokens) {
  const Config& c = w.cfg;
  MemoryPlan m;
  m.weights = plan_weights(w).elements * 2;
  m.weights += uint64_t(c.dim) * 4 * uint64_t(2 * c.n_layers + 1);  // norms
  const uint64_t L = uint64_t(c.n_layers), T = uint64_t(ctx), kv = uint64_t(c.kv_dim());
  if (e.kv == KvMode::Legacy)
    m.kv = L * T * uint64_t(p.k_latent + p.v_latent) * 2 + 2 * T * kv * 4;
  else
    m.kv = 2 * L * T * kv * 2;
  const uint64_t n = uint64_t(max_tokens);
  const uint64_t per_token = 3 * uint64_t(c.dim) + 2 * uint64_t(c.q_dim()) + 2 * kv +
                             uint64_t(p.p_width) + 2 * uint64_t(c.ffn_dim) + uint64_t(c.vocab);
  m.scratch = n * per_token * 4 + n * 4 * 2;  // + token ids and positions
  if (e.kv == KvMode::Static) m.scratch += uint64_t(c.n_heads) * T * 4;
  m.partials =
      n * uint64_t(c.n_heads) * uint64_t(attend_chunks(ctx)) * uint64_t(c.head_dim + 2) * 4;
  int64_t cols = c.ffn_dim;  // the widest product input, rows padded as the weights'
  for (const Launch& l : p.launches)
    for (const Job& j : l.jobs) cols = std::max(cols, j.m->cols);
  m.prefill_inputs = 2 * n * uint64_t(padded_cols(cols)) * 2;
  return m;
}

}  // namespace lr::cuda
