// The decode plan: what one token does, block by block, as parallel steps.
// Names follow the model: qkv_in is [Vq; Vk; Vv] x, qkv_out reconstructs q, k,
// v of the current token (Uq pq, ...), attend is attention over the cache,
// o_in / o_out the two factors of the output projection, and so on. A dense
// map is one step named after it (q, o, down, ...).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "backend/cpu/attention_kernels.h"
#include "core/half.h"
#include "backend/cpu/key_kernels.h"
#include "backend/cpu/decode_plan.h"
#include "backend/cpu/kernels.h"
#include "core/error.h"
#include "model/pack.h"

namespace lr::cpu {

namespace {
constexpr int64_t kRowAlign = 8;  // rows of a matrix-vector step per unit of work

// The matrix a linear map applies to its output side: U when low-rank, else W.
const Matrix& output_matrix(const Linear& l) { return l.low_rank() ? l.u : l.w; }
}  // namespace

Decoder::Decoder(Session& s) : s_(s), nth_(s.pool.size()) {
  const Config& c = s.c;
  x_.resize(size_t(c.dim));
  h_.resize(size_t(c.dim));
  local_.resize(size_t(nth_) * size_t(std::max(c.dim, c.q_dim())));
  int64_t p = s.w.output.rank();
  for (const Layer& L : s.w.layers)
    p = std::max(p, L.q.rank() + L.k.rank() + L.v.rank() + L.o.rank() + L.gate.rank() +
                        L.up.rank() + L.down.rank());
  p_.resize(size_t(std::max<int64_t>(p, 1)));
  q_.resize(size_t(c.q_dim()));
  k_.resize(size_t(c.kv_dim()));
  v_.resize(size_t(c.kv_dim()));
  att_.resize(size_t(c.q_dim()));
  part_m_.resize(size_t(nth_) * size_t(c.n_heads));
  part_l_.resize(size_t(nth_) * size_t(c.n_heads));
  part_acc_.resize(size_t(nth_) * size_t(c.q_dim()));
  if (s.exec.kv == KvMode::Static) scores_.resize(size_t(c.n_heads) * size_t(s.kv.ctx));
  g_.resize(size_t(c.ffn_dim));
  u_.resize(size_t(c.ffn_dim));
  for (int l = 0; l < c.n_layers; ++l) {
    plan_.region_begin.push_back(plan_.steps.size());
    build_layer(l);
  }
  plan_.region_begin.push_back(plan_.steps.size());
  build_output();
  const char* prof = std::getenv("LOWRANK_PROFILE");
  profile_ = prof && *prof && std::string(prof) != "0";
  step_ns_.assign(plan_.steps.size(), 0.0);
}

Decoder::~Decoder() {
  if (!profile_ || profiled_tokens_ == 0) return;
  std::map<std::string, double> by_kind;  // "blk.3.qkv_in" -> "qkv_in"
  double total = 0;
  for (size_t i = 0; i < plan_.steps.size(); ++i) {
    const std::string& n = plan_.steps[i].name;
    std::string kind = n.rfind("blk.", 0) == 0 ? n.substr(n.find('.', 4) + 1) : n;
    by_kind[kind] += step_ns_[i];
    total += step_ns_[i];
  }
  std::vector<std::pair<double, std::string>> rows;
  for (auto& [k, ns] : by_kind) rows.push_back({ns, k});
  std::sort(rows.rbegin(), rows.rend());
  std::fprintf(stderr, "decode profile: %llu tokens, %.3f ms/token in steps\n",
               (unsigned long long)profiled_tokens_, total / 1e6 / double(profiled_tokens_));
  for (auto& [ns, k] : rows)
    std::fprintf(stderr, "  %-16s %8.1f us/token  %5.1f%%\n", k.c_str(), ns / 1e3 / double(profiled_tokens_),
                 100.0 * ns / total);
}

void Decoder::step(int32_t token, float* logits) {
  s_.w.tok_embd.row_to_f32(token, x_.data());  // on the calling thread, before the region
  logits_ = logits;
  const std::vector<Step>& st = plan_.steps;
  ThreadPool& pool = s_.pool;
  if (profile_) {
    for (size_t i = 0; i < st.size(); ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      pool.run(st[i].run);
      step_ns_[i] += double(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                std::chrono::steady_clock::now() - t0).count());
    }
    ++profiled_tokens_;
    return;
  }
  auto region = [&](size_t b, size_t e) {
    pool.run([&](int tid, int nth) {
      for (size_t i = b; i < e; ++i) {
        if (i > b) pool.barrier();
        st[i].run(tid, nth);
      }
    });
  };
  switch (s_.exec.unit) {
    case ExecUnit::PerOp:
      for (const Step& s : st) pool.run(s.run);
      break;
    case ExecUnit::PerLayer:
      for (size_t r = 0; r < plan_.region_begin.size(); ++r)
        region(plan_.region_begin[r],
               r + 1 < plan_.region_begin.size() ? plan_.region_begin[r + 1] : st.size());
      break;
    case ExecUnit::PerToken: region(0, st.size()); break;
  }
}

