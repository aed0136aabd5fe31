#include "backend/cpu/exec/executor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>

#include "backend/cpu/kernels/attention_kernels.h"
#include "backend/cpu/kernels/kernels.h"
#include "core/error.h"

namespace lr::cpu {

Executor::Executor(Session& s, Plan plan, int max_tokens, ActivationObserver* observer,
                   bool profile, Rows rows)
    : s_(s),
      plan_(std::move(plan)),
      max_tokens_(max_tokens),
      observer_(observer),
      rows_(rows),
      profile_(profile) {
  const Config& c = s.c;
  LR_ASSERT(max_tokens >= 1);
  for (int b = 1; b < int(Buf::Logits); ++b) {
    width_[b] = plan_.width(Buf(b), c);
    buf_[b].assign(size_t(max_tokens) * size_t(width_[b]), 0.f);
  }
  width_[size_t(Buf::Logits)] = c.vocab;
  // One token: attention is split across the threads' chunks of positions
  // (flash-decoding); more tokens give enough (token, KV head) items. Rows
  // computed as decode steps keep the decode split whatever their number.
  chunks_ = max_tokens == 1 || rows == Rows::AsDecode ? s.pool.size() : 1;
  pos_.assign(size_t(max_tokens), 0);
  cache_.assign(size_t(max_tokens), nullptr);
  const size_t parts = size_t(max_tokens) * size_t(chunks_) * size_t(c.n_heads);
  part_m_.assign(parts, 0.f);
  part_l_.assign(parts, 0.f);
  part_acc_.assign(parts * size_t(c.head_dim), 0.f);
  for (const Step& st : plan_.steps) {
    for (const Job& j : st.jobs)
      if (j.norm || j.merge_in || j.in2 != Buf::None)
        local_floats_ = std::max(local_floats_, j.m->cols);
    if (st.op == Op::Scores) scores_.assign(size_t(c.n_heads) * size_t(s.ctx), 0.f);
  }
  local_.assign(size_t(s.pool.size()) * size_t(max_tokens) * size_t(local_floats_), 0.f);
  for (const Step& st : plan_.steps)
    for (const Job& j : st.jobs)
      if (j.sum || j.pivots) sum_floats_ = std::max({sum_floats_, kSumRows * max_tokens, j.rows()});
  sum_.assign(size_t(s.pool.size()) * size_t(sum_floats_), 0.f);
  for (const Step& st : plan_.steps)
    if (st.op != Op::Embed) steps_.push_back({&st, compile(st), is_head(st)});
  first_head_ =
      size_t(std::find_if(steps_.begin(), steps_.end(), [](const Compiled& c) { return c.head; }) -
             steps_.begin());
  step_ns_.assign(steps_.size(), 0.0);
}

Executor::~Executor() {
  if (!profile_ || profiled_calls_ == 0) return;
  std::map<std::string, double> by_kind;  // "blk.3.qkv_in" -> "qkv_in"
  double total = 0;
  for (size_t i = 0; i < steps_.size(); ++i) {
    const std::string& n = steps_[i].step->name;
    std::string kind = n.rfind("blk.", 0) == 0 ? n.substr(n.find('.', 4) + 1) : n;
    by_kind[kind] += step_ns_[i];
    total += step_ns_[i];
  }
  std::vector<std::pair<double, std::string>> rows;
  for (auto& [k, ns] : by_kind) rows.push_back({ns, k});
  std::sort(rows.rbegin(), rows.rend());
  const double calls = double(profiled_calls_);
  std::fprintf(stderr, "decode profile: %llu tokens, %.3f ms/token in steps\n",
               (unsigned long long)profiled_calls_, total / 1e6 / calls);
  for (auto& [ns, k] : rows)
    std::fprintf(stderr, "  %-16s %8.1f us/token  %5.1f%%\n", k.c_str(), ns / 1e3 / calls,
                 100.0 * ns / total);
}

void Executor::run(const int32_t* tokens, int n, Head head, float* logits) {
  LR_ASSERT(n >= 1 && n <= max_tokens_);
  n_ = n;
  logits_ = logits;
  head_first_ = head == Head::Last ? n - 1 : 0;
  head_count_ = head == Head::Last ? 1 : n;
  head_rows_.clear();
  generated_ = head_generated_ = rows_ == Rows::AsDecode ? n : 0;
  for (int t = 0; t < n; ++t) {
    pos_[size_t(t)] = s_.pos + t;
    cache_[size_t(t)] = s_.cache.get();
  }
  find_runs();
  if (!plan_.steps.empty() && plan_.steps[0].op == Op::Embed)  // on the calling thread
    for (int t = 0; t < n; ++t) embed(tokens[t], t);
  execute(head);
}

// x[t] = the token's embedding row (times the Embed step's scale).
void Executor::embed(int32_t token, int t) {
  s_.w.tok_embd.row_to_f32(token, row(Buf::X, t));
  const float sc = plan_.steps[0].scale;
  if (sc != 1.f) scale(sc, row(Buf::X, t), s_.c.dim);
}

void Executor::run_hidden(float* x, int n) {
  LR_ASSERT(n >= 1 && n <= max_tokens_ && rows_ == Rows::Matrix);
  n_ = n;
  logits_ = nullptr;
  head_first_ = head_count_ = 0;
  head_rows_.clear();
  generated_ = head_generated_ = 0;
  for (int t = 0; t < n; ++t) {
    pos_[size_t(t)] = s_.pos + t;
    cache_[size_t(t)] = s_.cache.get();
  }
  find_runs();
  const int64_t dim = width(Buf::X);
  std::copy_n(x, size_t(n) * size_t(dim), row(Buf::X, 0));
  execute(Head::None);
  std::copy_n(row(Buf::X, 0), size_t(n) * size_t(dim), x);
}

void Executor::run_rows(const int32_t* tokens, const int* pos, SeqCache* const* caches, int n,
                        int n_generated, const int* head_rows, int n_head, float* logits) {
  LR_ASSERT(n >= 1 && n <= max_tokens_ && n_head >= 0 && n_head <= n);
  LR_ASSERT(rows_ == Rows::AsDecode && n_generated >= 0 && n_generated <= n);
  LR_ASSERT(plan_.kv == KvMode::Dense);
  LR_ASSERT(!plan_.steps.empty() && plan_.steps[0].op == Op::Embed);
  n_ = n;
  logits_ = logits;
  head_first_ = 0;
  head_count_ = n_head;
  head_rows_.assign(head_rows, head_rows + n_head);
  generated_ = n_generated;
  head_generated_ = int(std::lower_bound(head_rows, head_rows + n_head, n_generated) - head_rows);
  for (int t = 0; t < n; ++t) {
    pos_[size_t(t)] = pos[t];
    cache_[size_t(t)] = caches[t];
    embed(tokens[t], t);
  }
  for (int i = 1; i < n_head; ++i) LR_ASSERT(head_rows[i] > head_rows[i - 1]);
  find_runs();
  execute(n_head > 0 ? Head::All : Head::None);
}

void Executor::find_runs() {
  runs_.clear();
  for (int t = 0; t < n_; ++t)
    if (runs_.empty() || cache_[size_t(t)] != cache_[size_t(t - 1)])
      runs_.push_back({t, 1});
    else
      ++runs_.back().count;
}

void Executor::gather_head_rows() {
  const int64_t w = width(Buf::X);
  for (size_t i = 0; i < head_rows_.size(); ++i)  // ascending: a row moves down or stays
    if (head_rows_[i] != int(i)) std::copy_n(row(Buf::X, head_rows_[i]), w, row(Buf::X, int(i)));
}

void Executor::execute(Head head) {
  ThreadPool& pool = s_.pool;
  bool gather = false;  // run_rows: whether the head's rows must move first
  for (size_t i = 0; i < head_rows_.size(); ++i) gather |= head_rows_[i] != int(i);
  auto skip = [&](const Compiled& c) { return c.head && head == Head::None; };
  if (profile_ || observer_ || plan_.unit == ExecUnit::PerOp) {
    for (size_t i = 0; i < steps_.size(); ++i) {
      if (observer_ && steps_[i].step->layer > observer_->last_layer()) break;
      if (skip(steps_[i])) continue;
      if (gather && i == first_head_) gather_head_rows();
      const auto t0 = std::chrono::steady_clock::now();
      pool.run(steps_[i].fn);
      if (profile_)
        step_ns_[i] += double(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                  std::chrono::steady_clock::now() - t0)
                                  .count());
      if (observer_) observe(*steps_[i].step, n_);
    }
    profiled_calls_ += profile_ ? 1 : 0;
    return;
  }
  // Steps [b, e) of steps_ as one dispatch, a barrier between consecutive
  // ones. Each step is shared out (ThreadPool::share): thread t computes
  // the share split(.., t, nth) gives it, unless it comes late, and then
  // another thread computes that share, the same way.
  auto region = [&](size_t b, size_t e) {
    size_t todo = 0, last = e;
    for (size_t i = b; i < e; ++i)
      if (!skip(steps_[i])) ++todo, last = i;
    if (todo == 0) return;
    pool.reserve_phases(int(todo) + 1);
    pool.run([&](int tid, int nth) {
      for (size_t i = b; i < e; ++i) {
        if (skip(steps_[i])) continue;
        if (gather && i == first_head_)  // the head's rows, moved by one thread
          pool.share(tid, 1, true, [&](int) { gather_head_rows(); });
        pool.share(tid, nth, i != last, [&](int share) { steps_[i].fn(share, nth); });
      }
    });
  };
  if (plan_.unit == ExecUnit::PerToken) return region(0, steps_.size());
  // Per layer: the plan's regions, as positions in steps_ (which has no embedding).
  const size_t embed = plan_.steps[0].op == Op::Embed ? 1 : 0;
  for (size_t r = 0; r < plan_.region_begin.size(); ++r) {
    const auto [b, e] = plan_.region(r);
    region(b == 0 ? 0 : b - embed, e - embed);
  }
}

