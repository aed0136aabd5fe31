// The CUDA backend: the model's plan (model/plan.h, arranged for the GPU by
// backend/cuda/plan.h) executed on one GPU, a kernel launch per step.
//
// Weights are uploaded once per process (bf16, rows padded; every session of
// the same Weights shares them). A session owns its f16 KV cache, activation
// buffers and split-K partials. Decode runs the plan for one token:
//   per-op     every launch issued eagerly (kernels + 2 copies per token)
//   per-layer  each layer's launches captured once as a CUDA graph, replayed
//   per-token  the whole token (copy in, embedding .. logits, copy out) one graph
// Capture policy: graphs are captured at the first decode step of a session
// and replayed for every later one; nothing is re-captured as the cache
// grows, because the position lives in device memory (copied in by the
// graph's first node from pinned host memory) and every kernel covers the
// whole context with blocks that exit past the current position.
// Prefill runs the unfused plan eagerly in blocks of up to kMaxPrefill tokens;
// its products run on tensor cores through cuBLAS (each f32 input split in
// two bf16 parts, W hi + W lo, f32 accumulation and output), or on the own
// tiled f32 kernel with LOWRANK_CUDA_PREFILL=own (and where cuBLAS cannot start).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>

#include "backend/backend.h"
#include "backend/cuda/cuda_api.h"
#include "backend/cuda/kernels.cuh"
#include "backend/cuda/plan.h"
#include "backend/cuda/prefill_blas.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/half.h"
#include "model/scalar_ops.h"

namespace lr {

namespace cuda {
namespace {

constexpr int kMaxPrefill = 512;
static_assert(kAttendChunk == kAttendKeys, "plan and kernels split attention alike");

void check(cudaError_t e, const char* what, const char* file, int line) {
  if (e != cudaSuccess)
    fail("CUDA: {} failed ({}:{}): {}", what, file, line, cudaGetErrorString(e));
}
#define CK(x) check((x), #x, __FILE__, __LINE__)

template <typename T>
T* device_alloc(size_t n) {
  void* p = nullptr;
  CK(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)));
  CK(cudaMemset(p, 0, std::max<size_t>(n, 1) * sizeof(T)));
  return static_cast<T*>(p);
}

// Weights on the device, shared by every session of the process.
struct DeviceWeights {
  std::weak_ptr<const Weights> host;  // the cache entry is stale once these weights are gone
  WeightLayout layout;
  __nv_bfloat16* w = nullptr;
  float* vectors = nullptr;                          // the norms and the biases, f32
  std::map<const uint8_t*, const float*> vector_at;  // host vector -> device copy
  double* inv_freq = nullptr;                        // [head_dim / 2]
  int32_t* sources = nullptr;  // the pivoted products' source rows (model/weights.h Pivots)
  std::map<const Pivots*, const int32_t*> source_at;