// --- building blocks ----------------------------------------------------------

const float* Decoder::resolve(const In& in, int tid) {
  float* mine = &local_[size_t(tid) * (local_.size() / size_t(nth_))];
  if (in.norm) {
    rms_norm(in.v, in.norm->f32(), mine, s_.c.dim, s_.c.rms_eps);
    return mine;
  }
  if (!in.v) {  // the attention output, merged from the per-thread partials
    const Config& c = s_.c;
    for (int h = 0; h < c.n_heads; ++h)
      attend_merge(nth_, &part_m_[size_t(h)], &part_l_[size_t(h)], c.n_heads,
                   &part_acc_[size_t(h) * c.head_dim], c.q_dim(), c.head_dim, mine + h * c.head_dim);
    return mine;
  }
  return in.v;
}

void Decoder::add(std::string name, std::function<void(int, int)> fn) {
  plan_.steps.push_back({std::move(name), std::move(fn)});
}

// out[r] = M[r, :] in for every job, rows split across threads (the jobs of a
// step have the same number of rows); then the post-op on the thread's rows.
// A null job output means the caller's logits.
void Decoder::rows_step(std::string name, std::vector<Job> jobs, Post post) {
  const int64_t rows = jobs[0].m->rows;
  for (const Job& j : jobs) LR_ASSERT(j.m->rows == rows);
  add(std::move(name), [this, jobs, post, rows](int tid, int nth) {
    const Span sp = split(rows, tid, nth, kRowAlign);
    if (sp.begin >= sp.end) return;
    Inputs inputs;
    for (const Job& j : jobs) matvec(*j.m, inputs.get(*this, j.in, tid), j.out ? j.out : logits_, sp.begin, sp.end);
    const int64_t n = sp.end - sp.begin;
    if (post == Post::SiluMul) silu_mul(g_.data() + sp.begin, u_.data() + sp.begin, n);
    if (post == Post::Residual) cpu::add(jobs[0].out + sp.begin, x_.data() + sp.begin, n);
  });
}

// Unfused RMSNorm: one operation on one thread, as an eager framework runs it.
void Decoder::norm_step(std::string name, const Matrix& w, float* out) {
  add(std::move(name), [this, &w, out](int tid, int) {
    if (tid == 0) rms_norm(x_.data(), w.f32(), out, s_.c.dim, s_.c.rms_eps);
  });
}

// --- the blocks ---------------------------------------------------------------

void Decoder::build_layer(int l) {
  const Layer& L = s_.w.layers[size_t(l)];
  const std::string b = "blk." + std::to_string(l) + ".";
  In x_in{x_.data(), &L.attn_norm};
  if (!s_.exec.fused) {
    norm_step(b + "attn_norm", L.attn_norm, h_.data());
    x_in = In{h_.data()};
  }
  build_qkv(l, x_in);
  build_attention(l);
  build_mlp(l);
}