void Executor::observe(const Step& s, int n) {
  for (Site site :
       {Site::AttnIn, Site::AttnOut, Site::MlpIn, Site::MlpMid, Site::Keys, Site::Queries})
    if (s.observes(site)) {
      const Buf b = site_buffer(site);
      observer_->observe(s.layer, site, row(b, 0), n, int(width(b)));
    }
}

Executor::Fn Executor::compile(const Step& s) {
  switch (s.op) {
    case Op::Linear:
      return linear(s);
    case Op::RmsNorm:
      return rms_norm(s);
    case Op::HeadNorm:
      return head_norm(s);
    case Op::Add:
    case Op::SiluMul:
      return elementwise(s);
    case Op::Rope:
    case Op::RopeAppend:
      return rope(s);
    case Op::Append:
      return append(s);
    case Op::Attend:
      return attend(s);
    case Op::Merge:
      return merge(s);
    case Op::Scores:
    case Op::Softmax:
    case Op::Mix:
      return static_attention(s);
    case Op::LatentAppend:
    case Op::Reconstruct:
      return latent(s);
    case Op::Embed:
      break;
  }
  LR_ASSERT(false && "no CPU form of this step");
  return {};
}

// b = rms_norm(a) * norm, tokens split across threads (one token: thread 0).
Executor::Fn Executor::rms_norm(const Step& s) {
  return [this, &s](int tid, int nth) {
    const Span sp = split(count(s), tid, nth);
    for (int64_t t = first(s) + sp.begin; t < first(s) + sp.end; ++t)
      if (s.norm)
        cpu::rms_norm(row(s.a, int(t)), s.norm->f32(), row(s.b, int(t)), s.width, s_.c.rms_eps);
      else  // no pre-norm (OLMo 2): h = x
        std::copy_n(row(s.a, int(t)), s.width, row(s.b, int(t)));
  };
}

