// A CUDA session's device memory, and one step of a plan (model/plan.h) as
// its kernel launches over it: the CUDA executor's switch over the ops,
// which backend_cuda.cpp issues eagerly or captures into graphs. Every
// architecture is a configuration of the same steps (docs/architecture.md
// "Architectures"): a step's scale, window and RoPE set, a norm or none, the
// gate's activation, the output head's logit scale are the steps' fields,
// read here as the scalar plan executor (backend/ref/plan_scalar.cpp) reads them.
#pragma once

#include <memory>

#include "backend/backend.h"
#include "backend/cuda/device_weights.h"
#include "backend/cuda/kernels.cuh"
#include "backend/cuda/prefill_blas.h"
#include "model/plan.h"

namespace lr::cuda {

// The most tokens one call runs (a prefill block, a batch step).
constexpr int kMaxPrefill = 512;

// A session's device buffers (release() frees whatever of them exists, also
// after a failure half way).
struct SessionMemory {
  std::shared_ptr<const Weights> weights;
  std::shared_ptr<const DeviceWeights> dw;
  KvMode kv = KvMode::Dense;
  int ctx = 0;
  cudaStream_t stream = nullptr;
  DevVec bufs[int(Buf::Logits) + 1];                                // [kMaxPrefill, width] each
  __half *k_cache = nullptr, *v_cache = nullptr;                    // [slots][layer][ctx][kv_dim]
  __half *lk = nullptr, *lv = nullptr;                              // legacy: the latents
  float *k_all = nullptr, *v_all = nullptr;                         // legacy: the history rebuilt
  float* scores = nullptr;                                          // static KV: [n_heads, ctx]
  float *part_m = nullptr, *part_l = nullptr, *part_acc = nullptr;  // split-K partials
  // The RoPE sets (model/scalar_ops.h rope_inv_freq at the session's
  // context: LongRoPE's factors depend on it), [3, head_dim / 2], and their mscale.
  double* inv_freq = nullptr;
  double mscale[3] = {1, 1, 1};
  int64_t k_latent = 0, v_latent = 0;  // legacy: the latent cache's row widths
  std::unique_ptr<BlasPrefill> blas;   // null: prefill products on the own GEMM

  // Allocates every buffer the plans need for `slots` caches; throws lr::Error.
  void allocate(std::shared_ptr<const Weights> w, const ExecOptions& e, int ctx, const Plan& decode,
                const Plan& prefill, int slots);
  void release() noexcept;

  const Config& cfg() const { return weights->cfg; }
  DevVec buf(Buf b, int64_t row) const {
    DevVec v = bufs[int(b)];
    v.p += row * v.stride;
    return v;
  }
  RopeArgs rope(int set) const;
};

// One call of a plan's steps: n rows, each a token at its position.
struct StepCall {
  int n = 1;
  bool head_last = false;           // the output head on the last row only
  const int* pos0 = nullptr;        // one sequence: the first row's position (device)
  const int32_t* tokens = nullptr;  // device
  Rows rows;                        // where each row sits (one sequence: pos0)
  bool batch = false;               // a batch step (backend/batch.h): products as
                                    // launch_batch_products, the first n_decode rows decoded
  int n_decode = 0;
};

// Launches step i of p; returns the kernels launched. Throws lr::Error naming the step.
int64_t launch_step(const SessionMemory& m, const Plan& p, size_t i, const StepCall& c);

}  // namespace lr::cuda
