// The CUDA backend: the model's plan (model/plan.h, arranged for the GPU by
// backend/cuda/plan.h) executed on one GPU, a kernel launch per step (each
// step's launch, over the session's device memory: backend/cuda/steps.h).
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
#include <cstring>

#include "backend/backend.h"
#include "backend/batch.h"
#include "backend/cuda/cuda.h"
#include "backend/cuda/cuda_api.h"
#include "backend/cuda/device_weights.h"
#include "backend/cuda/kernels.cuh"
#include "backend/cuda/plan.h"
#include "backend/cuda/steps.h"
#include "core/error.h"

namespace lr {

namespace cuda {
namespace {

static_assert(kAttendChunk == kAttendKeys, "plan and kernels split attention alike");

class CudaBackend final : public Backend {
 public:
  // cache_slots > 1: the session of a batch (CudaBatch), with that many KV
  // caches; its steps come through batch_step().
  CudaBackend(std::shared_ptr<const Weights> w, const BackendOptions& opt, int cache_slots = 1)
      : Backend(w, opt.ctx),
        exec_(opt.exec),
        plan_(plan_forward(*w, opt.exec)),
        prefill_(plan_forward(*w, prefill_options(opt.exec))),
        cache_slots_(cache_slots) {
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

  // A batch step of n rows (backend/batch.h): row t is token tok[t] at
  // position pos[t] of cache slot[t]; rows [0, n_decode) are decoded tokens,
  // the rest prompt tokens. The unfused plan runs once for all rows, its
  // products as launch_batch_products. logits[k] = the logits of row
  // head[k]. graph: n is a batch bucket of decode rows, run as the CUDA
  // graph captured for n rows at its first use.
  void batch_step(const int32_t* tok, const int* pos, const int* slot, int n, int n_decode,
                  const int* head, int n_head, bool graph, float* logits) {
    LR_ASSERT(n >= 1 && n <= kMaxPrefill && cache_slots_ > 1 && n_decode >= 0 && n_decode <= n);
    LR_ASSERT(!graph || n_decode == n);
    int* h = h_state_ + kBatchArea;
    std::copy(tok, tok + n, h);
    std::copy(pos, pos + n, h + kMaxPrefill);
    std::copy(slot, slot + n, h + 2 * kMaxPrefill);
    const Rows rows{nullptr, state_ + kBatchArea + kMaxPrefill, state_ + kBatchArea + 2 * kMaxPrefill,
                    int64_t(weights_->cfg.n_layers) * ctx_ * weights_->cfg.kv_dim()};
    const int vocab = weights_->cfg.vocab;
    auto copy_in = [&] {
      CK(cudaMemcpyAsync(state_ + kBatchArea, h, 3 * kMaxPrefill * sizeof(int),
                         cudaMemcpyHostToDevice, stream_));
    };
    if (graph) {
      LR_ASSERT(n <= kMaxBucket);
      cudaGraphExec_t& g = bucket_graphs_[n];
      if (!g) {
        cudaGraph_t cg = nullptr;
        CK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
        try {
          copy_in();
          issue(prefill_, 0, prefill_.steps.size(), n, Head::All, &rows, n_decode);
          CK(cudaMemcpyAsync(h_batch_logits_, buf(Buf::Logits, 0).p, size_t(n) * vocab * 4,
                             cudaMemcpyDeviceToHost, stream_));
        } catch (...) {
          cudaStreamEndCapture(stream_, &cg);
          if (cg) cudaGraphDestroy(cg);
          throw;
        }
        CK(cudaStreamEndCapture(stream_, &cg));
        const cudaError_t e = cudaGraphInstantiate(&g, cg, 0);
        cudaGraphDestroy(cg);
        CK(e);
      }
      CK(cudaGraphLaunch(g, stream_));
      ++counters_.dispatches;
      ++counters_.graph_launches;
      CK(cudaStreamSynchronize(stream_));
      for (int k = 0; k < n_head; ++k)
        std::memcpy(logits + size_t(k) * vocab, h_batch_logits_ + size_t(head[k]) * vocab,
                    size_t(vocab) * 4);
      return;
    }
    copy_in();
    // The head on the rows whose logits are asked for: often only the last (a prompt chunk).
    const Head head_rows = n_head == 0                           ? Head::None
                           : n_head == 1 && head[0] == n - 1 ? Head::Last
                                                                : Head::All;
    const int64_t launched =
        issue(prefill_, 0, prefill_.steps.size(), n, head_rows, &rows, n_decode);
    for (int k = 0; k < n_head; ++k)
      CK(cudaMemcpyAsync(logits + size_t(k) * vocab, buf(Buf::Logits, head[k]).p, size_t(vocab) * 4,
                         cudaMemcpyDeviceToHost, stream_));
    counters_.kernels += uint64_t(launched);
    counters_.dispatches += uint64_t(launched + 1 + n_head);
    CK(cudaStreamSynchronize(stream_));
  }
  // Buckets of decode rows a batch step runs as a graph (rows padded up to one).
  static constexpr int kMaxBucket = 16;
  const Plan& batch_plan() const { return prefill_; }

 private:
  // The session's device memory, pinned host buffers and state; release()
  // frees whatever of them exists (also after a failure half way).
  void allocate(const BackendOptions& opt) {
    require_dense_cache(opt, "the CUDA backend");
    dev_.allocate(weights_, exec_, ctx_, plan_, prefill_, cache_slots_);
    stream_ = dev_.stream;
    const Config& c = weights_->cfg;
    state_ = device_alloc<int>(size_t(kStateInts));
    CK(cudaMallocHost(&h_state_, size_t(kStateInts) * sizeof(int)));
    CK(cudaMallocHost(&h_logits_, size_t(c.vocab) * sizeof(float)));
    if (cache_slots_ > 1)
      CK(cudaMallocHost(&h_batch_logits_, size_t(kMaxBucket) * size_t(c.vocab) * sizeof(float)));
    mem_ = plan_memory(*weights_, plan_, exec_, ctx_, kMaxPrefill);
    CK(cudaDeviceSynchronize());  // the memsets and copies, before stream_ uses the buffers
  }

  void release() noexcept {
    for (cudaGraphExec_t g : graphs_) cudaGraphExecDestroy(g);
    for (cudaGraphExec_t g : bucket_graphs_)
      if (g) cudaGraphExecDestroy(g);
    cudaFree(state_);
    cudaFreeHost(h_state_);
    cudaFreeHost(h_logits_);
    cudaFreeHost(h_batch_logits_);
    dev_.release();
  }

  DevVec buf(Buf b, int64_t row) const { return dev_.buf(b, row); }

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
  // One sequence by default (its position and tokens in state_); a batch
  // step passes its rows, of which the first n_decode are decoded tokens,
  // and then every product runs as launch_batch_products (not cuBLAS, not the
  // one-row GEMV): a row's arithmetic is the same for any number of rows,
  // which is batch invariance.
  int64_t issue(const Plan& p, size_t b, size_t e, int n, Head head_mode,
                const Rows* batch = nullptr, int n_decode = 0) {
    StepCall call;
    call.n = n;
    call.head_last = head_mode == Head::Last;
    call.pos0 = state_;
    call.tokens = batch ? batch_tokens() : state_ + 1;
    call.rows = batch ? *batch : Rows{state_};
    call.batch = batch != nullptr;
    call.n_decode = n_decode;
    int64_t launched = 0;
    for (size_t i = b; i < e; ++i) {
      const Step& L = p.steps[i];
      if (head_mode == Head::None && L.layer < 0 && L.op != Op::Embed) continue;
      launched += launch_step(dev_, p, i, call);
    }
    return launched;
  }

  ExecOptions exec_;
  Plan plan_, prefill_;
  SessionMemory dev_;
  MemoryPlan mem_;
  cudaStream_t stream_ = nullptr;  // dev_'s
  // On the device: [pos0, tokens... (kMaxPrefill)], then a batch step's
  // tokens, positions and slots (kMaxPrefill each); h_state_ its pinned copy.
  static constexpr int kBatchArea = kMaxPrefill + 1, kStateInts = kBatchArea + 3 * kMaxPrefill;
  const int32_t* batch_tokens() const { return state_ + kBatchArea; }
  int cache_slots_ = 1;
  int* state_ = nullptr;
  int* h_state_ = nullptr;
  float* h_batch_logits_ = nullptr;  // pinned [kMaxBucket, vocab]: a bucket graph's logits
  cudaGraphExec_t bucket_graphs_[kMaxBucket + 1] = {};
  float* h_logits_ = nullptr;          // pinned [vocab]
  std::vector<cudaGraphExec_t> graphs_;
  std::vector<int64_t> graph_nodes_;  // nodes of each graph (kernels and copies)
  int64_t graph_kernels_ = 0;         // kernel nodes of all graphs
  ExecCounters counters_;
};

// Slots of a server on one GPU (backend/batch.h make_cuda_batch_backend).
class CudaBatch final : public BatchBackend {
 public:
  CudaBatch(std::shared_ptr<const Weights> w, const BackendOptions& opt, int slots,
            int max_step_tokens)
      : BatchBackend(w, slots, opt.ctx, max_step_tokens),
        core_(w, checked(opt, max_step_tokens), slots + 1) {  // + the padded rows' slot
    for (const Step& s : core_.batch_plan().steps)
      if (s.op != Op::Embed && s.op != Op::RmsNorm && s.op != Op::HeadNorm && s.op != Op::Linear &&
          s.op != Op::Add && s.op != Op::SiluMul && s.op != Op::RopeAppend && s.op != Op::Attend &&
          s.op != Op::Merge)
        fail("the CUDA batch runs the dense-KV plan; {} is a {} step", s.name, op_name(s.op));
    tok_.resize(size_t(std::max(max_step_tokens, CudaBackend::kMaxBucket)));
    pos_.resize(tok_.size());
    slot_.resize(tok_.size());
  }