// Each head of a rms-normalized in place, one (token, head) per unit.
Executor::Fn Executor::head_norm(const Step& s) {
  return [this, &s](int tid, int nth) {
    const int64_t hd = s.width, heads = width(s.a) / hd;
    const Span sp = split(int64_t(count(s)) * heads, tid, nth);
    for (int64_t u = sp.begin; u < sp.end; ++u) {
      float* x = row(s.a, first(s) + int(u / heads)) + (u % heads) * hd;
      cpu::rms_norm(x, s.norm->f32(), x, hd, s_.c.rms_eps);
    }
  };
}

// x += a, or g = silu(g) * u: the [count, width] rows as one span.
Executor::Fn Executor::elementwise(const Step& s) {
  return [this, &s](int tid, int nth) {
    const Span sp = split(int64_t(count(s)) * s.width, tid, nth, 8);
    if (sp.begin >= sp.end) return;
    if (s.op == Op::Add && s.scale != 1.f)
      return axpy(s.scale, row(s.a, 0) + sp.begin, row(Buf::X, 0) + sp.begin, sp.end - sp.begin);
    if (s.op == Op::Add)
      return cpu::add(row(s.a, 0) + sp.begin, row(Buf::X, 0) + sp.begin, sp.end - sp.begin);
    gated(s.act, row(Buf::G, 0) + sp.begin, row(Buf::U, 0) + sp.begin, sp.end - sp.begin);
  };
}

