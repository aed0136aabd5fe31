// The plan of a forward step: what the model computes for a step of n
// tokens, block by block, as a list of steps over named activation buffers
// [n, width]. The planner (plan.cpp) writes it in the model's terms, one
// short function per block; executors run it without knowing what it means:
// the fast CPU path (backend/cpu/executor.h), the CUDA backend
// (backend/cuda/backend_cuda.cpp) and the scalar plan executor
// (backend/ref/plan_scalar.cpp). The reference forward pass
// (backend/ref/forward_ref.cpp) is written independently of the plan, so the
// plan itself is tested against something it did not generate.
//
// Prefill and decode run the same plan: a prompt is a step of n tokens, a
// decode step one token. plan_forward() writes the model's plan unfused;
// fuse() (plan_transforms.h) folds its elementwise steps into the products:
// the fastest plan, what `run` and `perplexity` execute. The bench's
// research rungs are transformations of the same plan.
//
// Host-only code: no backend is included, so plans are unit tested anywhere.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/weights.h"

namespace lr {

// Which executor a plan is arranged for. The model is the same; what
// differs is where the elementwise work next to a product goes. A CPU
// thread computes whole rows of a product, so it finishes them there: it
// ropes the q and k heads it has just written and appends k and v to the
// cache, and (fused) applies SiLU*mul to its gate and up rows. A GPU
// kernel stages a product's input, so a fused GPU plan folds RoPE and the
// append into attention and SiLU*mul into the next product's input, and the
// unfused one ropes and appends in a step of its own.
enum class Target : uint8_t { Cpu, Gpu };

// How the KV cache is kept (the research rungs; Dense is the product).
enum class KvMode {
  Static,  // eager baseline: separate RoPE and append steps, attention as three steps
           // (scores, softmax, weighted sum) over a materialized score row
  Dense,   // the current token's k, v roped and appended; one-pass online-softmax
           // attention split across threads (or GPU blocks)
  Legacy,  // the cache holds the latents V_k x, V_v x; every step reconstructs
           // (and ropes) the whole history before attending
};

// How an executor groups the steps into dispatches.
enum class ExecUnit {
  PerOp,     // every step is its own dispatch (CPU: threads woken and joined; GPU: a launch)
  PerLayer,  // one region per layer (CPU: spin barriers between steps; GPU: a graph)
  PerToken,  // one region for the whole step, embedding to logits
};

// Activation buffers of a step, [n_tokens, width] each (Plan::width).
enum class Buf : uint8_t { None, X, H, Y, Q, K, V, Att, P, G, U, Logits };
const char* buf_name(Buf b);

// Where the compressor (and calibrate-kv) observe activations: each is a
// buffer after a step of an unfused plan.
enum class Site : uint8_t {
  AttnIn,   // rms_norm(x) before q, k, v      H   [n, dim]
  AttnOut,  // attention output before o        Att [n, q_dim]
  MlpIn,    // rms_norm(x) before gate, up      H   [n, dim]
  MlpMid,   // silu(gate) * up before down      G   [n, ffn_dim]
  Keys,     // post-RoPE keys (not a linear input) K [n, kv_dim]
  Queries,  // post-RoPE queries (not a linear input) Q [n, q_dim]
};
Buf site_buffer(Site s);
inline uint8_t site_bit(Site s) {
  return uint8_t(1u << unsigned(s));
}

enum class Op : uint8_t {
  Embed,       // x = tok_embd[token]
  RmsNorm,     // b = rms_norm(a) * norm (no norm: b = a, a block without a pre-norm)
  Linear,      // every job: out (+)= M in
  RopeAppend,  // q, k roped at their positions; k, v appended to the cache
  Attend,      // attention partials of q over the cache, split across chunks of positions
  Merge,       // att = the partials merged
  Add,         // x += a (a residual)
  SiluMul,     // g = act(g) * u (act: SiLU, or GELU's tanh form)
  Append,      // k, v -> the cache (static KV; a compressed key cache encodes them)
  HeadNorm,    // each group of `width` values of a (q or k: a head, or all of it)
               // rms-normalized by norm [1, width], in place
  // The research baselines only (plan_transforms.h):
  Rope,          // static / legacy: a (q) and b (k) roped in place
  Scores,        // static: s[h, j] = q_h . k_j / sqrt(head_dim), j <= pos
  Softmax,       // static: rows of s
  Mix,           // static: att = s V
  LatentAppend,  // legacy: the k and v latents (segments of P) -> the latent cache
  Reconstruct,   // legacy: k (roped) and v of every cached position rebuilt from the latents
};
const char* op_name(Op o);

// The side of a linear map a job computes: a dense W, or the input side V
// (applied first) or output side U of low-rank factors.
enum class Side : uint8_t { Whole, In, Out };

// One matrix of a Linear step: out[t, out_off + r] (+)= sum_c M[r, c] x[t, c].
struct Job {
  const Matrix* m = nullptr;  // [rows, cols] (weights; executors find their copies by address)
  Buf in = Buf::None;         // x = in[t, in_off .. in_off + cols) ...
  int64_t in_off = 0;
  Buf out = Buf::None;
  int64_t out_off = 0;
  // ... or, folded into the product's input by fuse():
  const Matrix* norm = nullptr;  // x = rms_norm(in[t, :]) * norm
  Buf in2 = Buf::None;           // x = act(in) * in2 (GPU)
  Activation act = Activation::Silu;
  bool merge_in = false;         // x = the attention partials merged (att is not written)
  bool accumulate = false;       // out += M x (a residual folded into the product)
  float scale = 1.f;  // the rows it writes scaled: scale * (M x + bias), or with `sum` the
                      // completed row (the output head's logit scale)
  bool sum = false;              // out += M x: a residual form's correction U (V x) added to
                                 // the quantized product of the step before
  const Matrix* bias = nullptr;  // out += bias (f32 [1, rows]) before what follows; the map's output side
  // CPU: the rows are heads of q, k or v; the thread that computes a head
  // normalizes it (head_norm, [1, head_dim]: q/k norms), ropes it (q, k) and
  // appends it to the cache (k, v).
  const Matrix* head_norm = nullptr;
  bool rope = false, append = false;
  uint8_t rope_set = 0;  // RoPE frequencies: 0 the model's, 1 its windowed layers' (rope_inv_freq)
  const char* map = "";  // the linear map ("q", "gate", "output", ...) for step names
  Side side = Side::Whole;
  // Pivoted storage (model/weights.h Pivots), an output side only: M holds
  // the non-pivot rows; output row i is M[source[i]] . x, or x[k] itself for
  // the pivot row of latent k (the input is the latents).
  const Pivots* pivots = nullptr;

