// Attention steps of the CPU executor, over each row's cache (seq_cache.h).
// The research rungs' own attention steps are in exec_rungs.cpp.
#include <algorithm>
#include <cmath>

#include "backend/cpu/exec/executor.h"
#include "backend/cpu/kernels/attention_kernels.h"
#include "backend/cpu/kernels/kernels.h"
#include "core/error.h"

namespace lr::cpu {

// Online-softmax partials per (token, KV head, chunk): each unit reads its
// keys and values once for all query heads of the group. One token: the
// positions of every KV head are cut into one chunk per thread
// (flash-decoding; compressed keys in chunks of whole blocks). More tokens:
// one chunk, every (token, KV head) an item.
Executor::Fn Executor::attend(const Step& s) {
  LR_ASSERT(!s.rope_append);  // a GPU fold
  return [this, &s](int tid, int nth) {
    const Config& c = s_.c;
    const int g = c.n_heads / c.n_kv_heads, hd = c.head_dim, l = s.layer, C = chunks_;
    const float scale = 1.f / std::sqrt(float(hd));
    const Span sp = split(int64_t(count(s)) * c.n_kv_heads * C, tid, nth);
    for (int64_t u = sp.begin; u < sp.end; ++u) {
      const int t = int(u / (int64_t(c.n_kv_heads) * C)), kvh = int(u / C % c.n_kv_heads),
                chunk = int(u % C);
      const size_t at = part(t, chunk, kvh * g);
      float *m = &part_m_[at], *sum = &part_l_[at], *acc = &part_acc_[at * size_t(hd)];
      const float* q = row(Buf::Q, t) + kvh * g * hd;
      cache(t).attend(l, kvh, pos(t), q, g, chunk, C, scale, m, sum, acc);
    }
  };
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