// Rope: the heads of a (q) and b (k) roped in place, one head per unit.
// RopeAppend: per (token, KV head), the group's q heads and the k head
// roped, then k and v written to the cache.
Executor::Fn Executor::rope(const Step& s) {
  return [this, &s](int tid, int nth) {
    const Config& c = s_.c;
    const int hd = c.head_dim, g = c.n_heads / c.n_kv_heads, n = count(s);
    if (s.op == Op::Rope) {
      const int heads = c.n_heads + (s.b == Buf::None ? 0 : c.n_kv_heads);
      const Span sp = split(int64_t(n) * heads, tid, nth);
      for (int64_t u = sp.begin; u < sp.end; ++u) {
        const int t = int(u / heads), h = int(u % heads);
        float* x = h < c.n_heads ? row(s.a, t) + h * hd : row(s.b, t) + (h - c.n_heads) * hd;
        s_.rope_of(s.rope_set).apply(x, 1, hd, pos(t));
      }
      return;
    }
    const Span sp = split(int64_t(n) * c.n_kv_heads, tid, nth);
    for (int64_t u = sp.begin; u < sp.end; ++u) {
      const int t = int(u / c.n_kv_heads), h = int(u % c.n_kv_heads), p = pos(t);
      s_.rope_of(s.rope_set).apply(row(Buf::Q, t) + h * g * hd, g, hd, p);
      s_.rope_of(s.rope_set).apply(row(Buf::K, t) + h * hd, 1, hd, p);
      kv::DenseCache& dc = *cache(t).dense();
      dc.put(false, s.layer, h, p, 0, row(Buf::K, t) + h * hd, hd);
      dc.put(true, s.layer, h, p, 0, row(Buf::V, t) + h * hd, hd);
    }
  };
}

// k, v -> each row's cache: per (token, KV head) where the cache takes
// tokens alone, else per (run of a sequence's rows, KV head). A compressed
// key cache also sees the roped queries of the head's group while its
// query-aware basis is not fitted yet.
Executor::Fn Executor::append(const Step& s) {
  return [this, &s](int tid, int nth) {
    const Config& c = s_.c;
    const int hd = c.head_dim, g = c.n_heads / c.n_kv_heads, l = s.layer, H = c.n_kv_heads;
    const bool tokens = cache(0).appends_tokens();  // every cache of a call is of one kind
    const Span sp = split(int64_t(tokens ? count(s) : int(runs_.size())) * H, tid, nth);
    for (int64_t u = sp.begin; u < sp.end; ++u) {
      const int h = int(u % H);
      const Run r = tokens ? Run{int(u / H), 1} : runs_[size_t(u / H)];
      cache(r.first).append(l, h, pos(r.first), row(Buf::K, r.first) + h * hd,
                            row(Buf::V, r.first) + h * hd, r.count, width(Buf::K),
                            row(Buf::Q, r.first) + h * g * hd, width(Buf::Q), g);
    }
  };
}

// Attention: each row's cache does the work (seq_cache.h).