  ~DeviceWeights() {
    cudaFree(w);
    cudaFree(vectors);
    cudaFree(inv_freq);
    cudaFree(sources);
  }
  DevMatrix matrix(const Matrix& m) const {
    return {w + layout.offset_of(m), m.rows, m.cols, padded_cols(m.cols)};
  }
  const float* vector(const Matrix& m) const {  // a norm or a bias
    auto it = vector_at.find(m.ptr());
    LR_ASSERT(it != vector_at.end());
    return it->second;
  }
  const int32_t* source(const Pivots& p) const {
    auto it = source_at.find(&p);
    LR_ASSERT(it != source_at.end());
    return it->second;
  }
};

std::shared_ptr<const DeviceWeights> upload(std::shared_ptr<const Weights> host) {
  auto d = std::make_shared<DeviceWeights>();
  const Weights& W = *host;
  const Config& c = W.cfg;
  d->host = host;
  d->layout = plan_weights(W);
  d->w = device_alloc<__nv_bfloat16>(d->layout.elements);
  std::vector<uint16_t> stage;
  std::vector<float> row;
  for (const WeightLayout::Range& r : d->layout.ranges) {
    const int64_t rows = r.rows(), ld = padded_cols(r.cols);
    const size_t eb = r.dtype == DType::F32 ? 4 : 2;
    stage.assign(size_t(rows) * size_t(ld), 0);
    row.resize(size_t(r.cols));
    for (int64_t i = 0; i < rows; ++i) {
      const uint8_t* src = r.begin + uint64_t(i) * uint64_t(r.cols) * eb;
      uint16_t* dst = &stage[size_t(i) * size_t(ld)];
      if (r.dtype == DType::BF16) {
        std::memcpy(dst, src, size_t(r.cols) * 2);
      } else {
        dequantize(r.dtype, src, row.data(), r.cols);
        for (int64_t j = 0; j < r.cols; ++j) dst[j] = f32_to_bf16(row[size_t(j)]);
      }
    }
    CK(cudaMemcpy(d->w + r.offset, stage.data(), stage.size() * 2, cudaMemcpyHostToDevice));
  }
  std::vector<const Matrix*> vectors = {&W.out_norm};
  for (const Layer& L : W.layers) {
    vectors.push_back(&L.attn_norm);
    vectors.push_back(&L.ffn_norm);
  }
  for_each_linear(W, [&](const WeightSpec&, int, const Linear& lin) {
    if (lin.b.rows) vectors.push_back(&lin.b);
  });
  size_t total = 0;
  for (const Matrix* v : vectors) {
    LR_ASSERT(v->rows == 1 && v->dtype == DType::F32);
    total += size_t(v->cols);
  }
  d->vectors = device_alloc<float>(total);
  float* dst = d->vectors;
  for (const Matrix* v : vectors) {
    CK(cudaMemcpy(dst, v->f32(), size_t(v->cols) * 4, cudaMemcpyHostToDevice));
    d->vector_at[v->ptr()] = dst;
    dst += v->cols;
  }
  std::vector<const Pivots*> pivoted;
  size_t sources = 0;
  for_each_linear(W, [&](const WeightSpec&, int, const Linear& lin) {
    if (lin.pivoted()) pivoted.push_back(lin.pivots.get()), sources += lin.pivots->source.size();
  });
  if (sources) {
    d->sources = device_alloc<int32_t>(sources);
    int32_t* to = d->sources;
    for (const Pivots* p : pivoted) {
      CK(cudaMemcpy(to, p->source.data(), p->source.size() * 4, cudaMemcpyHostToDevice));
      d->source_at[p] = to;
      to += p->source.size();
    }
  }
  const std::vector<double> inv = scalar::rope_inv_freq(c);
  d->inv_freq = device_alloc<double>(inv.size());
  CK(cudaMemcpy(d->inv_freq, inv.data(), inv.size() * sizeof(double), cudaMemcpyHostToDevice));
  // The copies above ran on the legacy default stream, which sessions' non-blocking streams do not
  // wait for.
  CK(cudaDeviceSynchronize());
  return d;
}

// The device copy of `w`: uploaded once and kept while the host weights live
// (sessions come and go: bench makes one per run), dropped once they are gone.
std::shared_ptr<const DeviceWeights> device_weights(const std::shared_ptr<const Weights>& w) {
  static std::mutex mu;
  static std::map<const Weights*, std::shared_ptr<const DeviceWeights>> cache;
  std::lock_guard<std::mutex> lock(mu);
  for (auto it = cache.begin(); it != cache.end();)
    it = it->second->host.expired() ? cache.erase(it) : std::next(it);
  auto& d = cache[w.get()];
  if (!d) d = upload(w);
  return d;
}

class CudaBackend final : public Backend {
 public:
  CudaBackend(std::shared_ptr<const Weights> w, const BackendOptions& opt)
      : Backend(w, opt.ctx),
        exec_(opt.exec),
        plan_(plan_forward(*w, opt.exec)),
        prefill_(plan_forward(*w, prefill_options(opt.exec))) {
    try {
      allocate(opt);
    } catch (...) {  // a failure half way (out of memory, a bad option) leaks nothing
      release();
      throw;
    }
  }

