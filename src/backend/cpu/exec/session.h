// State of one fast-CPU session: the thread pool, the RoPE table and the KV
// cache the session's plans keep (seq_cache.h). Weights are read-only and
// shared between sessions; everything here belongs to one session.
#pragma once

#include <memory>

#include "backend/backend.h"
#include "backend/cpu/exec/cpu_weights.h"
#include "backend/cpu/exec/rope_table.h"
#include "backend/cpu/exec/seq_cache.h"
#include "backend/cpu/exec/split.h"
#include "backend/cpu/kernels/dispatch.h"
#include "core/thread_pool.h"
#include "model/weights.h"

namespace lr::cpu {

// The most tokens a session runs in one prompt chunk (as matrix-matrix
// products); its cache takes that many at once.
constexpr int kPrefillRows = 512;

struct Session {
  // kv: the session plans' KV mode (the cache they keep). own_cache false:
  // no cache here (a batch keeps one per sequence, backend/batch.h).
  // panels: the panels of w's matrices (cpu_weights.h), or null: the rows as stored.
  Session(const Weights& w, const BackendOptions& opt, KvMode kv, bool own_cache = true,
          std::shared_ptr<const PanelTable> panels = nullptr);
  const Weights& w;
  std::shared_ptr<const PanelTable> panels;
  const Config& c;
  ThreadPool pool;
  int ctx;  // KV cache capacity in tokens
  RopeTable rope;
  RopeTable rope_swa;   // the windowed layers' (empty when the model has none)
  RopeTable rope_none;  // the layers without RoPE: angle 0 (empty when the model has none)
  const RopeTable& rope_of(uint8_t set) const {
    return set == 0 ? rope : set == 1 ? rope_swa : rope_none;
  }
  std::unique_ptr<SeqCache> cache;  // null without own_cache
  int pos = 0;                      // position of the first token being run

  uint64_t cache_bytes() const { return cache ? cache->bytes() : 0; }
};

}  // namespace lr::cpu
