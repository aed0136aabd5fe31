// The narrow interface every backend implements. A backend instance is a
// session: it owns the KV cache and scratch buffers; the weights it reads are
// shared and read-only. Model code and tools do not know which backend runs.
// Each backend's factories are in its own header: backend/ref/ref.h,
// backend/cpu/cpu.h, backend/cuda/cuda.h (runtime/session.h picks one).
#pragma once

#include <climits>
#include <cstdint>
#include <memory>
#include <string>

#include "kv/cache_stats.h"
#include "kv/key_config.h"
#include "model/plan_transforms.h"
#include "model/weights.h"

namespace lr {

// Sees the activations of the sites the unfused plan marks (model/plan.h Site).
class ActivationObserver {
 public:
  virtual ~ActivationObserver() = default;
  virtual void observe(int layer, Site site, const float* X, int n_tokens, int dim) = 0;
  // The last layer whose inputs it wants: a forward it observes stops after
  // that layer (no later layer runs, no logits are written).
  virtual int last_layer() const { return INT_MAX; }
};

// What only the CPU backends take (the fast session, the batch, the layer
// runner); the others ignore it.
struct CpuOptions {
  int n_threads = 1;                       // threads of the session's pool
  ActivationObserver* observer = nullptr;  // sees every linear input (calibration)
};

// A session's options: what every backend takes, then each device's own.
struct BackendOptions {
  int ctx = 2048;  // KV cache capacity in tokens (preallocated)
  ExecOptions
      exec{};  // the rung of the ablation (model/plan_transforms.h); the product runs the default
  // What the cache stores for keys and values (--cache-type-k, -v): the CPU
  // fast path and batch take every type; the reference and CUDA f32 only
  // (require_dense_cache).
  kv::KeyCacheConfig keys{};
  CpuOptions cpu{};
};

// Throws lr::Error, one line naming the types `backend` has and those given,
// unless opt keeps keys and values as f32 (the dense cache).
void require_dense_cache(const BackendOptions& opt, const char* backend);

using kv::KeyCacheStats;

// Work issued by the forward passes since the last reset. CPU: thread-pool
// regions and barriers. CUDA: what the host issued (kernel launches and
// copies eagerly, graph launches in graph modes) and the kernels that ran.
struct ExecCounters {
  uint64_t dispatches = 0;      // CPU: parallel regions started; CUDA: host launches
  uint64_t barriers = 0;        // CPU: barrier crossings inside regions
  uint64_t kernels = 0;         // CUDA: kernels executed (launched, or replayed graph nodes)
  uint64_t graph_launches = 0;  // CUDA: graphs launched
  uint64_t graph_nodes = 0;     // CUDA: nodes of the graphs launched (kernels and copies)
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;

  // Runs `n` tokens at positions [n_past(), n_past()+n) and appends their keys
  // and values to the cache. Writes logits [n, vocab] when all_logits, else the
  // last token's [vocab]. Throws lr::Error when the context would overflow.
  virtual void forward(const int32_t* tokens, int n, float* logits, bool all_logits) = 0;

  int n_past() const { return n_past_; }
  // Forget every cached position at or after `n` (n <= n_past(), and what
  // rewindable allows).
  void rewind(int n);
  // The largest m <= n the cache can be cut back to: n, or 0 where a
  // sliding-window ring no longer holds the window of a query at n.
  int rewindable(int n) const;
  // Key cache contents (zeros when keys are the plain f32 cache).
  virtual KeyCacheStats key_stats() const { return {}; }
  int ctx() const { return ctx_; }
  const Weights& weights() const { return *weights_; }
  // The weights the session runs (shared; what a backend prepares from them is its own).
  std::shared_ptr<const Weights> shared_weights() const { return weights_; }
  virtual ExecCounters counters() const { return {}; }
  // Bytes the session's KV cache holds (allocated for the whole context).
  virtual uint64_t cache_bytes() const { return 0; }
  virtual void reset_counters() {}

 protected:
  Backend(std::shared_ptr<const Weights> w, int ctx);
  void check_forward_args(const int32_t* tokens, int n) const;
  virtual void on_rewind(int /*n*/) {}
  virtual int can_rewind(int n) const { return n; }

  std::shared_ptr<const Weights> weights_;
  int ctx_;
  int n_past_ = 0;
};

}  // namespace lr
