#include "model/plan.h"

#include <algorithm>
#include <optional>

#include "core/error.h"
#include "model/pack.h"

namespace lr {

const char* buf_name(Buf b) {
  static const char* names[] = {"-", "x", "h", "y", "q", "k", "v", "att", "p", "g", "u", "logits"};
  return names[size_t(b)];
}

const char* op_name(Op o) {
  static const char* names[] = {"embed",   "rms_norm",  "linear",        "rope_append",
                                "attend",  "merge",     "add",           "silu_mul",
                                "append",  "head_norm", "rope",          "scores",
                                "softmax", "mix",       "latent_append", "reconstruct"};
  return names[size_t(o)];
}

Buf site_buffer(Site s) {
  switch (s) {
    case Site::AttnIn:
    case Site::MlpIn:
      return Buf::H;
    case Site::AttnOut:
      return Buf::Att;
    case Site::MlpMid:
      return Buf::G;
    case Site::Keys:
      return Buf::K;
    case Site::Queries:
      return Buf::Q;
  }
  return Buf::None;
}

int64_t Plan::width(Buf b, const Config& c) const {
  switch (b) {
    case Buf::X:
    case Buf::H:
    case Buf::Y:
      return c.dim;
    case Buf::Q:
    case Buf::Att:
      return c.q_dim();
    case Buf::K:
    case Buf::V:
      return c.kv_dim();
    case Buf::P:
      return p_width;
    case Buf::G:
    case Buf::U:
      return c.ffn_dim;
    case Buf::Logits:
      return c.vocab;
    case Buf::None:
      return 0;
  }
  return 0;
}

std::string step_name(int layer, const std::string& name) {
  return layer < 0 ? name : "blk." + std::to_string(layer) + "." + name;
}

uint8_t observed_by(const Job& j) {
  return j.rope ? site_bit(j.out == Buf::Q ? Site::Queries : Site::Keys) : 0;
}

namespace {

// One linear map of a projection group: the map, its name, where its output goes.
struct Map {
  const Linear* lin;
  const char* name;
  Buf out;
  bool rope = false, append = false;  // CPU: head rows roped / appended by the product
  const Matrix* head_norm = nullptr;  // CPU: and normalized first (q/k norms)
  uint8_t rope_set = 0;
};

// Writes the model's plan, block by block.
class Planner {
 public:
  Planner(const Weights& w, const PlanOptions& o) : w_(w), o_(o), c_(w.cfg) {
    plan_.target = o.target;
    plan_.streamed_keys = o.streamed_keys;
  }

  Plan run() {
    for (int l = 0; l < c_.n_layers; ++l) {
      plan_.region_begin.push_back(plan_.steps.size());
      if (l == 0) add(Op::Embed, -1, "embed").scale = c_.embed_scale;
      p_ = 0;
      attention(l);
      mlp(l);
    }
    plan_.region_begin.push_back(plan_.steps.size());
    output_head();
    return std::move(plan_);
  }

