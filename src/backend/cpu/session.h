// State of one fast-CPU session, shared by its prefill (prompt chunks as
// matrix-matrix products) and decode (one token through a plan of steps): the
// thread pool, the RoPE table and the KV cache. Weights are read-only and
// shared between sessions; everything here belongs to one session.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "core/thread_pool.h"
#include "kv/key_stream.h"
#include "model/weights.h"

namespace lr::cpu {

// y[r] = W[r, :] x for r in [r0, r1); any weight type (F32, F16, BF16).
void matvec(const Matrix& W, const float* x, float* y, int64_t r0, int64_t r1);
// Y[t, r] = W[r, :] X[t, :] for t < n, r in [r0, r1); Y has row stride ldy.
void matmul(const Matrix& W, const float* X, float* Y, int64_t n, int64_t ldy, int64_t r0,
            int64_t r1);

// A contiguous share of n items for thread tid of nth, in units of `align`
// items (shares differ by at most one unit; the last may be short).
struct Span {
  int64_t begin, end;
};
Span split(int64_t n, int tid, int nth, int64_t align = 1);

// cos/sin of pos / factor * theta^(-2i/head_dim), for pos < ctx, i < head_dim/2.
struct RopeTable {
  int half = 0;
  std::vector<float> cos, sin;  // [ctx, head_dim/2]
  RopeTable(const Config& c, int ctx);
  // Rotates the pairs (x[2i], x[2i+1]) of n_heads consecutive heads.
  void apply(float* x, int n_heads, int head_dim, int pos) const;
};

// Dense post-RoPE keys and values, preallocated for ctx positions, head-major:
// the keys of one KV head of one layer are contiguous [ctx, head_dim], so
// attention streams them (key(l, h) + j * stride() is position j). In legacy
// mode the cache instead holds the low-rank latents V_k x and V_v x of every
// position, and k, v are one layer of position-major scratch [ctx, kv_dim]
// that each step rebuilds the history into (reconstruct_history); key(l, h)
// then points into that scratch with stride kv_dim.
//
// With a compressed key type (--cache-type-k, kv/key_config.h) the cache is
// `ks`, one KeyStream per (layer, KV head), and f16 values `v16`; k and v are
// then only the staging of one forward call: the exact keys and values of
// its positions [stage_begin, stage_begin + stage_cap), which the call's own
// attention reads, committed into the streams when the call ends.
struct KvCache {
  int ctx = 0, kv_dim = 0, head_dim = 0, n_kv_heads = 0;
  bool latent = false;             // legacy mode
  bool streamed = false;           // compressed key type
  std::vector<kv::KeyStream> ks;   // streamed: [n_layers * n_kv_heads]
  std::vector<uint16_t> v16;       // streamed: [n_layers, n_kv_heads, ctx, head_dim] f16
  int stage_begin = 0, stage_cap = 0;
  std::vector<float> k, v;         // [n_layers, n_kv_heads, ctx, head_dim]; legacy: [ctx, kv_dim]
  std::vector<float> pk, pv;       // legacy: per layer l [ctx, rank of k (v) in layer l]
  std::vector<size_t> pk_off, pv_off;  // legacy: where layer l starts in pk (pv)
  std::vector<int64_t> rk, rv;         // legacy: latent width of layer l
  int64_t stride() const { return latent ? kv_dim : head_dim; }
  // Streamed: key(l, h) + (pos - stage_begin) * stride() is staged position pos.
  size_t head_offset(int l, int h) const {
    const size_t rows = streamed ? size_t(stage_cap) : size_t(ctx);
    return latent ? size_t(h) * size_t(head_dim)
                  : (size_t(l) * size_t(n_kv_heads) + size_t(h)) * rows * size_t(head_dim);
  }
  kv::KeyStream& stream(int l, int h) { return ks[size_t(l) * size_t(n_kv_heads) + size_t(h)]; }
  uint16_t* value16(int l, int h) {
    return &v16[(size_t(l) * size_t(n_kv_heads) + size_t(h)) * size_t(ctx) * size_t(head_dim)];
  }
  float* key(int l, int h) { return &k[head_offset(l, h)]; }
  float* value(int l, int h) { return &v[head_offset(l, h)]; }
  float* pk_at(int l, int pos) { return &pk[pk_off[size_t(l)] + size_t(pos) * size_t(rk[size_t(l)])]; }
  float* pv_at(int l, int pos) { return &pv[pv_off[size_t(l)] + size_t(pos) * size_t(rv[size_t(l)])]; }
  // Writes one position's keys and values, each [kv_dim] with heads consecutive.
  void append(int l, int pos, const float* kr, const float* vr) {
    if (streamed) pos -= stage_begin;
    for (int h = 0; h < n_kv_heads; ++h) {
      std::copy_n(kr + h * head_dim, head_dim, key(l, h) + pos * stride());
      std::copy_n(vr + h * head_dim, head_dim, value(l, h) + pos * stride());
    }
  }
  // Bytes of the cache for the whole context (streamed: keys allocated and values).
  uint64_t bytes() const;
};

struct Session {
  Session(const Weights& w, const BackendOptions& opt);
  const Weights& w;
  const Config& c;
  ExecOptions exec;
  ThreadPool pool;
  RopeTable rope;
  KvCache kv;
  int pos = 0;  // position of the first token being run

  // Streamed caches: a forward call of n tokens at position pos stages its
  // keys and values (begin_call), attends to the history in the streams plus
  // its own exact keys, and commits them into the streams (end_call).
  void begin_call(int pos, int n);
  void end_call();
  void truncate(int n);
  KeyCacheStats key_stats() const;
};

// Legacy mode: keys and values of positions [j0, j1) of layer l rebuilt from
// the latents (K = U_k P_k, RoPE at each position; V = U_v P_v) into the
// position-major scratch (rows j of k and v).
void reconstruct_history(Session& s, int l, int64_t j0, int64_t j1);

}  // namespace lr::cpu