// q, k, v of the current token. Input side: one product with the packed
// [Vq; Vk; Vv] (or one per low-rank map). Output side: per head, Uq pq (or
// Wq x) etc.; in dense-KV mode RoPE and the append into the cache happen in
// the same step, in static mode they are steps of their own, in legacy mode
// only q is reconstructed (k and v stay latents).
void Decoder::build_qkv(int l, const In& x_in) {
  const Layer& L = s_.w.layers[size_t(l)];
  const Config& c = s_.c;
  const std::string b = "blk." + std::to_string(l) + ".";
  const KvMode mode = s_.exec.kv;
  const Linear* lin[3] = {&L.q, &L.k, &L.v};
  const char* names[3] = {"q", "k", "v"};
  float* p[3] = {p_.data(), p_.data() + L.q.rank(), p_.data() + L.q.rank() + L.k.rank()};
  const Matrix* packed = s_.exec.packed ? packed_input(L.qkv_in, {&L.q, &L.k, &L.v}) : nullptr;
  const bool lowrank_packed = packed && L.q.low_rank();
  if (lowrank_packed) {
    rows_step(b + "qkv_in", {{packed, x_in, p[0]}});
  } else {
    for (int i = 0; i < 3; ++i)
      if (lin[i]->low_rank()) rows_step(b + names[i] + "_in", {{&lin[i]->v, x_in, p[i]}});
  }

  struct Part {
    const Matrix* m;
    In in;
    int n_heads;
    int which;  // 0 q, 1 k, 2 v
  };
  std::vector<std::vector<Part>> groups;
  for (int i = 0; i < 3; ++i) {
    if (mode == KvMode::Legacy && i > 0) continue;
    Part part{&output_matrix(*lin[i]), lin[i]->low_rank() ? In{p[i]} : x_in,
              i == 0 ? c.n_heads : c.n_kv_heads, i};
    if (packed && !groups.empty()) groups.back().push_back(part);
    else groups.push_back({part});
  }
  const bool rope_here = mode != KvMode::Static;
  for (const std::vector<Part>& parts : groups) {
    int heads = 0;
    std::string name = b;
    for (const Part& pt : parts) {
      heads += pt.n_heads;
      name += names[pt.which];
    }
    name += lin[parts[0].which]->low_rank() ? "_out" : "";
    add(name, [this, l, parts, heads, rope_here](int tid, int nth) {
      const Config& c = s_.c;
      const int hd = c.head_dim, pos = s_.pos;
      const Span sp = split(heads, tid, nth);
      Inputs inputs;
      int unit = 0;
      for (const Part& pt : parts)
        for (int h = 0; h < pt.n_heads; ++h, ++unit) {
          if (unit < sp.begin || unit >= sp.end) continue;
          // Dense-KV: k and v go straight into the cache at this position.
          // A compressed key cache takes them in its own step (kv_append).
          float* dst = pt.which == 0 ? &q_[size_t(h) * hd]
                       : !rope_here || s_.kv.streamed
                           ? (pt.which == 1 ? &k_[size_t(h) * hd] : &v_[size_t(h) * hd])
                       : pt.which == 1 ? s_.kv.key(l, h) + pos * s_.kv.stride()
                                       : s_.kv.value(l, h) + pos * s_.kv.stride();
          // matvec writes rows [h*hd, (h+1)*hd) of its output: offset dst to match.
          matvec(*pt.m, inputs.get(*this, pt.in, tid), dst - h * hd, int64_t(h) * hd, int64_t(h + 1) * hd);
          if (rope_here && pt.which < 2) s_.rope.apply(dst, 1, hd, pos);
        }
    });
  }

  if (s_.kv.streamed) {
    // The key stream encodes the roped key (a full block is quantized when
    // the window fills); the value is stored as f16. One KV head per unit.
    add(b + "kv_append", [this, l](int tid, int nth) {
      const Config& c = s_.c;
      const int hd = c.head_dim;
      const Span sp = split(c.n_kv_heads, tid, nth);
      for (int64_t h = sp.begin; h < sp.end; ++h) {
        kv::KeyStream& ks = s_.kv.stream(l, int(h));
        const int g = c.n_heads / c.n_kv_heads;
        if (ks.wants_queries()) ks.add_queries(&q_[size_t(h) * g * hd], g, hd, s_.pos, g);
        ks.append(&k_[size_t(h) * hd], 1, hd);
        uint16_t* dst = s_.kv.value16(l, int(h)) + size_t(s_.pos) * size_t(hd);
        for (int i = 0; i < hd; ++i) dst[i] = f32_to_f16(v_[size_t(h) * hd + size_t(i)]);
      }
    });
  }
  if (mode == KvMode::Static) {
    add(b + "rope", [this](int tid, int nth) {
      const Config& c = s_.c;
      const Span sp = split(c.n_heads + c.n_kv_heads, tid, nth);
      for (int64_t h = sp.begin; h < sp.end; ++h) {
        float* x = h < c.n_heads ? &q_[size_t(h) * c.head_dim] : &k_[size_t(h - c.n_heads) * c.head_dim];
        s_.rope.apply(x, 1, c.head_dim, s_.pos);
      }
    });
    add(b + "kv_append", [this, l](int tid, int) {
      if (tid != 0) return;
      s_.kv.append(l, s_.pos, k_.data(), v_.data());
    });
  }
  if (mode == KvMode::Legacy) {
    // The current latents join the cache; then every position's k (roped)
    // and v are rebuilt from the latents, positions split across threads.
    add(b + "kv_rebuild", [this, l, pk = p[1], pv = p[2]](int tid, int nth) {
      const int pos = s_.pos;
      const Span sp = split(pos + 1, tid, nth);
      if (sp.begin <= pos && pos < sp.end) {
        std::copy_n(pk, s_.kv.rk[size_t(l)], s_.kv.pk_at(l, pos));
        std::copy_n(pv, s_.kv.rv[size_t(l)], s_.kv.pv_at(l, pos));
      }
      reconstruct_history(s_, l, sp.begin, sp.end);
    });
  }
}