 private:
  // x += o(attend(rope(q(h)), rope(k(h)), v(h))),  h = rms_norm(x)
  void attention(int l) {
    const Layer& L = w_.layers[size_t(l)];
    rms_norm(l, "attn_norm", c_.pre_norms ? &L.attn_norm : nullptr, Site::AttnIn);
    const bool cpu = o_.target == Target::Cpu, cache = cpu && !o_.streamed_keys;
    // q, k = rms_norm of each head (Qwen3), or of the whole of q and of k (OLMo 2), before RoPE
    const Matrix* qn = c_.qk_norm ? &L.q_norm : nullptr;
    const Matrix* kn = c_.qk_norm ? &L.k_norm : nullptr;
    // A windowed layer (Gemma 3) attends to its last positions, with RoPE of its own base.
    // (A layer without RoPE, SmolLM3: its products rope nothing; elsewhere set 2 turns by 0.)
    const uint8_t rope_set = c_.rope_set(l);
    // CPU: the thread that computes a head normalizes, ropes and appends it,
    // unless the norm spans every head (then steps of their own do, after the product).
    const bool by_head = cpu && !c_.qk_norm_full;
    const bool rope = by_head && rope_set != 2;
    project(l, "qkv",
            {{&L.q, "q", Buf::Q, rope, false, by_head ? qn : nullptr, rope_set},
             {&L.k, "k", Buf::K, rope, by_head && cache, by_head ? kn : nullptr, rope_set},
             {&L.v, "v", Buf::V, false, by_head && cache}},
            Buf::H, &L.qkv_in);
    if (!by_head && qn) {
      head_norm(l, "q_norm", *qn, Buf::Q);
      head_norm(l, "k_norm", *kn, Buf::K);
    }
    if (!by_head && (!cpu || cache)) {
      Step& r = add(Op::RopeAppend, l, "rope_append");
      r.observe = site_bit(Site::Keys) | site_bit(Site::Queries);
      r.rope_set = rope_set;
    } else if (!by_head) {  // a compressed key cache: roped here, appended by the Append step
      Step& r = add(Op::Rope, l, "rope");
      r.a = Buf::Q;
      r.b = Buf::K;
      r.observe = site_bit(Site::Keys) | site_bit(Site::Queries);
      r.rope_set = rope_set;
    }
    if (o_.streamed_keys) add(Op::Append, l, "append");
    Step& a = add(Op::Attend, l, "attend");
    a.scale = c_.attention_scale();
    a.window = c_.windowed(l) ? c_.swa_window : 0;
    a.rope_set = rope_set;
    add(Op::Merge, l, "merge").observe = site_bit(Site::AttnOut);
    project(l, "", {{&L.o, "o", Buf::Y}}, Buf::Att);
    if (c_.post_norms) post_norm(l, "attn_post_norm", L.attn_post_norm);
    residual(l, "attn_residual");
  }

  // y = rms_norm(y) (Gemma 3: a block's output normalized before its residual add)
  void post_norm(int l, const char* name, const Matrix& norm) {
    Step& s = add(Op::RmsNorm, l, name);
    s.norm = &norm;
    s.a = s.b = Buf::Y;
    s.width = c_.dim;
  }

  // x += down(act(gate(h)) * up(h)),  h = rms_norm(x)  (act: SiLU, or GELU's tanh form)
  void mlp(int l) {
    const Layer& L = w_.layers[size_t(l)];
    rms_norm(l, "ffn_norm", c_.pre_norms ? &L.ffn_norm : nullptr, Site::MlpIn);
    project(l, "gate_up", {{&L.gate, "gate", Buf::G}, {&L.up, "up", Buf::U}}, Buf::H,
            &L.gate_up_in);
    Step& s = add(Op::SiluMul, l, "silu_mul");
    s.width = c_.ffn_dim;
    s.act = c_.ffn_act;
    s.observe = site_bit(Site::MlpMid);
    project(l, "", {{&L.down, "down", Buf::Y}}, Buf::G);
    if (c_.post_norms) post_norm(l, "ffn_post_norm", L.ffn_post_norm);
    residual(l, "ffn_residual");
  }

  // logits = output(rms_norm(x))
  void output_head() {
    rms_norm(-1, "output_norm", &w_.out_norm, std::nullopt);
    project(-1, "output", {{&w_.output, "output", Buf::Logits}}, Buf::H);
    if (c_.logit_scale != 1.f)  // logits = head / logit_scale (Granite)
      for (Job& j : plan_.steps.back().jobs) j.scale = 1.f / c_.logit_scale;
  }

  Step& add(Op op, int layer, const std::string& name) {
    Step& s = plan_.steps.emplace_back();
    s.op = op;
    s.layer = layer;
    s.name = step_name(layer, name);
    return s;
  }