// Online-softmax partials. Rows computed as a decode step computes them
// (one token, or run_rows' generated rows): per (token, KV head, chunk),
// the positions cut into one chunk per thread (flash-decoding; compressed
// keys in chunks of whole blocks), each unit reading its keys and values
// once for all query heads of the group. Prompt rows: one chunk each, the
// rows of a sequence in tiles (attend_tiles); in a windowed layer, as
// decode rows. Either way a row's bits do not depend on what else the call
// holds.
Executor::Fn Executor::attend(const Step& s) {
  LR_ASSERT(!s.rope_append);  // a GPU fold
  return [this, &s](int tid, int nth) {
    const Config& c = s_.c;
    const int g = c.n_heads / c.n_kv_heads, hd = c.head_dim, l = s.layer, C = chunks_;
    const int split_rows = s.window ? n_ : C == 1 ? 0 : rows_ == Rows::AsDecode ? generated_ : n_;
    const Span sp = split(int64_t(split_rows) * c.n_kv_heads * C, tid, nth);
    for (int64_t u = sp.begin; u < sp.end; ++u) {
      const int t = int(u / (int64_t(c.n_kv_heads) * C)), kvh = int(u / C % c.n_kv_heads),
                chunk = int(u % C);
      const size_t at = part(t, chunk, kvh * g);
      float *m = &part_m_[at], *sum = &part_l_[at], *acc = &part_acc_[at * size_t(hd)];
      const float* q = row(Buf::Q, t) + kvh * g * hd;
      const int p = pos(t), from = s.window ? std::max(0, p - s.window + 1) : 0;
      cache(t).attend(l, kvh, from, p, q, g, chunk, C, s.scale, m, sum, acc);
    }
    attend_tiles(s, split_rows, tid, nth);
  };
}

// Rows [first, n) of the call, one chunk each: per (tile of a run's rows,
// KV head), the tile's queries attended together (SeqCache::attend_rows),
// each row with the bits it gets alone; the other chunks of the rows left
// empty. A causal prompt's later tiles see more keys: the items are dealt
// round robin so every thread gets early and late ones.
void Executor::attend_tiles(const Step& s, int first, int tid, int nth) {
  const Config& c = s_.c;
  const int g = c.n_heads / c.n_kv_heads, hd = c.head_dim, H = c.n_kv_heads, C = chunks_;
  const int T = causal_tile_rows(g);
  int64_t item = 0;
  for (const Run& r : runs_) {
    const int end = r.first + r.count;
    for (int t0 = std::max(first, r.first); t0 < end; t0 += T)
      for (int kvh = 0; kvh < H; ++kvh, ++item) {
        if (item % nth != tid) continue;
        const int n = std::min(T, end - t0);
        const size_t at = part(t0, 0, kvh * g);
        const SeqCache::RowPartials out{&part_m_[at], &part_l_[at], &part_acc_[at * size_t(hd)],
                                        int64_t(C) * c.n_heads, int64_t(C) * c.n_heads * hd};
        cache(t0).attend_rows(s.layer, kvh, pos(t0), n, row(Buf::Q, t0) + kvh * g * hd,
                              width(Buf::Q), g, s.scale, out);
        for (int t = t0; t < t0 + n; ++t)
          for (int chunk = 1; chunk < C; ++chunk)
            for (int h = 0; h < g; ++h) {
              part_m_[part(t, chunk, kvh * g + h)] = -INFINITY;
              part_l_[part(t, chunk, kvh * g + h)] = 0.f;
            }
      }
  }
}

// att = the partials merged, per (token, query head).
Executor::Fn Executor::merge(const Step& s) {
  return [this, &s](int tid, int nth) {
    const Config& c = s_.c;
    const Span sp = split(int64_t(count(s)) * c.n_heads, tid, nth);
    for (int64_t u = sp.begin; u < sp.end; ++u) {
      const int t = int(u / c.n_heads), h = int(u % c.n_heads);
      attend_merge(chunks_, &part_m_[part(t, 0, h)], &part_l_[part(t, 0, h)], c.n_heads,
                   &part_acc_[part(t, 0, h) * size_t(c.head_dim)], int64_t(c.n_heads) * c.head_dim,
                   c.head_dim, row(Buf::Att, t) + h * c.head_dim);
    }
  };
}

}  // namespace lr::cpu