  ~CudaBackend() override { release(); }

  const char* name() const override { return "cuda"; }

  void forward(const int32_t* tokens, int n, float* logits, bool all_logits) override {
    check_forward_args(tokens, n);
    if (n == 1) return decode(tokens[0], logits);
    const int vocab = weights_->cfg.vocab;
    for (int done = 0; done < n;) {
      const int m = std::min(kMaxPrefill, n - done);
      h_state_[0] = n_past_;
      std::memcpy(h_state_ + 1, tokens + done, size_t(m) * sizeof(int));
      CK(cudaMemcpyAsync(state_, h_state_, size_t(m + 1) * sizeof(int), cudaMemcpyHostToDevice,
                         stream_));
      const bool last = done + m == n;
      const Head head = all_logits ? Head::All : last ? Head::Last : Head::None;
      const int64_t k = issue(prefill_, 0, prefill_.steps.size(), m, head);
      counters_.kernels += uint64_t(k);
      counters_.dispatches += uint64_t(k) + 2;
      if (all_logits)
        CK(cudaMemcpyAsync(logits + size_t(done) * vocab, buf(Buf::Logits, 0).p,
                           size_t(m) * vocab * 4, cudaMemcpyDeviceToHost, stream_));
      else if (last)
        CK(cudaMemcpyAsync(logits, buf(Buf::Logits, m - 1).p, size_t(vocab) * 4,
                           cudaMemcpyDeviceToHost, stream_));
      CK(cudaStreamSynchronize(stream_));  // before h_state_ is reused
      n_past_ += m;
      done += m;
    }
  }

  ExecCounters counters() const override { return counters_; }
  void reset_counters() override { counters_ = {}; }
  uint64_t cache_bytes() const override { return mem_.kv; }

 private:
  // The session's device buffers, stream and cuBLAS handle; release() frees
  // whatever of them exists (also after a failure half way).
  void allocate(const BackendOptions& opt) {
    const auto& w = weights_;
    if (opt.keys.type != kv::KeyType::F32)
      fail("the CUDA backend keeps an f16 KV cache; --cache-type-k {} runs on the CPU only",
           kv::key_type_name(opt.keys.type));
    const Config& c = w->cfg;
    dw_ = device_weights(w);
    CK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    int64_t max_cols = c.ffn_dim;
    for (const Plan* p : {&plan_, &prefill_})
      for (const Step& L : p->steps)
        for (const Job& j : L.jobs) max_cols = std::max(max_cols, j.m->cols);
    const int64_t max_latent = std::max(plan_.k_latent, plan_.v_latent);
    CK(prepare_kernels(max_cols, max_latent));
    blas_ = BlasPrefill::create(stream_, kMaxPrefill, max_cols);
    const int64_t widths[] = {0,          c.dim,     c.dim,
                              c.dim,      c.q_dim(), c.kv_dim(),
                              c.kv_dim(), c.q_dim(), std::max(plan_.p_width, prefill_.p_width),
                              c.ffn_dim,  c.ffn_dim, c.vocab};
    for (int b = 1; b <= int(Buf::Logits); ++b) {
      bufs_[b].stride = widths[b];
      bufs_[b].p = device_alloc<float>(size_t(kMaxPrefill) * size_t(widths[b]));
    }
    const size_t L = size_t(c.n_layers), T = size_t(ctx_), kv = size_t(c.kv_dim());
    if (exec_.kv == KvMode::Legacy) {
      lk_ = device_alloc<__half>(L * T * size_t(plan_.k_latent));
      lv_ = device_alloc<__half>(L * T * size_t(plan_.v_latent));
      k_all_ = device_alloc<float>(T * kv);
      v_all_ = device_alloc<float>(T * kv);
    } else {
      k_cache_ = device_alloc<__half>(L * T * kv);
      v_cache_ = device_alloc<__half>(L * T * kv);
    }
    if (exec_.kv == KvMode::Static) scores_ = device_alloc<float>(size_t(c.n_heads) * T);
    const size_t slots = size_t(kMaxPrefill) * size_t(c.n_heads) * size_t(attend_chunks(ctx_));
    part_m_ = device_alloc<float>(slots);
    part_l_ = device_alloc<float>(slots);
    part_acc_ = device_alloc<float>(slots * size_t(c.head_dim));
    state_ = device_alloc<int>(size_t(kMaxPrefill) + 1);
    CK(cudaMallocHost(&h_state_, (size_t(kMaxPrefill) + 1) * sizeof(int)));
    CK(cudaMallocHost(&h_logits_, size_t(c.vocab) * sizeof(float)));
    mem_ = plan_memory(*w, plan_, exec_, ctx_, kMaxPrefill);
    CK(cudaDeviceSynchronize());  // the memsets of device_alloc, before stream_ uses the buffers
  }

