// The CUDA backend's forward pass as a list of kernel launches, planned on the
// host from the weights' shapes and the ExecOptions (the same switches as the
// CPU decode plan: KV mode, packing, fusion, execution unit). Host-only code,
// so the launch accounting, capture regions and device memory sizes are unit
// tested on machines without a GPU (tests/model/test_cuda_plan.cpp); the
// executor (backend_cuda.cpp) turns each Launch into one kernel launch.
//
// One token (decode) or a block of tokens (prefill) runs the same plan; every
// kernel reads the positions from device memory, so one captured CUDA graph
// serves every decode step as the cache grows.
//
// Per layer, at the fastest settings (dense KV, packed, fused):
//   qkv_in    P = [Vq; Vk; Vv] rms_norm(x)            (norm fused into the GEMV)
//   qkv_out   q, k, v = Uq P_q, Uk P_k, Uv P_v         (one launch, three jobs)
//   attend    rope(q), rope(k); k, v -> cache[pos]; split-K partial softmax
//             over cache[0..pos]                       (rope and append fused)
//   o_in      P = Vo merge(partials); o_out  x += Uo P (merge, residual fused)
//   mlp_in    P = [Vgate; Vup] rms_norm(x)
//   mlp_out   g, u = Ugate P_g, Uup P_u
//   down_in   P = Vdown (silu(g) * u)                  (SiLU*mul fused)
//   down_out  x += Udown P
// A dense map is one GEMV job instead of the _in/_out pair.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/weights.h"

namespace lr::cuda {

// Device f32 vectors of a forward call, [n_tokens, width] each.
enum class Buf : uint8_t { None, X, H, Y, Q, K, V, Att, P, G, U, Logits };
const char* buf_name(Buf b);

enum class Op : uint8_t {
  Embed,         // X = tok_embd[token]
  RmsNorm,       // b = rms_norm(a) * norm
  Gemv,          // every job: out (+)= M in   (GEMM over the tokens in prefill)
  Add,           // X += a
  SiluMul,       // G = silu(G) * U
  RopeAppend,    // rope(Q), rope(K) at their positions; K, V -> cache
  Rope,          // static: rope(Q), rope(K)
  Append,        // static: K, V -> cache
  Scores,        // static: S[h, j] = q_h . k_j / sqrt(head_dim), j <= pos
  Softmax,       // static: S rows
  Mix,           // static: Att = S V
  Attend,        // split-K attention partials over the cache
  Merge,         // partials -> Att
  LatentAppend,  // legacy: the k and v latents (segments of P) -> latent cache
  Reconstruct,   // legacy: K_all = rope(Uk L_k), V_all = Uv L_v over the history
};
const char* op_name(Op o);

// One matrix of a Gemv launch: out[:, out_off + r] (+)= M[r, :] in[:, in_off + ...].
struct Job {
  const Matrix* m = nullptr;  // [rows, cols], host matrix (its device copy by address)
  Buf in = Buf::None;
  int64_t in_off = 0;
  Buf out = Buf::None;
  int64_t out_off = 0;
  const Matrix* norm = nullptr;  // fused: in = rms_norm(in) * norm (over the whole input row)
  Buf in2 = Buf::None;           // fused: in = silu(in) * in2
  bool merge_in = false;    // fused: in = the split-K attention partials merged (att unwritten)
  bool accumulate = false;  // fused residual: out += M in
};

struct Launch {
  Op op = Op::Gemv;
  int layer = -1;                    // -1: embedding or output head
  std::string name;                  // "blk.3.qkv_in", "output", ...
  std::vector<Job> jobs;             // Gemv
  const Matrix* norm = nullptr;      // RmsNorm
  Buf a = Buf::None, b = Buf::None;  // RmsNorm a -> b; Add: X += a
  int64_t width = 0;                 // elements per token of the elementwise ops
  // Legacy: the k and v latent segments of P and the output factors that reconstruct them.
  int64_t k_off = 0, v_off = 0, k_rank = 0, v_rank = 0;
  const Matrix* uk = nullptr;
  const Matrix* uv = nullptr;
  bool rope_append = false;  // Attend, fused dense KV: ropes q and k and appends k, v itself
};

struct Plan {
  std::vector<Launch> launches;
  std::vector<size_t> region_begin;    // first launch of each layer's region, then the output's
  int64_t p_width = 1;                 // floats of the latent scratch P per token
  int64_t k_latent = 0, v_latent = 0;  // legacy: the widest k / v latent (cache row widths)
};

// The plan of one forward call. Throws lr::Error for what the GPU path does
// not run (legacy KV with a dense k or v, head_dim other than 64 or 128, more
// than 8 query heads per KV head). Every mode may run in every unit: the
// static and legacy kernels also read the position from device memory.
Plan plan_forward(const Weights& w, const ExecOptions& e);

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

// Prefill runs the session's plan unfused and packed over a block of tokens
// (GEMMs instead of GEMVs); static KV attends with the split-K kernels there.
ExecOptions prefill_options(const ExecOptions& e);

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

// The plan executed on the CPU in plain loops (plan_ref.cpp): the slow twin of
// the CUDA backend, same launches, buffers and cache layouts. Any weight type.
std::unique_ptr<Backend> make_plan_reference_backend(std::shared_ptr<const Weights> w,
                                                     const BackendOptions& opt);

// Rows of a device matrix are padded to this many bf16 elements (16 bytes).
constexpr int64_t kRowPad = 8;
inline int64_t padded_cols(int64_t cols) {
  return (cols + kRowPad - 1) / kRowPad * kRowPad;
}

}  // namespace lr::cuda
