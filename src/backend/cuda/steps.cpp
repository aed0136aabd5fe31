// A CUDA session's device memory and the launches of a plan's steps
// (backend/cuda/steps.h).
#include "backend/cuda/steps.h"

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "model/scalar_ops.h"

namespace lr::cuda {

void SessionMemory::allocate(std::shared_ptr<const Weights> w, const ExecOptions& e, int context,
                             const Plan& decode, const Plan& prefill, int slots) {
  weights = std::move(w);
  kv = e.kv;
  ctx = context;
  const Config& c = cfg();
  dw = device_weights(weights);
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  int64_t max_cols = c.ffn_dim;
  for (const Plan* p : {&decode, &prefill})
    for (const Step& L : p->steps)
      for (const Job& j : L.jobs) max_cols = std::max(max_cols, j.m->cols);
  k_latent = decode.k_latent;
  v_latent = decode.v_latent;
  CK(prepare_kernels(max_cols, std::max(k_latent, v_latent)));
  blas = BlasPrefill::create(stream, kMaxPrefill, max_cols);
  for (int b = 1; b <= int(Buf::Logits); ++b) {
    const int64_t width =
        b == int(Buf::P) ? std::max(decode.p_width, prefill.p_width) : decode.width(Buf(b), c);
    bufs[b].stride = width;
    bufs[b].p = device_alloc<float>(size_t(kMaxPrefill) * size_t(width));
  }
  const size_t L = size_t(c.n_layers), T = size_t(ctx), kvd = size_t(c.kv_dim());
  if (kv == KvMode::Legacy) {
    lk = device_alloc<__half>(L * T * size_t(k_latent));
    lv = device_alloc<__half>(L * T * size_t(v_latent));
    k_all = device_alloc<float>(T * kvd);
    v_all = device_alloc<float>(T * kvd);
  } else {
    k_cache = device_alloc<__half>(size_t(slots) * L * T * kvd);
    v_cache = device_alloc<__half>(size_t(slots) * L * T * kvd);
  }
  if (kv == KvMode::Static) scores = device_alloc<float>(size_t(c.n_heads) * T);
  const size_t parts = size_t(kMaxPrefill) * size_t(c.n_heads) * size_t(attend_chunks(ctx));
  part_m = device_alloc<float>(parts);
  part_l = device_alloc<float>(parts);
  part_acc = device_alloc<float>(parts * size_t(c.head_dim));
  std::vector<double> freq;
  for (int set = 0; set < 3; ++set) {
    const std::vector<double> f = scalar::rope_inv_freq(c, set, ctx);
    freq.insert(freq.end(), f.begin(), f.end());
    mscale[set] = scalar::rope_mscale(c, set);
  }
  inv_freq = device_alloc<double>(freq.size());
  CK(cudaMemcpy(inv_freq, freq.data(), freq.size() * sizeof(double), cudaMemcpyHostToDevice));
}

void SessionMemory::release() noexcept {
  blas.reset();
  for (const DevVec& b : bufs) cudaFree(b.p);
  for (void* p : {(void*)lk, (void*)lv, (void*)k_all, (void*)v_all, (void*)k_cache, (void*)v_cache,
                  (void*)scores, (void*)part_m, (void*)part_l, (void*)part_acc, (void*)inv_freq})
    cudaFree(p);
  if (stream) cudaStreamDestroy(stream);
}

RopeArgs SessionMemory::rope(int set) const {
  const Config& c = cfg();
  RopeArgs r;
  r.inv_freq = inv_freq + size_t(set) * size_t(c.head_dim / 2);
  r.head_dim = c.head_dim;
  r.n_heads = c.n_heads;
  r.n_kv_heads = c.n_kv_heads;
  r.mscale = mscale[set];
  return r;
}

namespace {

Gate gate_of(Activation a) {
  return a == Activation::GeluTanh ? Gate::GeluTanh : Gate::Silu;
}

// The last step of op `op` at or before step i (static KV's Softmax and Mix
// take their Scores' scale and window; a Merge, or a product that merges,
// its Attend's window), as the scalar plan executor reads them.
const Step& last_of(const Plan& p, size_t i, Op op) {
  for (size_t k = i + 1; k-- > 0;)
    if (p.steps[k].op == op) return p.steps[k];
  LR_ASSERT(false);
  return p.steps[i];
}

// The products of a Linear step: one launch (GEMV, the own GEMM or cuBLAS),
// or a batch's (launch_batch_products). Returns the kernels launched.
int64_t linear(const SessionMemory& m, const Plan& p, size_t i, const StepCall& c, int nt,
               int64_t row, bool head) {
  const Step& L = p.steps[i];
  const Config& cf = m.cfg();
  auto v = [&](Buf x) { return x == Buf::None ? DevVec{} : m.buf(x, row); };
  GemvArgs a;
  a.eps = cf.rms_eps;
  static_assert(kMaxJobs == kMaxStepJobs);
  LR_ASSERT(L.jobs.size() <= size_t(kMaxJobs) && !L.silu_mul);  // plan_forward checks
  bool merges = false;
  for (const Job& j : L.jobs) {
    LR_ASSERT(!j.rope && !j.append && !j.head_norm);  // CPU folds
    LR_ASSERT(j.scale == 1.f || !j.accumulate);       // (only the output head scales)
    GemvJob& g = a.job[a.n_jobs++];
    g.m = m.dw->matrix(*j.m);
    g.in = v(j.in);
    g.in2 = v(j.in2);
    g.act = gate_of(j.act);
    g.out = v(j.out);
    g.in_off = j.in_off;
    g.out_off = j.out_off;
    g.norm = j.norm ? m.dw->vector(*j.norm) : nullptr;
    g.merge = j.merge_in;
    merges |= j.merge_in;
    g.accumulate = j.accumulate || j.sum;  // out += M x either way (then scaled: a sum's row)
    g.bias = j.bias ? m.dw->vector(*j.bias) : nullptr;
    g.scale = j.scale;
    g.source = j.pivots ? m.dw->source(*j.pivots) : nullptr;
    g.out_rows = j.rows();
  }
  a.merge = {m.part_m,
             m.part_l,
             m.part_acc,
             attend_chunks(m.ctx),
             cf.head_dim,
             c.pos0,
             merges ? last_of(p, i, Op::Attend).window : 0};
  // cuBLAS computes whole matrices: a pivoted product runs on the own GEMM.
  const bool pivoted =
      std::any_of(L.jobs.begin(), L.jobs.end(), [](const Job& j) { return j.pivots; });
  if (nt > 1 && m.blas && !c.batch && !pivoted) {
    m.blas->products(a, nt, L.name);
    return 1;
  }
  cudaError_t err;
  int64_t launched = 1;
  if (c.batch) {  // the head on the last row only: that row's kind
    const int nd = head ? int(row < c.n_decode) : c.n_decode;
    err = launch_batch_products(m.stream, a, nt, nd);
    launched = batch_product_launches(nt, nd);
  } else {
    err = launch_gemv(m.stream, a, nt);
  }
  if (err != cudaSuccess)
    fail("CUDA: launching {} ({}) failed: {}", L.name, op_name(L.op), cudaGetErrorString(err));
  return launched;
}

// Split-K attention over layer l's cache (or the legacy rebuild) as the Attend step s runs it.
AttendArgs attend_args(const SessionMemory& m, const Step& s, size_t layer) {
  const Config& c = m.cfg();
  AttendArgs att;
  const size_t kv_layer = layer * size_t(m.ctx) * size_t(c.kv_dim());
  att.k = m.k_cache ? m.k_cache + kv_layer : nullptr;
  att.v = m.v_cache ? m.v_cache + kv_layer : nullptr;
  if (m.kv == KvMode::Legacy) {
    att.k = m.k_all;
    att.v = m.v_all;
    att.f32 = true;
  }
  att.kv_dim = c.kv_dim();
  att.head_dim = c.head_dim;
  att.n_heads = c.n_heads;
  att.n_kv_heads = c.n_kv_heads;
  att.chunks = attend_chunks(m.ctx);
  att.scale = s.scale;
  att.window = s.window;
  att.part_m = m.part_m;
  att.part_l = m.part_l;
  att.part_acc = m.part_acc;
  return att;
}

}  // namespace

int64_t launch_step(const SessionMemory& m, const Plan& p, size_t i, const StepCall& c) {
  const Step& L = p.steps[i];
  const Config& cf = m.cfg();
  const bool head = c.head_last && L.layer < 0 && L.op != Op::Embed;
  const int nt = head ? 1 : c.n, n = c.n;
  const int64_t row = head ? n - 1 : 0;
  if (L.op == Op::Linear) return linear(m, p, i, c, nt, row, head);
  auto v = [&](Buf x) { return x == Buf::None ? DevVec{} : m.buf(x, row); };
  const size_t layer = size_t(std::max(L.layer, 0));
  const size_t kv_layer = layer * size_t(m.ctx) * size_t(cf.kv_dim());
  const CacheRef cache{m.k_cache ? m.k_cache + kv_layer : nullptr,
                       m.v_cache ? m.v_cache + kv_layer : nullptr, cf.kv_dim()};
  const cudaStream_t s = m.stream;
  cudaError_t err = cudaSuccess;
  switch (L.op) {
    case Op::Embed:
      err = launch_embed(s, c.tokens, n, m.dw->matrix(m.weights->tok_embd), v(Buf::X), L.scale);
      break;
    case Op::RmsNorm:  // no norm (a block without a pre-norm): a copy
      err = launch_rms_norm(s, nt, v(L.a), v(L.b), L.norm ? m.dw->vector(*L.norm) : nullptr,
                            L.width, cf.rms_eps);
      break;
    case Op::HeadNorm:  // heads, or all of q or k at once (OLMo 2)
      err = launch_head_norm(s, nt, v(L.a), int(p.width(L.a, cf) / L.width), m.dw->vector(*L.norm),
                             L.width, cf.rms_eps);
      break;
    case Op::Add:
      err = launch_add(s, nt, v(Buf::X), v(L.a), L.width, L.scale);
      break;
    case Op::SiluMul:
      err = launch_silu_mul(s, nt, v(Buf::G), v(Buf::U), L.width, gate_of(L.act));
      break;
    case Op::RopeAppend:
    case Op::Append:
      err = launch_rope_append(s, n, c.rows, m.rope(L.rope_set), v(Buf::Q), v(Buf::K), v(Buf::V),
                               cache, L.op == Op::RopeAppend);
      break;
    case Op::Rope:
      err = launch_rope(s, n, c.pos0, m.rope(L.rope_set), v(L.a), v(L.b));
      break;
    case Op::Scores:
    case Op::Softmax:
    case Op::Mix: {
      const Step& sc = last_of(p, i, Op::Scores);
      StaticArgs st{cache.k,       cache.v, cf.kv_dim(), cf.head_dim, cf.n_heads,
                    cf.n_kv_heads, m.ctx,   m.scores,    sc.scale,    sc.window};
      err = L.op == Op::Scores    ? launch_scores(s, c.pos0, st, v(Buf::Q))
            : L.op == Op::Softmax ? launch_softmax(s, c.pos0, st)
                                  : launch_mix(s, c.pos0, st, v(Buf::Att));
      break;
    }
    case Op::Attend: {
      AttendArgs att = attend_args(m, L, layer);
      if (L.rope_append) {
        const RopeArgs r = m.rope(L.rope_set);
        att.inv_freq = r.inv_freq;
        att.mscale = r.mscale;
        att.new_k = v(Buf::K);
        att.new_v = v(Buf::V);
      }
      err = launch_attend(s, n, c.rows, att, v(Buf::Q));
      break;
    }
    case Op::Merge:
      err =
          launch_merge(s, n, c.rows, attend_args(m, last_of(p, i, Op::Attend), layer), v(Buf::Att));
      break;
    case Op::LatentAppend:
    case Op::Reconstruct: {
      const LatentRef lat{m.lk ? m.lk + layer * size_t(m.ctx) * size_t(m.k_latent) : nullptr,
                          m.lv ? m.lv + layer * size_t(m.ctx) * size_t(m.v_latent) : nullptr,
                          m.k_latent,
                          m.v_latent,
                          L.latent.k_off,
                          L.latent.v_off,
                          L.latent.k_rank,
                          L.latent.v_rank};
      // (legacy KV runs with the model's RoPE only: plan_forward checks)
      err = L.op == Op::LatentAppend
                ? launch_latent_append(s, n, c.pos0, v(Buf::P), lat)
                : launch_reconstruct(s, n, c.pos0, m.ctx, lat, m.dw->matrix(*L.latent.uk),
                                     m.dw->matrix(*L.latent.uv), m.rope(0), m.k_all, m.v_all,
                                     cf.kv_dim());
      break;
    }
    case Op::Linear:
      break;
  }
  if (err != cudaSuccess)
    fail("CUDA: launching {} ({}) failed: {}", L.name, op_name(L.op), cudaGetErrorString(err));
  return 1;
}

}  // namespace lr::cuda