// Attention of the current token over positions [0, pos], then the output
// projection and the residual add.
void Decoder::build_attention(int l) {
  const Layer& L = s_.w.layers[size_t(l)];
  const std::string b = "blk." + std::to_string(l) + ".";
  const bool fused = s_.exec.fused;
  if (s_.exec.kv == KvMode::Static) {
    // Eager attention: scores, softmax and the weighted sum of values as
    // three operations over a materialized score row per head.
    add(b + "scores", [this, l](int tid, int nth) {
      const Config& c = s_.c;
      const float scale = 1.f / std::sqrt(float(c.head_dim));
      const Span sp = split(c.n_heads, tid, nth);
      for (int64_t h = sp.begin; h < sp.end; ++h) {
        const int kvh = int(h) / (c.n_heads / c.n_kv_heads);
        float* s = &scores_[size_t(h) * s_.kv.ctx];
        for (int j = 0; j <= s_.pos; ++j)
          s[j] = dot(&q_[size_t(h) * c.head_dim], s_.kv.key(l, kvh) + j * s_.kv.stride(), c.head_dim) * scale;
      }
    });
    add(b + "softmax", [this](int tid, int nth) {
      const Span sp = split(s_.c.n_heads, tid, nth);
      for (int64_t h = sp.begin; h < sp.end; ++h) {
        float* s = &scores_[size_t(h) * s_.kv.ctx];
        const float mx = *std::max_element(s, s + s_.pos + 1);
        float sum = 0;
        for (int j = 0; j <= s_.pos; ++j) sum += (s[j] = std::exp(s[j] - mx));
        for (int j = 0; j <= s_.pos; ++j) s[j] /= sum;
      }
    });
    add(b + "weighted_sum", [this, l](int tid, int nth) {
      const Config& c = s_.c;
      const Span sp = split(c.n_heads, tid, nth);
      for (int64_t h = sp.begin; h < sp.end; ++h) {
        const int kvh = int(h) / (c.n_heads / c.n_kv_heads);
        float* out = &att_[size_t(h) * c.head_dim];
        const float* s = &scores_[size_t(h) * s_.kv.ctx];
        std::fill_n(out, c.head_dim, 0.f);
        for (int j = 0; j <= s_.pos; ++j) axpy(s[j], s_.kv.value(l, kvh) + j * s_.kv.stride(), out, c.head_dim);
      }
    });
  } else {
    // Flash-decoding: the positions of every KV head are cut into nth
    // chunks; each (KV head, chunk) is one unit of online-softmax work that
    // reads its keys and values once for all query heads of the group.
    add(b + "attend", [this, l](int tid, int nth) {
      const Config& c = s_.c;
      const int g = c.n_heads / c.n_kv_heads, hd = c.head_dim;
      const float scale = 1.f / std::sqrt(float(hd));
      const int64_t n = s_.pos + 1;
      const Span sp = split(int64_t(c.n_kv_heads) * nth, tid, nth);
      for (int64_t unit = sp.begin; unit < sp.end; ++unit) {
        const int kvh = int(unit / nth), chunk = int(unit % nth);
        const size_t at = size_t(chunk) * c.n_heads + size_t(kvh) * g;
        if (s_.kv.streamed) {  // chunks of whole blocks of the compressed keys
          const kv::KeyStream& ks = s_.kv.stream(l, kvh);
          const Span r = split(n, chunk, nth, ks.block_tokens());
          attend_keys_partial(ks, s_.kv.value16(l, kvh), &q_[size_t(kvh) * g * hd], g, r.begin,
                                  r.end, scale, &part_m_[at], &part_l_[at], &part_acc_[at * size_t(hd)]);
          continue;
        }
        attend_partial(&q_[size_t(kvh) * g * hd], g, hd, s_.kv.key(l, kvh), s_.kv.value(l, kvh),
                       s_.kv.stride(), n * chunk / nth,
                       n * (chunk + 1) / nth, scale, &part_m_[at], &part_l_[at],
                       &part_acc_[at * size_t(hd)]);
      }
    });
  }
  In att_in{att_.data()};
  if (s_.exec.kv != KvMode::Static) {
    if (fused) {
      att_in = In{nullptr};  // merged by each thread inside the next step
    } else {
      add(b + "attn_merge", [this](int tid, int nth) {
        const Config& c = s_.c;
        const Span sp = split(c.n_heads, tid, nth);
        for (int64_t h = sp.begin; h < sp.end; ++h)
          attend_merge(nth, &part_m_[size_t(h)], &part_l_[size_t(h)], c.n_heads,
                       &part_acc_[size_t(h) * c.head_dim], c.q_dim(), c.head_dim,
                       &att_[size_t(h) * c.head_dim]);
      });
    }
  }
  const Post res = fused ? Post::Residual : Post::None;
  float* po = p_.data() + L.q.rank() + L.k.rank() + L.v.rank();
  if (L.o.low_rank()) {
    rows_step(b + "o_in", {{&L.o.v, att_in, po}});
    rows_step(b + "o_out", {{&L.o.u, In{po}, h_.data()}}, res);
  } else {
    rows_step(b + "o", {{&L.o.w, att_in, h_.data()}}, res);
  }
  if (!fused) {
    add(b + "attn_residual", [this](int tid, int nth) {
      const Span sp = split(s_.c.dim, tid, nth, kRowAlign);
      cpu::add(h_.data() + sp.begin, x_.data() + sp.begin, sp.end - sp.begin);
    });
  }
}