  int64_t rows() const { return pivots ? pivots->out() : m->rows; }  // output rows
};

struct Step {
  Op op = Op::Linear;
  int layer = -1;    // -1: the embedding or the output head
  std::string name;  // "blk.3.qkv_in", "output", ...
  // Linear
  std::vector<Job> jobs;
  const Matrix* stacked = nullptr;  // the jobs' matrices are consecutive row views of this
                                    // one and their outputs consecutive: one product (CPU)
  bool silu_mul = false;            // then g = act(g) * u on the rows computed (CPU, fused)
  Activation act = Activation::Silu;  // SiluMul, silu_mul: the gate's activation
  // RmsNorm a -> b; Add x += a; Rope a (q), b (k, or None); HeadNorm a; widths per token
  const Matrix* norm = nullptr;
  Buf a = Buf::None, b = Buf::None;
  int64_t width = 0;
  bool rope_append = false;  // Attend (GPU, fused): ropes q and k, appends k, v, then attends
  uint8_t rope_set = 0;      // Rope, RopeAppend, Attend with rope_append: as Job::rope_set
  float scale = 1.f;         // Embed: x = scale * tok_embd[token]; Attend, Scores: of q.k;
                             // Add: x += scale * a
  int window = 0;            // Attend, Scores: a query at p sees [p - window + 1, p] (0: [0, p])
  // Legacy: the k and v latent segments of P and the factors that rebuild them.
  struct Latent {
    int64_t k_off = 0, v_off = 0, k_rank = 0, v_rank = 0;
    const Matrix* uk = nullptr;
    const Matrix* uv = nullptr;
    bool append = false;  // Reconstruct (CPU): appends the latents of the step's tokens first
  } latent;
  uint8_t observe = 0;  // bit (1 << Site): the activation an observer sees after this step

  bool observes(Site s) const { return observe & site_bit(s); }
};

// "blk.<layer>.<name>", or `name` for the embedding and the output head (layer -1).
std::string step_name(int layer, const std::string& name);
// What an observer sees after a product: the post-RoPE queries or keys it ropes.
uint8_t observed_by(const Job& j);

struct Plan {
  Target target = Target::Cpu;
  KvMode kv = KvMode::Dense;
  bool packed = true, fused = false, streamed_keys = false;
  ExecUnit unit = ExecUnit::PerToken;
  std::vector<Step> steps;
  std::vector<size_t> region_begin;    // first step of each layer's region, then the output head's
  int64_t p_width = 1;                 // floats of the latent scratch P per token
  int64_t k_latent = 0, v_latent = 0;  // legacy: the widest k / v latent (cache row widths)

  // Floats per token of buffer b for the model of config c.
  int64_t width(Buf b, const Config& c) const;
  // Steps [begin, end) of region r.
  std::pair<size_t, size_t> region(size_t r) const {
    return {region_begin[r], r + 1 < region_begin.size() ? region_begin[r + 1] : steps.size()};
  }
};

struct PlanOptions {
  Target target = Target::Cpu;
  // CPU: the keys go to a compressed key cache (kv/key_stream.h): the q/k/v
  // products rope but do not append; an Append step encodes k and stores v.
  bool streamed_keys = false;
};

// The model's plan: packed projections, dense KV, unfused, per-token.
Plan plan_forward(const Weights& w, const PlanOptions& o);

}  // namespace lr