  void step(const std::vector<Chunk>& chunks, float* logits) override {
    check_step(chunks);
    int n = 0, n_decode = 0;
    bool decode_only = true;
    head_.clear();
    for (const Chunk& c : chunks) {
      for (int t = 0; t < c.n; ++t, ++n) {
        tok_[size_t(n)] = c.tokens[t];
        pos_[size_t(n)] = n_past_[size_t(c.slot)] + t;
        slot_[size_t(n)] = c.slot;
      }
      if (c.logits) head_.push_back(n - 1);
      if (c.generated) n_decode = n;  // generated chunks come first (check_step)
      decode_only &= c.generated;
    }
    int rows = n;
    const bool bucket = decode_only && n <= CudaBackend::kMaxBucket;
    if (bucket) {
      while (rows & (rows - 1)) ++rows;  // the bucket: the next power of two
      for (int t = n; t < rows; ++t)     // padding: token 0 at position 0 of the spare slot
        tok_[size_t(t)] = 0, pos_[size_t(t)] = 0, slot_[size_t(t)] = slots();
    }
    const ExecCounters before = core_.counters();
    if (bucket) n_decode = rows;  // the padding rows decode too
    core_.batch_step(tok_.data(), pos_.data(), slot_.data(), rows, n_decode, head_.data(),
                     int(head_.size()), bucket, logits);
    for (const Chunk& c : chunks) n_past_[size_t(c.slot)] += c.n;
    last_ = {n, core_.counters().dispatches - before.dispatches, 0};
  }

