// The narrow interface every backend implements. A backend instance is a
// session: it owns the KV cache and scratch buffers; the weights it reads are
// shared and read-only. Model code and tools do not know which backend runs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kv/key_config.h"
#include "kv/key_stream.h"
#include "model/weights.h"

namespace lr {

// Where a block's linear maps read their input: the compressor observes these
// activations to whiten its factorizations.
enum class Site {
  AttnIn,   // rms_norm(x) before q, k, v      [n, dim]
  AttnOut,  // attention output before o        [n, q_dim]
  MlpIn,    // rms_norm(x) before gate, up      [n, dim]
  MlpMid,   // silu(gate) * up before down      [n, ffn_dim]
  Keys,     // post-RoPE keys (not a linear input) [n, kv_dim]
  Queries,  // post-RoPE queries (not a linear input) [n, q_dim]
};

class ActivationObserver {
 public:
  virtual ~ActivationObserver() = default;
  virtual void observe(int layer, Site site, const float* X, int n_tokens, int dim) = 0;
};

// How the fast CPU backend runs a decode step (one token). Each switch is one
// mechanism of the ablation; the defaults are the fastest combination.
enum class KvMode {
  Static,  // eager baseline: separate RoPE and append ops, attention as three ops
           // (scores, softmax, weighted sum) over a materialized score row
  Dense,   // current token's k, v reconstructed, roped and appended in one step;
           // one-pass online-softmax attention split across threads
  Legacy,  // the cache holds the latents V_k x, V_v x; every step reconstructs
           // (and ropes) the whole history before attending
};
enum class ExecUnit {
  PerOp,     // every operation is its own parallel dispatch (threads woken and joined)
  PerLayer,  // one parallel region per layer, spin barriers between dependent steps
  PerToken,  // one region for the whole token, embedding to logits
};
struct ExecOptions {
  KvMode kv = KvMode::Dense;
  bool packed = true;  // q/k/v and gate/up input matrices as one product each (model/pack.h)
  bool fused = true;   // RMSNorm, SiLU*mul, residual adds and the attention merge folded
                       // into the neighbouring matrix-vector step
  ExecUnit unit = ExecUnit::PerToken;
  bool spin = true;    // idle threads spin between dispatches; false: they sleep, and every
                       // dispatch wakes and joins them (an eager framework's per-op launch)
};

struct BackendOptions {
  int ctx = 2048;     // KV cache capacity in tokens (preallocated)
  int n_threads = 1;  // CPU threads (fast CPU backend only)
  ActivationObserver* observer = nullptr;  // fast CPU backend: sees every linear input
  ExecOptions exec{};  // fast CPU backend: decode execution
  kv::KeyCacheConfig keys{};  // fast CPU backend: what the cache stores for keys (--cache-type-k)
};

// What a session's key cache holds (fast CPU backend with a compressed key type).
struct KeyCacheStats {
  kv::KeyType type = kv::KeyType::F32;
  int64_t tokens = 0;          // cached positions
  int head_dim = 0;
  int streams = 0;             // layers x KV heads
  kv::KeyBytes held;           // bytes held for the cached positions
  kv::KeyBytes allocated;      // bytes reserved for the whole context
  uint64_t value_bytes = 0;    // f16 values, whole context
  double mean_rank = 0;        // SVDq: mean rank and stored channels over fitted streams
  double mean_channels = 0;
  double nominal_bits = 0;     // SVDq: mean over streams of mean(schedule) x rank / head_dim
  int fitted = 0, degraded = 0;
  // Bits per key element of what is held: all key bytes x 8 / (tokens x head_dim x streams).
  double true_bits() const {
    return tokens > 0 ? double(held.total()) * 8.0 / (double(tokens) * head_dim * streams) : 0;
  }
};

// Work issued by the forward passes since the last reset. CPU: thread-pool
// regions and barriers. CUDA: what the host issued (kernel launches and
// copies eagerly, graph launches in graph modes) and the kernels that ran.
struct ExecCounters {
  uint64_t dispatches = 0;  // CPU: parallel regions started; CUDA: host launches
  uint64_t barriers = 0;    // CPU: barrier crossings inside regions
  uint64_t kernels = 0;     // CUDA: kernels executed (launched, or replayed graph nodes)
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
  // Forget every cached position at or after `n` (n <= n_past()).
  void rewind(int n);
  // Key cache contents (zeros when keys are the plain f32 cache).
  virtual KeyCacheStats key_stats() const { return {}; }
  int ctx() const { return ctx_; }
  const Weights& weights() const { return *weights_; }
  virtual ExecCounters counters() const { return {}; }
  // Bytes the session's KV cache holds (allocated for the whole context).
  virtual uint64_t cache_bytes() const { return 0; }
  virtual void reset_counters() {}

 protected:
  Backend(std::shared_ptr<const Weights> w, int ctx);
  void check_forward_args(const int32_t* tokens, int n) const;
  virtual void on_rewind(int /*n*/) {}

  std::shared_ptr<const Weights> weights_;
  int ctx_;
  int n_past_ = 0;
};

// The plain scalar f32 definition of the model: slow, obviously correct.
// Requires F32 weights.
std::unique_ptr<Backend> make_reference_backend(std::shared_ptr<const Weights> w,
                                                const BackendOptions& opt);
// The fast CPU path: AVX2 kernels, bf16 (or f32) weights, multithreaded.
std::unique_ptr<Backend> make_cpu_backend(std::shared_ptr<const Weights> w,
                                          const BackendOptions& opt);
// The CUDA path (src/backend/cuda): bf16 weights on the device, f32
// accumulation, f16 KV cache; opt.exec picks the ablation rung, with
// per-layer and per-token units as captured CUDA graphs. Throws lr::Error in a
// build without CUDA (LOWRANK_CUDA=OFF) or on a machine without a device.
std::unique_ptr<Backend> make_cuda_backend(std::shared_ptr<const Weights> w,
                                           const BackendOptions& opt);
// "NVIDIA H200, 139 GiB, sm_90, driver 12.8" or why there is none.
std::string cuda_device_info(bool* available = nullptr);
// The GPU's read bandwidth in GB/s: a kernel summing a 2 GiB buffer, best of 5.
double cuda_read_bandwidth_gbs();

}  // namespace lr
