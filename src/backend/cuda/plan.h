// What the CUDA backend needs beyond the model's plan (model/plan.h): the
// plan arranged for the GPU with the kernels' limits checked, what one decode
// token issues per execution unit, where each weight lives in the device's
// one bf16 buffer, and a session's device memory. Host-only code, unit tested
// on machines without a GPU (tests/model/test_cuda_plan.cpp); the executor
// (backend_cuda.cpp) turns each step into one kernel launch.
//
// One token (decode) or a block of tokens (prefill) runs the same plan; every
// kernel reads the positions from device memory, so one captured CUDA graph
// serves every decode step as the cache grows.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/plan_transforms.h"
#include "model/weights.h"

namespace lr::cuda {

// The rung's plan for the GPU (model/plan_transforms.h derive): every
// architecture's configuration of it (model/plan.h) runs. Throws lr::Error
// for what the GPU path does not run (head_dim other than 32, 64, 96, 128 or
// 256, more than 8 query heads per KV head, legacy KV with a dense k or v or
// over layers with a RoPE of their own, a product step of more than
// kMaxStepJobs matrices).
Plan plan_forward(const Weights& w, const ExecOptions& e);
// Matrices one product launch takes (kernels.cuh GemvArgs): q, k and v in
// the residual form are six, their quantized maps and input factors.
constexpr int kMaxStepJobs = 6;

// Split-K attention: blocks for a context (kAttendChunk keys each; the
// kernels' header says the same number).
constexpr int kAttendKeys = 256;
inline int attend_chunks(int ctx) {
  return (ctx + kAttendKeys - 1) / kAttendKeys;
}

// How one decode token is issued to the GPU.
struct LaunchStats {
  int64_t kernels = 0;  // kernel launches (or kernel nodes) per token
  int64_t memcpys = 0;  // token/position in, logits out
  int64_t host_launches =
      0;               // what the host issues: kernels + memcpys eagerly, else graph launches
  int64_t graphs = 0;  // graphs captured (0 eager)
  std::vector<int64_t> nodes_per_graph;
};
LaunchStats launch_stats(const Plan& p, ExecUnit unit);

// Where each host matrix lives in the device's one bf16 weight buffer: every
// distinct host allocation (by address range: a shared basis, a tied
// embedding, the views of a packed matrix) once, rows padded to kRowPad.
struct WeightLayout {
  struct Range {
    const uint8_t* begin = nullptr;  // host bytes [begin, end)
    const uint8_t* end = nullptr;
    int64_t cols = 0;
    DType dtype = DType::BF16;
    uint64_t offset = 0;  // bf16 elements into the device buffer
    int64_t rows() const {
      return int64_t(uint64_t(end - begin) / (uint64_t(cols) * (dtype == DType::F32 ? 4 : 2)));
    }
  };
  std::vector<Range> ranges;  // sorted by begin
  uint64_t elements = 0;      // bf16 elements of the buffer
  // Offset of matrix m's first row (bf16 elements); asserts m is in a range.
  uint64_t offset_of(const Matrix& m) const;
};
// Every matrix of the model (one layout serves every plan and session).
// Throws lr::Error for weights in a type the GPU path does not read (Q8_0).
WeightLayout plan_weights(const Weights& w);

// Device memory of a session (weights are counted once per process).
struct MemoryPlan {
  uint64_t weights = 0;   // bf16 matrices with rows padded to 8 elements, f32 norms
  uint64_t kv = 0;        // f16 K and V caches (legacy: f16 latents + f32 reconstruction scratch)
  uint64_t scratch = 0;   // activation buffers for max_tokens tokens
  uint64_t partials = 0;  // split-K attention partials
  uint64_t prefill_inputs = 0;  // prefill products' inputs as bf16 hi and lo (cuBLAS)
  uint64_t total() const { return weights + kv + scratch + partials + prefill_inputs; }
};
MemoryPlan plan_memory(const Weights& w, const Plan& p, const ExecOptions& e, int ctx,
                       int max_tokens);

// Rows of a device matrix are padded to this many bf16 elements (16 bytes).
constexpr int64_t kRowPad = 8;
inline int64_t padded_cols(int64_t cols) {
  return (cols + kRowPad - 1) / kRowPad * kRowPad;
}

}  // namespace lr::cuda
