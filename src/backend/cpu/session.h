// State of one fast-CPU session: the thread pool, the RoPE table and the KV
// cache the session's plans keep (dense, latent for the legacy rung, or
// compressed key streams). Weights are read-only and shared between
// sessions; everything here belongs to one session.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/kernels.h"
#include "core/thread_pool.h"
#include "kv/dense_cache.h"
#include "kv/latent_cache.h"
#include "kv/stream_cache.h"
#include "model/weights.h"

namespace lr::cpu {

// y[r] = W[r, :] x for r in [r0, r1); any weight type (F32, F16, BF16, Q8_0).
void matvec(const Matrix& W, const float* x, float* y, int64_t r0, int64_t r1);
// Y[t, r] = W[r, :] X[t, :] for t < n, r in [r0, r1); X rows ldx apart, Y rows ldy apart.
// path: MatmulPath::Tiles for results that do not depend on n (kernels.h).
void matmul(const Matrix& W, const float* X, int64_t ldx, float* Y, int64_t ldy, int64_t n,
            int64_t r0, int64_t r1, MatmulPath path = MatmulPath::Any);
// The same, every row of X as matvec computes it (the same bits), the
// weights read from memory once: a block of rows at a time for every x.
// r0 a multiple of 8, as the decode split gives matvec.
void matvec_rows(const Matrix& W, const float* X, int64_t ldx, float* Y, int64_t ldy, int64_t n,
                 int64_t r0, int64_t r1);

// A contiguous share of n items for thread tid of nth, in units of `align`
// items (shares differ by at most one unit; the last may be short).
struct Span {
  int64_t begin, end;
};
Span split(int64_t n, int tid, int nth, int64_t align = 1);

// cos/sin of pos * inv_freq[i] (model/scalar_ops.h), for pos < ctx, i < head_dim/2.
struct RopeTable {
  int half = 0;
  std::vector<float> cos, sin;  // [ctx, head_dim/2]
  RopeTable(const Config& c, int ctx);
  // Rotates the pairs (x[2i], x[2i+1]) of n_heads consecutive heads.
  void apply(float* x, int n_heads, int head_dim, int pos) const;
  // The same for rows [r0, r1) of consecutive heads (r0 and r1 even).
  void apply_rows(float* x, int64_t r0, int64_t r1, int head_dim, int pos) const;
};

struct Session {
  // kv: the session plans' KV mode (the cache they keep). own_cache false:
  // no cache here (a batch keeps one per sequence, backend/batch.h).
  Session(const Weights& w, const BackendOptions& opt, KvMode kv, bool own_cache = true);
  const Weights& w;
  const Config& c;
  ThreadPool pool;
  int ctx;  // KV cache capacity in tokens
  RopeTable rope;
  std::optional<kv::DenseCache> dense;     // dense and static KV
  std::optional<kv::LatentCache> latent;   // legacy KV
  std::optional<kv::StreamCache> streams;  // a compressed key type (--cache-type-k)
  int pos = 0;                             // position of the first token being run

  uint64_t cache_bytes() const;
};

}  // namespace lr::cpu
