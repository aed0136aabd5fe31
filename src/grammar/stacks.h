// Internal: parse stacks as hash-consed linked lists of grammar positions.
//
// A stack is a node id; a node is (position, parent stack). The top position
// points at a character element; each parent is the position to resume at
// when the rule above it ends. Node 0 is the empty stack: the sentence may
// end there. Because identical stacks get the same id, a set of stacks is a
// set of ids, and two paths of an ambiguous grammar that meet are merged.
// The pool only grows within a step and is cut back with truncate(), so the
// token-trie walk allocates nodes as a stack allocator per trie depth.
#pragma once

#include <cstdint>
#include <vector>

#include "grammar/grammar.h"

namespace lr::grammar {

struct StackNode {
  uint32_t elem = 0;
  uint32_t parent = 0;
  uint32_t depth = 0;
};

inline constexpr uint32_t kNoStack = UINT32_MAX;

class StackPool {
 public:
  StackPool() { clear(); }
  void clear();
  // The stack (elem, parent), or kNoStack past kMaxStackDepth.
  uint32_t intern(uint32_t elem, uint32_t parent);
  const StackNode& operator[](uint32_t id) const { return nodes_[id]; }
  size_t size() const { return nodes_.size(); }
  // Forgets nodes made since size() was n (ids >= n); their table slots stay
  // as stale entries that a lookup checks against the node they name.
  void truncate(size_t n) { nodes_.resize(n); }

 private:
  void rehash(size_t capacity);
  std::vector<StackNode> nodes_;
  std::vector<uint32_t> table_;
  size_t filled_ = 0;
};

// Moves sets of stacks over code points. Not thread-safe: one per thread.
class Stepper {
 public:
  explicit Stepper(const Grammar& g) : g_(g) {}
  // The stacks at the start of the root rule. False on a limit (kMaxStacks...).
  bool start(StackPool& pool, std::vector<uint32_t>& out);
  // Appends to `out` the stacks after `cp`, from the n stacks at `tops`.
  // False when a limit was hit (the caller rejects the code point).
  bool advance(StackPool& pool, const uint32_t* tops, size_t n, uint32_t cp,
               std::vector<uint32_t>& out);
  // Whether a stack's top class meets [lo, hi] (the completions of a partial
  // UTF-8 sequence).
  bool partial_ok(const StackPool& pool, const uint32_t* tops, size_t n, uint32_t lo,
                  uint32_t hi) const;

 private:
  bool expand(StackPool& pool, size_t out_begin, std::vector<uint32_t>& out);
  bool seen(uint32_t id);
  const Grammar& g_;
  std::vector<uint32_t> stamp_;
  uint32_t gen_ = 0;
  std::vector<uint32_t> work_;
};

}  // namespace lr::grammar
