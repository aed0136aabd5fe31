// Several sequences advanced together, one step at a time: the engine under
// a server's slots. Each slot is a sequence with its own KV cache of ctx
// positions, of the kind opt.keys names (the CPU batch: dense f32 or a
// compressed key type, backend/cpu/exec/seq_cache.h; the CUDA batch: f16).
// Slots do not share a pool: a slot's cache is contiguous and its capacity
// is known when a request is admitted. A step takes chunks of
// tokens of distinct slots — one token of a slot that decodes, a piece of
// the prompt of one that prefills — and every linear map reads its weights
// once for all of the step's tokens; attention runs per slot over its cache.
//
// Batch invariance: a chunk's logits, and the keys and values it caches,
// are bit-identical whatever else the step holds and however a prompt is cut
// into chunks. A generated token (fed back to continue its sequence) is
// computed as a one-token decode step computes it; prompt tokens run
// through matrix kernels whose every output's arithmetic is the same for
// any number of tokens and any place among them; attention per token is
// split the same way always (backend/cpu/executor.h Rows::AsDecode).
// A compressed key cache is read by each row as a decode step at its
// position reads it (kv/key_stream.h view_at: the blocks a key-at-a-time
// cache would hold by then, the rest as f16 rows), and its window is
// encoded in whole windows, so the blocks do not depend on the cut either.
// Where it stops: SVDq with a sequence basis fits the basis on the keys a
// slot holds when a chunk first ends past min_fit_tokens, so its bits
// depend on where that chunk ends (a calibrated basis does not); and a slot
// rewound inside a KIVI or SVDq block keeps that block's kept positions as
// their reconstruction, not as the f16 keys a fresh slot would hold.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"

namespace lr {

class BatchBackend {
 public:
  // tokens[0, n) of slot `slot`, at its positions n_past(slot) ...; logits:
  // whether the step writes the logits of the chunk's last token;
  // generated: one token the model generated, fed back (computed as a
  // decode step; such chunks come before the prompt chunks of a step); a
  // batch that verifies() also takes the generated token followed by
  // drafted ones, each computed as a one-token decode step would compute it
  // (speculative decoding's verification: every_logits gives each token's).
  struct Chunk {
    int slot = 0;
    const int32_t* tokens = nullptr;
    int n = 0;
    bool logits = true;
    bool generated = false;
    bool every_logits = false;  // the logits of every token, [n, vocab] (overrides logits)
  };
  // What the last step did: its tokens and the thread pool's dispatches and barriers.
  struct StepStats {
    int tokens = 0;
    uint64_t dispatches = 0, barriers = 0;
  };

  virtual ~BatchBackend() = default;
  // Runs the chunks (distinct slots; at most max_step_tokens() tokens in
  // all) and writes the logits the chunks ask for, [rows, vocab] in the
  // order given (a chunk's last token, or every token of an every_logits
  // chunk). Throws lr::Error, before running
  // anything, on a bad slot, a repeated slot, an empty chunk, a token id
  // outside the vocabulary, a slot's context overflow, too many tokens, or a
  // generated chunk of more than one token or after a prompt chunk.
  virtual void step(const std::vector<Chunk>& chunks, float* logits) = 0;
  // Whether a generated chunk may hold more than one token (the CPU batch).
  virtual bool verifies() const { return false; }
  // Whether a rewound slot holds the bits of one that never held the
  // dropped positions (not KIVI and SVDq key caches: a block rewound into
  // keeps its positions as their reconstruction).
  virtual bool rewinds_exactly() const { return true; }
  virtual StepStats last_step() const = 0;

