// The KV cache of one sequence as the CPU executors use it: they append a
// chunk of a layer's keys and values and attend for a query, and know no
// more of what the cache stores. One class per kind (seq_cache.cpp):
//   dense    f32 keys and values, or f16 both (kv/dense_cache.h)
//   streams  the key type of --cache-type-k and value type of --cache-type-v
//            (kv/stream_cache.h): any other pair
//   latent   the legacy rung's latents and rebuilt history (kv/latent_cache.h)
// A session keeps one; a batch (backend/batch.h) one per slot.
#pragma once

#include <cstdint>
#include <memory>

#include "backend/backend.h"
#include "core/thread_pool.h"
#include "kv/dense_cache.h"
#include "kv/latent_cache.h"

namespace lr::cpu {

class SeqCache {
 public:
  virtual ~SeqCache() = default;

  // A session's call of n tokens from position pos: a compressed key cache
  // stages the call's own keys (attention reads them exactly) and encodes
  // them when the call ends.
  virtual void begin_call(int /*pos*/, int /*n*/) {}
  virtual void end_call(ThreadPool& /*pool*/) {}

  // Whether append takes any (token, KV head) alone, in any order; else it
  // takes a sequence's run of tokens of one KV head at once, in order.
  virtual bool appends_tokens() const { return true; }
  // Keys and values of positions [pos, pos + n) of KV head h in layer l,
  // rows `stride` floats apart (the heads of a row consecutive from k, v).
  // q: the tokens' query rows, the head's group [g, head_dim] at
  // q + t * q_stride (a cache fitted on queries sees them before the keys).
  virtual void append(int l, int h, int pos, const float* k, const float* v, int n, int64_t stride,
                      const float* q, int64_t q_stride, int g) = 0;

  // attention_kernels.h attend_partial for the query at position p: g query
  // heads q [g, head_dim] of KV head h over part `chunk` of `chunks` of the
  // positions [from, p] (cut where the stored form's blocks allow; from > 0
  // for a windowed layer, dense caches only).
  virtual void attend(int l, int h, int from, int p, const float* q, int g, int chunk, int chunks,
                      float scale, float* m, float* sum, float* acc) const = 0;

  // attend for n consecutive rows of a prompt: row t, at position p0 + t,
  // over positions [0, p0 + t] (a layer without a window; one chunk), its
  // query heads at q + t * q_stride, its partials where `out` says. The
  // bits attend gives each row alone; a dense cache and a prompt's staged
  // rows are computed in tiles (attention_kernels.h attend_causal).
  struct RowPartials {
    float *m, *sum, *acc;
    int64_t stride, acc_stride;  // row t's: m + t * stride, acc + t * acc_stride
  };
  virtual void attend_rows(int l, int h, int p0, int n, const float* q, int64_t q_stride, int g,
                           float scale, const RowPartials& out) const;

  // Forgets positions >= n (n: what rewindable allows).
  virtual void truncate(int /*n*/) {}
  // The largest m <= n the cache can be cut back to from n_past positions
  // and still hold what a query at m attends to (a sliding-window ring
  // overwrites old positions): n, or 0.
  virtual int rewindable(int /*n_past*/, int n) const { return n; }
  // Takes positions [0, n) of `from` (a cache of the same kind and layout)
  // in place of its own, copying those from `held` on (the first `held` it
  // holds already); false where the kind cannot (then nothing changed).
  virtual bool copy_prefix(const SeqCache& /*from*/, int /*n*/, int /*held*/) { return false; }
  // Whether copy_prefix copies (from a cache of the same kind).
  virtual bool copies() const { return false; }
  // A stored prompt prefix: positions [0, n) in a cache of this kind whose
  // memory other caches map (core/zero_pages.h), and this cache reading
  // those pages too (one copy in RAM); null where the kind cannot.
  virtual std::unique_ptr<SeqCache> store_prefix(int /*n*/) { return nullptr; }
  // Takes positions [0, n) of `stored` (a store_prefix of a cache of the
  // same kind and layout) in place of its own, its whole pages by reference
  // (copy on write); false where the kind cannot.
  virtual bool share_prefix(const SeqCache& /*stored*/, int /*n*/) { return false; }
  // After truncate(0): its pages given back to the OS (a server's slot
  // making room in the KV pool).
  virtual void release() {}
  // A batch's step has ended (rows kept for its attention are let go).
  virtual void end_step() {}
  // Bytes held for the whole context, and of them those in RAM (written;
  // core/zero_pages.h).
  virtual uint64_t bytes() const = 0;
  virtual uint64_t resident_bytes() const { return bytes(); }
  virtual kv::KeyCacheStats key_stats() const { return {}; }

  // The research rungs' own steps: static KV scores the dense cache, the
  // fused rope-and-append writes into it, legacy KV rebuilds its history.
  virtual kv::DenseCache* dense() { return nullptr; }
  virtual kv::LatentCache* latent() { return nullptr; }
};

// The cache a plan of KV mode `kv` keeps under opt.keys, for opt.ctx
// positions. batched: a batch slot's, whose rows are attended as decode
// steps see the cache (kv::KeyStream::view_at) however a prompt is cut.
// rows: the most tokens one call (or step) appends before attending (a
// sliding-window layer's ring holds its window and these).
std::unique_ptr<SeqCache> make_seq_cache(const Weights& w, const BackendOptions& opt, KvMode kv,
                                         bool batched, int rows);

}  // namespace lr::cpu