  void release() noexcept {
    blas_.reset();
    for (cudaGraphExec_t g : graphs_) cudaGraphExecDestroy(g);
    for (const DevVec& b : bufs_) cudaFree(b.p);
    for (void* p :
         {(void*)lk_, (void*)lv_, (void*)k_all_, (void*)v_all_, (void*)k_cache_, (void*)v_cache_,
          (void*)scores_, (void*)part_m_, (void*)part_l_, (void*)part_acc_, (void*)state_})
      cudaFree(p);
    cudaFreeHost(h_state_);
    cudaFreeHost(h_logits_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  DevVec buf(Buf b, int64_t row) const {
    DevVec v = bufs_[int(b)];
    v.p += row * v.stride;
    return v;
  }

  void decode(int32_t token, float* logits) {
    h_state_[0] = n_past_;
    h_state_[1] = token;
    const int vocab = weights_->cfg.vocab;
    const int64_t kernels = int64_t(plan_.steps.size());
    if (exec_.unit == ExecUnit::PerOp) {
      copy_in();
      issue(plan_, 0, plan_.steps.size(), 1, Head::All);
      copy_out();
      counters_.dispatches += uint64_t(kernels) + 2;
      counters_.kernels += uint64_t(kernels);
    } else {
      // Captured at the first step (launch errors surface there, naming the
      // launch; a failed capture leaves no graph behind), replayed ever after.
      if (graphs_.empty()) capture();
      for (cudaGraphExec_t g : graphs_) CK(cudaGraphLaunch(g, stream_));
      counters_.dispatches += graphs_.size();
      counters_.graph_launches += graphs_.size();
      for (int64_t n : graph_nodes_) counters_.graph_nodes += uint64_t(n);
      counters_.kernels += uint64_t(graph_kernels_);  // the kernel nodes read back from the graphs
    }
    CK(cudaStreamSynchronize(stream_));
    std::memcpy(logits, h_logits_, size_t(vocab) * sizeof(float));
    ++n_past_;
  }

  void copy_in() {
    CK(cudaMemcpyAsync(state_, h_state_, 2 * sizeof(int), cudaMemcpyHostToDevice, stream_));
  }
  void copy_out() {
    CK(cudaMemcpyAsync(h_logits_, buf(Buf::Logits, 0).p, size_t(weights_->cfg.vocab) * 4,
                       cudaMemcpyDeviceToHost, stream_));
  }

  // One graph per region (per-layer) or one for the whole token. A failure
  // leaves no graph behind (the next step captures again) and names the cause.
  void capture() {
    try {
      capture_regions();
    } catch (...) {
      cudaGraph_t g = nullptr;
      cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
      if (cudaStreamIsCapturing(stream_, &st) == cudaSuccess && st != cudaStreamCaptureStatusNone) {
        cudaStreamEndCapture(stream_, &g);
        if (g) cudaGraphDestroy(g);
      }
      for (cudaGraphExec_t e : graphs_) cudaGraphExecDestroy(e);
      graphs_.clear();
      graph_nodes_.clear();
      graph_kernels_ = 0;
      throw;
    }
  }
  void capture_regions() {
    std::vector<std::pair<size_t, size_t>> regions;
    if (exec_.unit == ExecUnit::PerToken) {
      regions.push_back({0, plan_.steps.size()});
    } else {
      for (size_t r = 0; r < plan_.region_begin.size(); ++r)
        regions.push_back({plan_.region_begin[r], r + 1 < plan_.region_begin.size()
                                                      ? plan_.region_begin[r + 1]
                                                      : plan_.steps.size()});
    }
    for (size_t r = 0; r < regions.size(); ++r) {
      cudaGraph_t g = nullptr;
      CK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
      if (r == 0) copy_in();
      issue(plan_, regions[r].first, regions[r].second, 1, Head::All);
      if (r + 1 == regions.size()) copy_out();
      CK(cudaStreamEndCapture(stream_, &g));
      size_t nodes = 0;
      CK(cudaGraphGetNodes(g, nullptr, &nodes));
      std::vector<cudaGraphNode_t> list(nodes);
      CK(cudaGraphGetNodes(g, list.data(), &nodes));
      int64_t kernels = 0;
      for (cudaGraphNode_t node : list) {
        cudaGraphNodeType type;
        CK(cudaGraphNodeGetType(node, &type));
        kernels += type == cudaGraphNodeTypeKernel;
      }
      graph_nodes_.push_back(int64_t(nodes));
      graph_kernels_ += kernels;
      cudaGraphExec_t e = nullptr;
      CK(cudaGraphInstantiate(&e, g, 0));
      CK(cudaGraphDestroy(g));
      graphs_.push_back(e);
    }
  }

  // The output head in a call of n tokens: on every token, the last, or none
  // (a prefill block before the last one, when only the last logits are asked for).
  enum class Head { All, Last, None };

  // Issues launches [b, e) of `p` for n tokens. Returns the kernels launched.
  int64_t issue(const Plan& p, size_t b, size_t e, int n, Head head_mode) {
    int64_t launched = 0;
    const Config& c = weights_->cfg;
    const int* pos0 = state_;
    const int32_t* toks = state_ + 1;
    const RopeArgs rope{dw_->inv_freq, c.head_dim, c.n_heads, c.n_kv_heads};
    for (size_t i = b; i < e; ++i) {
      const Step& L = p.steps[i];
      const bool in_head = L.layer < 0 && L.op != Op::Embed;
      if (in_head && head_mode == Head::None) continue;
      const bool head = in_head && head_mode == Head::Last;
      ++launched;
      const int nt = head ? 1 : n;
      const int64_t row = head ? n - 1 : 0;
      auto v = [&](Buf x) { return x == Buf::None ? DevVec{} : buf(x, row); };
      const size_t layer = size_t(std::max(L.layer, 0));
      const size_t kv_layer = layer * size_t(ctx_) * size_t(c.kv_dim());
      const CacheRef cache{k_cache_ + (k_cache_ ? kv_layer : 0),
                           v_cache_ + (v_cache_ ? kv_layer : 0), c.kv_dim()};
      AttendArgs att;
      att.k = cache.k;
      att.v = cache.v;
      att.kv_dim = c.kv_dim();
      att.head_dim = c.head_dim;
      att.n_heads = c.n_heads;
      att.n_kv_heads = c.n_kv_heads;
      att.chunks = attend_chunks(ctx_);
      att.part_m = part_m_;
      att.part_l = part_l_;
      att.part_acc = part_acc_;
      if (exec_.kv == KvMode::Legacy) {
        att.k = k_all_;
        att.v = v_all_;
        att.f32 = true;
      }
      const StaticArgs st{cache.k,   cache.v,      c.kv_dim(), c.head_dim,
                          c.n_heads, c.n_kv_heads, ctx_,       scores_};
      const LatentRef lat{lk_ + (lk_ ? layer * size_t(ctx_) * size_t(p.k_latent) : 0),
                          lv_ + (lv_ ? layer * size_t(ctx_) * size_t(p.v_latent) : 0),
                          p.k_latent,
                          p.v_latent,
                          L.latent.k_off,
                          L.latent.v_off,
                          L.latent.k_rank,
                          L.latent.v_rank};
      cudaError_t err = cudaSuccess;
      switch (L.op) {
        case Op::Embed:
          err = launch_embed(stream_, toks, n, dw_->matrix(weights_->tok_embd), v(Buf::X));
          break;
        case Op::RmsNorm:
          err = launch_rms_norm(stream_, nt, v(L.a), v(L.b), dw_->vector(*L.norm), L.width,
                                c.rms_eps);
          break;
        case Op::Linear: {
          GemvArgs a;
          a.eps = c.rms_eps;
          static_assert(kMaxJobs == kMaxStepJobs);
          LR_ASSERT(L.jobs.size() <= size_t(kMaxJobs) && !L.silu_mul);  // plan_forward checks
          for (const Job& j : L.jobs) {
            LR_ASSERT(!j.rope && !j.append);  // CPU folds
            GemvJob& g = a.job[a.n_jobs++];
            g.m = dw_->matrix(*j.m);
            g.in = v(j.in);
            g.in2 = v(j.in2);
            g.out = v(j.out);
            g.in_off = j.in_off;
            g.out_off = j.out_off;
            g.norm = j.norm ? dw_->vector(*j.norm) : nullptr;
            g.merge = j.merge_in;
            g.accumulate = j.accumulate || j.sum;  // out += M x either way
            g.bias = j.bias ? dw_->vector(*j.bias) : nullptr;
            g.source = j.pivots ? dw_->source(*j.pivots) : nullptr;
            g.out_rows = j.rows();
          }
          a.merge = {part_m_, part_l_, part_acc_, attend_chunks(ctx_), c.head_dim, pos0};
          // cuBLAS computes whole matrices: a pivoted product runs on the own GEMM.
          const bool pivoted =
              std::any_of(L.jobs.begin(), L.jobs.end(), [](const Job& j) { return j.pivots; });
          if (nt > 1 && blas_ && !pivoted) {
            blas_->products(a, nt, L.name);
            break;
          }
          err = launch_gemv(stream_, a, nt);
          break;
        }
        case Op::Add:
          err = launch_add(stream_, nt, v(Buf::X), v(L.a), L.width);
          break;
        case Op::SiluMul:
          err = launch_silu_mul(stream_, nt, v(Buf::G), v(Buf::U), L.width);
          break;
        case Op::RopeAppend:
          err = launch_rope_append(stream_, n, pos0, rope, v(Buf::Q), v(Buf::K), v(Buf::V), cache,
                                   true);
          break;
        case Op::Rope:
          err = launch_rope(stream_, n, pos0, rope, v(L.a), v(L.b));
          break;
        case Op::Append:
          err = launch_rope_append(stream_, n, pos0, rope, v(Buf::Q), v(Buf::K), v(Buf::V), cache,
                                   false);
          break;
        case Op::Scores:
          err = launch_scores(stream_, pos0, st, v(Buf::Q));
          break;
        case Op::Softmax:
          err = launch_softmax(stream_, pos0, st);
          break;
        case Op::Mix:
          err = launch_mix(stream_, pos0, st, v(Buf::Att));
          break;
        case Op::Attend:
          if (L.rope_append) {
            att.inv_freq = dw_->inv_freq;
            att.new_k = v(Buf::K);
            att.new_v = v(Buf::V);
          }
          err = launch_attend(stream_, n, pos0, att, v(Buf::Q));
          break;
        case Op::Merge:
          err = launch_merge(stream_, n, pos0, att, v(Buf::Att));
          break;
        case Op::LatentAppend:
          err = launch_latent_append(stream_, n, pos0, v(Buf::P), lat);
          break;
        case Op::Reconstruct: {
          LatentRef r = lat;
          r.k_rank = L.latent.k_rank;
          r.v_rank = L.latent.v_rank;
          err = launch_reconstruct(stream_, n, pos0, ctx_, r, dw_->matrix(*L.latent.uk),
                                   dw_->matrix(*L.latent.uv), rope, k_all_, v_all_, c.kv_dim());
          break;
        }
      }
      if (err != cudaSuccess)
        fail("CUDA: launching {} ({}) failed: {}", L.name, op_name(L.op), cudaGetErrorString(err));
    }
    return launched;
  }

  ExecOptions exec_;
  Plan plan_, prefill_;
  std::shared_ptr<const DeviceWeights> dw_;
  MemoryPlan mem_;
  cudaStream_t stream_ = nullptr;
  DevVec bufs_[int(Buf::Logits) + 1];
  __half *k_cache_ = nullptr, *v_cache_ = nullptr, *lk_ = nullptr, *lv_ = nullptr;
  float *k_all_ = nullptr, *v_all_ = nullptr, *scores_ = nullptr;
  float *part_m_ = nullptr, *part_l_ = nullptr, *part_acc_ = nullptr;
  std::unique_ptr<BlasPrefill> blas_;  // null: prefill products on the own GEMM
  int* state_ = nullptr;               // [pos0, tokens...] on the device
  int* h_state_ = nullptr;             // pinned
  float* h_logits_ = nullptr;          // pinned [vocab]
  std::vector<cudaGraphExec_t> graphs_;
  std::vector<int64_t> graph_nodes_;  // nodes of each graph (kernels and copies)
  int64_t graph_kernels_ = 0;         // kernel nodes of all graphs
  ExecCounters counters_;
};

}  // namespace
}  // namespace cuda

std::string cuda_device_info(bool* available) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (available) *available = e == cudaSuccess && n > 0;
  if (e != cudaSuccess) return fmt::format("no CUDA device ({})", cudaGetErrorString(e));
  if (n == 0) return "no CUDA device";
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, 0) != cudaSuccess)
    return "a CUDA device whose properties cannot be read";
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  return fmt::format("{}, {:.0f} GiB, sm_{}{}, {} SMs, driver {}.{}, runtime {}.{}", p.name,
                     double(p.totalGlobalMem) / double(1ull << 30), p.major, p.minor,
                     p.multiProcessorCount, driver / 1000, driver % 1000 / 10, runtime / 1000,
                     runtime % 1000 / 10);
}