  int slots() const { return int(n_past_.size()); }
  int ctx() const { return ctx_; }
  int max_step_tokens() const { return max_step_tokens_; }
  int n_past(int slot) const { return n_past_.at(size_t(slot)); }
  // Forgets slot `slot`'s positions at or after n (n <= n_past(slot), and
  // what rewindable allows): a new request keeps the prefix it shares with
  // the slot's previous one.
  void rewind(int slot, int n);
  // Forgets all of slot `slot`'s positions and gives its cache's pages back
  // (where the cache takes RAM as written: the CPU batch).
  void release(int slot) {
    rewind(slot, 0);
    do_release(slot);
  }
  // The largest m <= n slot `slot` can be cut back to: n, or 0 where a
  // sliding-window ring no longer holds the window of a query at n.
  int rewindable(int slot, int n) const {
    LR_ASSERT(slot >= 0 && slot < slots() && n >= 0 && n <= n_past_[size_t(slot)]);
    return can_rewind(slot, n);
  }
  // Slot `to` takes the first n positions of slot `from`'s cache (n <=
  // n_past(from), rewindable there), as if it had evaluated them: a prompt
  // evaluated once for several answers (n > 1), or by another request. The
  // first `held` of them `to` holds already (the same tokens: the same
  // bits), only the rest is copied. False where the batch's cache kind
  // cannot copy (then `to` is unchanged).
  bool copy_prefix(int from, int to, int n, int held = 0);
  // Whether copy_prefix can copy (the cache kind's): a server's requests
  // then share prompt prefixes across slots (runtime/engine.h).
  virtual bool copies_prefixes() const { return false; }
  // A stored prompt prefix: positions a slot held, kept apart from every
  // slot in memory slots map by reference (a prompt cache in RAM; the CPU
  // batch's f32 and f16 caches: core/zero_pages.h).
  struct Stored {
    virtual ~Stored() = default;
    // The largest m <= k whose prefix [0, m) this holds whole: k, or 0 where a
    // sliding-window ring holds only the window of a query at n.
    virtual int usable(int k) const { return k; }
    int n = 0;           // positions
    uint64_t bytes = 0;  // in RAM
  };
  // Slot `slot`'s positions [0, n) as a stored prefix (n <= n_past(slot),
  // rewindable there); the slot reads the stored pages from then on, so
  // the two hold one copy. Null where the cache kind cannot.
  virtual std::shared_ptr<const Stored> store_prefix(int /*slot*/, int /*n*/) { return nullptr; }
  // Slot `slot` takes positions [0, n) of a stored prefix (n <= p.n) in
  // place of its own, as if it had evaluated them. False where it cannot
  // (then the slot is unchanged).
  bool load_prefix(const Stored& p, int slot, int n);
  const Weights& weights() const { return *weights_; }
  // Bytes one slot's KV cache holds for its whole context (0: not known),
  // and of them those in RAM (a CPU cache's pages are taken as positions
  // are written).
  virtual uint64_t cache_bytes(int /*slot*/) const { return 0; }
  virtual uint64_t cache_resident(int slot) const { return cache_bytes(slot); }

 protected:
  BatchBackend(std::shared_ptr<const Weights> w, int slots, int ctx, int max_step_tokens);
  void check_step(const std::vector<Chunk>& chunks) const;
  // Called by rewind() before the slot's count changes.
  virtual void on_rewind(int /*slot*/, int /*n*/) {}
  virtual int can_rewind(int /*slot*/, int n) const { return n; }
  virtual bool do_copy_prefix(int /*from*/, int /*to*/, int /*n*/, int /*held*/) { return false; }
  virtual bool do_load_prefix(const Stored& /*p*/, int /*slot*/, int /*n*/) { return false; }
  virtual void do_release(int /*slot*/) {}

  std::shared_ptr<const Weights> weights_;
  int ctx_, max_step_tokens_;
  std::vector<int> n_past_;  // [slots]
};

// A batch of one slot over a single-sequence session (backend.h): each step
// runs its one chunk through session->forward, so every executor, rung and
// KV-cache kind a session has (the reference, --cache-type-k, the CUDA
// graphs) runs under the engine. One slot: there is no batch to be
// invariant to; a prompt's bits may depend on how it is cut into chunks, as
// a session's prefill chunks do.
std::unique_ptr<BatchBackend> make_sequence_batch(std::unique_ptr<Backend> session,
                                                  int max_step_tokens);

}  // namespace lr
