// The research ablation as transformations of the model's plan. The bench
// (bench/harness) names its rungs by an ExecOptions; derive() turns the
// model's plan into the rung's: static KV (eager attention), latent KV (the
// legacy low-rank cache), unpacked projections, fused or not, and the unit
// that groups steps into dispatches. The product runs derive(.., {}) — the
// fused, packed, dense-KV, per-token plan — and prefills with
// prefill_options(): the same plan unfused, where a norm folded into a
// product's input would be recomputed by every thread for every token.
#pragma once

#include "model/plan.h"

namespace lr {

// One rung of the ablation. The defaults are the fastest combination.
struct ExecOptions {
  KvMode kv = KvMode::Dense;
  bool packed = true;  // q/k/v and gate/up input products as one step each (model/pack.h)
  bool fused = true;   // RMSNorm, SiLU*mul, residual adds and the attention merge folded
                       // into the neighbouring products (fuse())
  ExecUnit unit = ExecUnit::PerToken;
  bool spin = true;  // CPU: idle threads spin between dispatches; false: they sleep, and every
                     // dispatch wakes and joins them (an eager framework's per-op launch)
};

// The fused plan: every RmsNorm folded into the products that read its
// output, the attention merge into the product that reads it, every residual
// add into the product before it, SiLU*mul into the gate/up product (CPU) or
// the down product's input (GPU), and (GPU) RoPE + append into attention.
Plan fuse(Plan p);
// Every product of a projection group a step of its own (q_in, k_in, v_in, ...).
Plan unpack(Plan p);
// Static KV: RoPE and the append as steps of their own; attention as scores,
// softmax and a weighted sum over a materialized score row. Takes an unfused
// dense-KV plan.
Plan static_kv(Plan p);
// Latent KV: the cache holds k's and v's input-side latents; their output
// side is dropped and every step rebuilds (and ropes) the whole history
// before attending. Takes an unfused dense-KV plan whose k and v are
// low-rank (throws lr::Error naming the first dense one).
Plan latent_kv(Plan p);
Plan with_unit(Plan p, ExecUnit u);

// The rung's plan: the model's plan, then the KV transform, unpack, fuse, unit.
Plan derive(const Weights& w, const PlanOptions& o, const ExecOptions& e);

// What a prompt runs with on a session of rung `e`: unfused, packed, one
// dispatch per step, dense KV for a static rung (the static baseline is a
// decode mechanism), latent KV for a legacy one (the cache must hold latents).
ExecOptions prefill_options(const ExecOptions& e);

}  // namespace lr