// SwiGLU: g = silu(Wg x) * (Wu x), then down and the residual add; gate and
// up read x once through the packed [Vg; Vu] (or [Wg; Wu]).
void Decoder::build_mlp(int l) {
  const Layer& L = s_.w.layers[size_t(l)];
  const std::string b = "blk." + std::to_string(l) + ".";
  const bool fused = s_.exec.fused;
  In x_in{x_.data(), &L.ffn_norm};
  if (!fused) {
    norm_step(b + "ffn_norm", L.ffn_norm, h_.data());
    x_in = In{h_.data()};
  }
  float* pg = p_.data() + L.q.rank() + L.k.rank() + L.v.rank() + L.o.rank();
  float* pu = pg + L.gate.rank();
  float* pd = pu + L.up.rank();
  const Matrix* packed = s_.exec.packed ? packed_input(L.gate_up_in, {&L.gate, &L.up}) : nullptr;
  if (packed && L.gate.low_rank()) {
    rows_step(b + "gate_up_in", {{packed, x_in, pg}});
  } else {
    if (L.gate.low_rank()) rows_step(b + "gate_in", {{&L.gate.v, x_in, pg}});
    if (L.up.low_rank()) rows_step(b + "up_in", {{&L.up.v, x_in, pu}});
  }
  Job gate{&output_matrix(L.gate), L.gate.low_rank() ? In{pg} : x_in, g_.data()};
  Job up{&output_matrix(L.up), L.up.low_rank() ? In{pu} : x_in, u_.data()};
  const char* suffix = L.gate.low_rank() ? "_out" : "";
  if (packed) {
    rows_step(b + "gate_up" + suffix, {gate, up}, fused ? Post::SiluMul : Post::None);
  } else {
    rows_step(b + "gate" + suffix, {gate});
    // The up rows of a thread are the gate rows it computed (same split).
    rows_step(b + "up" + suffix, {up}, fused ? Post::SiluMul : Post::None);
  }
  if (!fused) {
    add(b + "silu_mul", [this](int tid, int nth) {
      const Span sp = split(s_.c.ffn_dim, tid, nth, kRowAlign);
      silu_mul(g_.data() + sp.begin, u_.data() + sp.begin, sp.end - sp.begin);
    });
  }
  const Post res = fused ? Post::Residual : Post::None;
  if (L.down.low_rank()) {
    rows_step(b + "down_in", {{&L.down.v, In{g_.data()}, pd}});
    rows_step(b + "down_out", {{&L.down.u, In{pd}, h_.data()}}, res);
  } else {
    rows_step(b + "down", {{&L.down.w, In{g_.data()}, h_.data()}}, res);
  }
  if (!fused) {
    add(b + "ffn_residual", [this](int tid, int nth) {
      const Span sp = split(s_.c.dim, tid, nth, kRowAlign);
      cpu::add(h_.data() + sp.begin, x_.data() + sp.begin, sp.end - sp.begin);
    });
  }
}

void Decoder::build_output() {
  const Weights& w = s_.w;
  In x_in{x_.data(), &w.out_norm};
  if (!s_.exec.fused) {
    norm_step("output_norm", w.out_norm, h_.data());
    x_in = In{h_.data()};
  }
  if (w.output.low_rank()) {
    rows_step("output_in", {{&w.output.v, x_in, p_.data()}});
    rows_step("output_out", {{&w.output.u, In{p_.data()}, nullptr}});
  } else {
    rows_step("output", {{&w.output.w, x_in, nullptr}});
  }
}

}  // namespace lr::cpu