  // h = rms_norm(x) * norm; no norm (OLMo 2's blocks): h = x
  void rms_norm(int l, const char* name, const Matrix* norm, std::optional<Site> site) {
    Step& s = add(Op::RmsNorm, l, name);
    s.norm = norm;
    s.a = Buf::X;
    s.b = Buf::H;
    s.width = c_.dim;
    if (site) s.observe = site_bit(*site);
  }

  void head_norm(int l, const char* name, const Matrix& norm, Buf a) {
    Step& s = add(Op::HeadNorm, l, name);
    s.norm = &norm;
    s.a = a;
    s.width = norm.cols;  // a head, or the whole of q or k (OLMo 2)
  }

  // x += residual_scale * y
  void residual(int l, const char* name) {
    Step& s = add(Op::Add, l, name);
    s.a = Buf::Y;
    s.width = c_.dim;
    s.scale = c_.residual_scale;
  }

  // y = M x for a group of linear maps that read the same input: the input
  // side of every map (V, or W for a dense map) in one step, then the output
  // side U of the low-rank ones in a second (a group of one map is named
  // after it; `group` names a larger one). Latents go to P in order.
  // `packed`: the group's input matrices stacked in one allocation (model/pack.h).
  void project(int l, const std::string& group, const std::vector<Map>& maps, Buf in,
               const Matrix* packed = nullptr) {
    std::vector<Job> first, second;
    std::vector<const Linear*> lins;
    bool any_lowrank = false, all_lowrank = true;
    for (const Map& mp : maps) {
      const Linear& m = *mp.lin;
      lins.push_back(&m);
      Job j;
      j.in = in;
      j.map = mp.name;
      if (m.residual()) {  // W x now, and V x to P; U P added to it in the second step
        all_lowrank = false;
        Job w = j;
        w.m = &m.w;
        w.out = mp.out;
        first.push_back(w);
      }
      if (m.low_rank()) {
        any_lowrank = true;
        j.m = &m.v;
        j.side = Side::In;
        j.out = Buf::P;
        j.out_off = p_;
        Job u;
        u.m = &m.u;
        u.in = Buf::P;
        u.in_off = p_;
        u.out = mp.out;
        u.map = mp.name;
        u.side = Side::Out;
        u.rope = mp.rope;
        u.append = mp.append;
        u.head_norm = mp.head_norm;
        u.rope_set = mp.rope_set;
        u.sum = m.residual();
        u.pivots = m.pivots.get();
        if (m.b.rows) u.bias = &m.b;
        second.push_back(u);
        p_ += m.rank();
      } else {
        all_lowrank = false;
        j.m = &m.w;
        j.out = mp.out;
        j.rope = mp.rope;
        j.append = mp.append;
        j.head_norm = mp.head_norm;
        j.rope_set = mp.rope_set;
        if (m.b.rows) j.bias = &m.b;
      }
      first.push_back(j);
    }
    plan_.p_width = std::max(plan_.p_width, p_);
    const std::string base = group.empty() ? maps[0].name : group;
    Step& a = add(Op::Linear, l, base + (any_lowrank ? "_in" : ""));
    a.jobs = std::move(first);
    if (packed && all_lowrank && maps.size() > 1 && packed_input(*packed, lins)) a.stacked = packed;
    mark_observed(a);
    if (second.empty()) return;
    Step& b = add(Op::Linear, l, base + "_out");
    b.jobs = std::move(second);
    mark_observed(b);
  }

  static void mark_observed(Step& s) {
    for (const Job& j : s.jobs) s.observe |= observed_by(j);
  }

  const Weights& w_;
  const PlanOptions& o_;
  const Config& c_;
  Plan plan_;
  int64_t p_ = 0;  // latents of the layer so far (P offset)
};

}  // namespace

Plan plan_forward(const Weights& w, const PlanOptions& o) {
  return Planner(w, o).run();
}

}  // namespace lr