double cuda_read_bandwidth_gbs() {
  bool ok = false;
  const std::string info = cuda_device_info(&ok);
  if (!ok) fail("no GPU to measure: {}", info);
  using namespace cuda;
#ifdef LOWRANK_CUDA_EMU
  const int64_t n = (int64_t(64) << 20) / 16;  // the emulator measures the CPU: 64 MiB will do
#else
  const int64_t n = (int64_t(2) << 30) / 16;  // float4s in 2 GiB
#endif
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int blocks = sms * 4;
  float4* x = device_alloc<float4>(size_t(n));
  float* out = device_alloc<float>(size_t(blocks));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  double best = 0;
  for (int rep = 0; rep < 6; ++rep) {
    CK(cudaEventRecord(a));
    CK(launch_read_sum(nullptr, x, n, out, blocks));
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    if (rep > 0)
      best = std::max(best, double(n) * 16 / (double(ms) * 1e6));  // the first pass warms up
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaFree(x);
  cudaFree(out);
  return best;
}

std::unique_ptr<Backend> make_cuda_backend(std::shared_ptr<const Weights> w,
                                           const BackendOptions& opt) {
  bool ok = false;
  const std::string info = cuda_device_info(&ok);
  if (!ok) fail("the CUDA backend needs a GPU: {}", info);
  return std::make_unique<cuda::CudaBackend>(std::move(w), opt);
}

}  // namespace lr
