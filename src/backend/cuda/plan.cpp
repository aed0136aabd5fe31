#include "backend/cuda/plan.h"

#include <algorithm>

#include "core/error.h"

namespace lr::cuda {

Plan plan_forward(const Weights& w, const ExecOptions& e) {
  const Config& c = w.cfg;
  // (the attention kernels' instances: kernels.cuh attend_head_dim)
  if (c.head_dim != 32 && c.head_dim != 64 && c.head_dim != 96 && c.head_dim != 128 &&
      c.head_dim != 256)
    fail("the CUDA backend runs head_dim 32, 64, 96, 128 or 256 (the model has {})", c.head_dim);
  if (c.n_heads / c.n_kv_heads > 8)
    fail("the CUDA backend runs up to 8 query heads per KV head (the model has {})",
         c.n_heads / c.n_kv_heads);
  if (e.kv == KvMode::Legacy)
    for (int l = 0; l < c.n_layers; ++l)
      if (c.rope_set(l) != 0)
        fail(
            "--kv legacy on the CUDA backend rebuilds every key with the model's one RoPE, but "
            "layer {} of this {} model has {} (use --kv dense)",
            l, c.arch,
            c.rope_set(l) == 1 ? "a sliding window with a RoPE base of its own" : "no RoPE");
  Plan p = derive(w, {Target::Gpu}, e);
  for (const Step& s : p.steps)
    if (s.jobs.size() > size_t(kMaxStepJobs))
      fail("the CUDA backend launches up to {} products per step; {} has {}", kMaxStepJobs,
           s.name, s.jobs.size());
  return p;
}

LaunchStats launch_stats(const Plan& p, ExecUnit unit) {
  LaunchStats s;
  s.kernels = int64_t(p.steps.size());
  s.memcpys = 2;  // token and position in, logits out
  switch (unit) {
    case ExecUnit::PerOp:
      s.host_launches = s.kernels + s.memcpys;
      break;
    case ExecUnit::PerLayer:
      for (size_t r = 0; r < p.region_begin.size(); ++r) {
        const size_t end =
            r + 1 < p.region_begin.size() ? p.region_begin[r + 1] : p.steps.size();
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
  std::vector<const Matrix*> ms;  // the norms go to a buffer of their own
  for_each_matrix(w, [&](const WeightSpec& spec, const Matrix& m) {
    if (!spec.is_norm) ms.push_back(&m);
  });
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
  const uint64_t row_bytes = m.row_bytes();
  LR_ASSERT(uint64_t(m.ptr() - r.begin) % row_bytes == 0);
  return r.offset + uint64_t(m.ptr() - r.begin) / row_bytes * uint64_t(padded_cols(r.cols));
}

MemoryPlan plan_memory(const Weights& w, const Plan& p, const ExecOptions& e, int ctx,
                       int max_tokens) {
  const Config& c = w.cfg;
  MemoryPlan m;
  m.weights = estimate_bytes(matrix_shapes(w), DType::BF16, kRowPad);  // and the f32 norms
  for_each_linear(w, [&](const WeightSpec&, int, const Linear& lin) {  // pivoted: int32 sources
    if (lin.pivoted()) m.weights += lin.pivots->source.size() * 4;
  });
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
  for (const Step& s : p.steps)
    for (const Job& j : s.jobs) cols = std::max(cols, j.m->cols);
  m.prefill_inputs = 2 * n * uint64_t(padded_cols(cols)) * 2;
  return m;
}

}  // namespace lr::cuda