  StepStats last_step() const override { return last_; }

 private:
  static const BackendOptions& checked(const BackendOptions& opt, int max_step_tokens) {
    if (opt.exec.kv != KvMode::Dense) fail("a batch runs with dense KV");
    if (max_step_tokens > kMaxPrefill)
      fail("the CUDA batch runs steps of up to {} tokens (asked for {})", kMaxPrefill,
           max_step_tokens);
    return opt;
  }

  CudaBackend core_;
  std::vector<int32_t> tok_;
  std::vector<int> pos_, slot_, head_;
  StepStats last_;
};

}  // namespace
}  // namespace cuda

std::unique_ptr<BatchBackend> make_cuda_batch_backend(std::shared_ptr<const Weights> w,
                                                      const BackendOptions& opt, int slots,
                                                      int max_step_tokens) {
  bool ok = false;
  const std::string info = cuda_device_info(&ok);
  if (!ok) fail("the CUDA backend needs a GPU: {}", info);
  return std::make_unique<cuda::CudaBatch>(std::move(w), opt, slots, max_step_tokens);
}

std::unique_ptr<Backend> make_cuda_backend(std::shared_ptr<const Weights> w,
                                           const BackendOptions& opt) {
  bool ok = false;
  const std::string info = cuda_device_info(&ok);
  if (!ok) fail("the CUDA backend needs a GPU: {}", info);
  return std::make_unique<cuda::CudaBackend>(std::move(w), opt);
}

}  // namespace lr
