// Products of the CPU executor: every job of a Linear step, its folded input
// (a norm, SiLU*mul or the attention merge, computed by each thread into its
// own scratch) and what it finishes on the rows it computed (the bias, a
// residual add, RoPE and the append of head rows, SiLU*mul of gate and up
// rows).
#include <algorithm>
#include <numeric>

#include "backend/cpu/exec/executor.h"
#include "backend/cpu/kernels/attention_kernels.h"
#include "backend/cpu/kernels/kernels.h"
#include "core/error.h"

namespace lr::cpu {

void Executor::merge_rows(int first, int count, float* out, int64_t ld) const {
  const Config& c = s_.c;
  const int H = c.n_heads, hd = c.head_dim;
  for (int t = first; t < first + count; ++t)
    for (int h = 0; h < H; ++h)
      attend_merge(chunks_, &part_m_[part(t, 0, h)], &part_l_[part(t, 0, h)], H,
                   &part_acc_[part(t, 0, h) * size_t(hd)], int64_t(H) * hd, hd,
                   out + int64_t(t - first) * ld + h * hd);
}

// Job j's input for the call's tokens: a buffer's rows, or its folded form
// (norm, SiLU*mul, the attention merge) in thread tid's scratch. Sets ldx.
const float* Executor::linear_input(const Job& j, const Step& s, int tid, int64_t& ldx) {
  const int t0 = first(s), n = count(s);
  const int64_t cols = j.m->cols;
  if (!j.norm && !j.merge_in && j.in2 == Buf::None) {
    ldx = width(j.in);
    return row(j.in, t0) + j.in_off;
  }
  float* mine = local(tid);
  ldx = cols;
  if (j.merge_in) {
    merge_rows(t0, n, mine, cols);
    return mine;
  }
  for (int t = 0; t < n; ++t) {
    const float* in = row(j.in, t0 + t) + j.in_off;
    float* dst = mine + int64_t(t) * cols;
    if (j.norm) {
      cpu::rms_norm(in, j.norm->f32(), dst, cols, s_.c.rms_eps);
    } else {
      std::copy_n(in, cols, dst);
      gated(j.act, dst, row(j.in2, t0 + t) + j.in_off, cols);
    }
  }
  return mine;
}

// y [n, ldy] rows [r0, r1) = M x for the call's tokens: generated rows as
// decode steps, then prompt rows in tiles (Rows::AsDecode), else all at once.
void Executor::product_rows(const Step& s, const Matrix& m, const Panels& P, const float* x,
                            int64_t ldx, float* y0, int64_t ldy, int64_t r0, int64_t r1) {
  const int n = count(s);
  if (rows_ != Rows::AsDecode) return matmul(m, P, x, ldx, y0, ldy, n, r0, r1);
  const int nd = decoded(s);
  if (nd > 0) matvec_rows(m, P, x, ldx, y0, ldy, nd, r0, r1);
  if (nd < n)
    matmul(m, P, x + nd * ldx, ldx, y0 + nd * ldy, ldy, n - nd, r0, r1, MatmulPath::Tiles);
}

// Rows [r0, r1) of a summed or pivoted job through thread tid's scratch, in
// slices of output rows: the sum out += M x, or pivoted rows: M's rows among
// them computed, the pivot rows' latents copied from x, scattered into
// their places.
void Executor::sliced_product(const Step& s, const Job& j, const Panels& P, int tid, const float* x,
                              int64_t ldx, float* y0, int64_t ldy, int64_t r0, int64_t r1) {
  const int n = count(s);
  float* part = sum_scratch(tid);
  const Pivots* pv = j.pivots;
  const int64_t h = sum_rows(n);
  for (int64_t a = r0; a < r1; a += h) {
    const int64_t b = std::min(r1, a + h);
    const int64_t ma = pv ? pv->before[size_t(a)] : a, mb = pv ? pv->before[size_t(b)] : b;
    if (mb > ma)
      product_rows(s, j.m->rows_view(ma, mb - ma), P.rows(ma, mb - ma), x, ldx, part, h, 0,
                   mb - ma);
    for (int t = 0; t < n; ++t) {
      const float* pt = part + int64_t(t) * h;
      float* y = y0 + int64_t(t) * ldy;
      if (!pv) {
        cpu::add(pt, y + a, b - a);
        continue;
      }
      const float* xt = x + int64_t(t) * ldx;
      for (int64_t i = a; i < b; ++i) {
        const int32_t src = pv->source[size_t(i)];
        const float v = src >= 0 ? pt[src - ma] : xt[-1 - src];
        y[i] = j.sum ? y[i] + v : v;
      }
    }
  }
}

// What job j finishes on the rows [r0, r1) it computed into buffer `to`:
// the bias, the residual add, the heads' norms, RoPE, the dense cache's
// append of head rows.
void Executor::finish_rows(const Step& s, const Job& j, Buf to, int64_t r0, int64_t r1) {
  const int t0 = first(s), n = count(s), hd = s_.c.head_dim;
  for (int t = 0; t < n; ++t) {
    float* y = row(to, t0 + t) + j.out_off;
    if (j.bias) cpu::add(j.bias->f32() + r0, y + r0, r1 - r0);
    if (j.scale != 1.f) cpu::scale(j.scale, y + r0, r1 - r0);
    if (j.accumulate) cpu::add(y + r0, row(Buf::X, t0 + t) + j.out_off + r0, r1 - r0);
    const int p = pos(t0 + t);
    for (int64_t r = r0; j.head_norm && r < r1; r += hd)  // whole heads (units of head_dim rows)
      cpu::rms_norm(y + r, j.head_norm->f32(), y + r, hd, s_.c.rms_eps);
    if (j.rope) s_.rope_of(j.rope_set).apply_rows(y, r0, r1, hd, p);
    for (int64_t r = r0; j.append && r < r1;) {  // each head's part of the rows
      const int h = int(r / hd);
      const int64_t e = std::min<int64_t>(r1, int64_t(h + 1) * hd);
      kv::DenseCache& kv = *cache(t0 + t).dense();  // a dense plan folds its append here
      kv.put(j.out == Buf::V, s.layer, h, p, r - int64_t(h) * hd, y + r, e - r);
      r = e;
    }
  }
}

// Work is split across threads in units of rows, 8 for one token
// (matrix-vector; 16 for matrices in panels) or 16 (the matrix-matrix
// kernels' tile height), over the jobs' rows one after another; a unit never
// splits a RoPE pair. A step that ends in SiLU*mul splits its jobs' rows
// alike, so each thread finishes the gate and up rows it computed.
Executor::Fn Executor::linear(const Step& s) {
  std::vector<Job> jobs = s.jobs;
  if (s.stacked) {  // one product over the packed matrix, into the jobs' consecutive outputs
    Job one = jobs[0];
    one.m = s.stacked;
    jobs = {one};
  }
  for (const Job& j : jobs) {
    LR_ASSERT(!j.norm || (j.in_off == 0 && j.m->cols == width(j.in)));
    LR_ASSERT(!j.accumulate || j.out == Buf::X);
    LR_ASSERT(!s.silu_mul || j.rows() == jobs[0].rows());
    LR_ASSERT(!j.pivots || (j.in == Buf::P && !j.norm));
  }
  std::vector<Panels> P;  // each job's matrix's (kernels/panels.h)
  bool panels = false;    // matrices in panels of 16 rows: units of 16 rows
  bool head_norm = false;  // a job normalizes heads: units of whole heads
  for (const Job& j : jobs) {
    P.push_back(panels_of(*j.m));
    panels |= bool(P.back());
    head_norm |= j.head_norm != nullptr;
    LR_ASSERT(!j.head_norm || j.out_off % s_.c.head_dim == 0);
  }
  return [this, &s, jobs, P, panels, head_norm](int tid, int nth) {
    const int t0 = first(s), n = count(s);
    // Units of whole heads where a job normalizes each head it computes.
    const int64_t base = n == 1 && !panels ? 8 : 16;
    const int64_t align = head_norm ? std::lcm(base, int64_t(s_.c.head_dim)) : base;
    // Jobs of a step that read the same input resolve it once.
    const Job* last = nullptr;
    const float* x = nullptr;
    int64_t ldx = 0;
    auto product = [&](const Job& j, int64_t r0, int64_t r1) {
      const Panels& pj = P[size_t(&j - jobs.data())];
      if (!last || last->in != j.in || last->in_off != j.in_off || last->norm != j.norm ||
          last->in2 != j.in2 || last->merge_in != j.merge_in)
        x = linear_input(j, s, tid, ldx);
      last = &j;
      const Buf to = j.accumulate ? Buf::Y : j.out;  // a residual is summed from Y
      float* y0 = row(to, t0) + j.out_off;
      if (!j.sum && !j.pivots)
        product_rows(s, *j.m, pj, x, ldx, y0, width(to), r0, r1);
      else
        sliced_product(s, j, pj, tid, x, ldx, y0, width(to), r0, r1);
      finish_rows(s, j, to, r0, r1);
    };
    if (s.silu_mul) {
      const Span sp = split(jobs[0].rows(), tid, nth, align);
      if (sp.begin >= sp.end) return;
      for (const Job& j : jobs) product(j, sp.begin, sp.end);
      for (int t = 0; t < n; ++t)
        gated(s.act, row(Buf::G, t0 + t) + sp.begin, row(Buf::U, t0 + t) + sp.begin,
              sp.end - sp.begin);
      return;
    }
    // A job's units are `align` rows of its matrix; a pivoted job's unit
    // boundaries map to the output row where that many of U's rows lie
    // (rounded down to `align`), so its threads share U's rows, not the
    // pivot rows' copies.
    auto units_of = [&](const Job& j) { return (j.m->rows + align - 1) / align; };
    auto out_row = [&](const Job& j, int64_t unit) -> int64_t {
      if (unit >= units_of(j)) return j.rows();
      if (!j.pivots) return unit * align;
      const std::vector<int32_t>& before = j.pivots->before;
      const int64_t i =
          std::lower_bound(before.begin(), before.end(), int32_t(unit * align)) - before.begin();
      return i / align * align;
    };
    int64_t units = 0;
    for (const Job& j : jobs) units += units_of(j);
    const Span sp = split(units, tid, nth);
    int64_t u0 = 0;  // first unit of the job
    for (const Job& j : jobs) {
      const int64_t ju = units_of(j);
      const int64_t b = std::max(sp.begin, u0), e = std::min(sp.end, u0 + ju);
      if (b < e) {
        const int64_t r0 = out_row(j, b - u0), r1 = out_row(j, e - u0);
        if (r0 < r1) product(j, r0, r1);
      }
      u0 += ju;
    }
  };
}

}  // namespace lr::cpu
