// Hash-consed parse stacks and the step over one code point.
#include "grammar/stacks.h"

#include <algorithm>

namespace lr::grammar {
namespace {

constexpr uint32_t kEmptySlot = UINT32_MAX;

size_t slot_of(uint32_t elem, uint32_t parent, size_t mask) {
  uint64_t h = (uint64_t{elem} << 32 | parent) * 0x9E3779B97F4A7C15ull;
  return static_cast<size_t>(h >> 29) & mask;
}

}  // namespace

void StackPool::clear() {
  nodes_.assign(1, StackNode{});  // node 0: the empty stack
  table_.assign(64, kEmptySlot);
  filled_ = 0;
}

void StackPool::rehash(size_t capacity) {
  table_.assign(capacity, kEmptySlot);
  filled_ = 0;
  const size_t mask = capacity - 1;
  for (uint32_t id = 1; id < nodes_.size(); ++id) {
    size_t s = slot_of(nodes_[id].elem, nodes_[id].parent, mask);
    while (table_[s] != kEmptySlot) s = (s + 1) & mask;
    table_[s] = id;
    ++filled_;
  }
}

uint32_t StackPool::intern(uint32_t elem, uint32_t parent) {
  const size_t mask = table_.size() - 1;
  size_t s = slot_of(elem, parent, mask);
  size_t reusable = SIZE_MAX;  // the first stale slot on the probe path
  for (;; s = (s + 1) & mask) {
    uint32_t id = table_[s];
    if (id == kEmptySlot) break;
    if (id >= nodes_.size()) {
      if (reusable == SIZE_MAX) reusable = s;
    } else if (nodes_[id].elem == elem && nodes_[id].parent == parent) {
      return id;
    }
  }
  uint32_t depth = nodes_[parent].depth + 1;
  if (depth > kMaxStackDepth) return kNoStack;
  auto id = static_cast<uint32_t>(nodes_.size());
  nodes_.push_back({elem, parent, depth});
  if (reusable != SIZE_MAX) {
    table_[reusable] = id;
  } else {
    table_[s] = id;
    if (++filled_ * 2 > table_.size()) rehash(table_.size() * 2);
  }
  return id;
}

bool Stepper::seen(uint32_t id) {
  if (id >= stamp_.size()) stamp_.resize(std::max<size_t>(id + 1, stamp_.size() * 2), 0);
  if (stamp_[id] == gen_) return true;
  stamp_[id] = gen_;
  return false;
}

// Pops work_ until every stack has a character on top (or is empty):
// a reference is replaced by each alternative of its rule, over the stack
// that resumes after it. seen() makes this linear in the distinct stacks.
bool Stepper::expand(StackPool& pool, size_t out_begin, std::vector<uint32_t>& out) {
  if (++gen_ == 0) {
    std::fill(stamp_.begin(), stamp_.end(), 0);
    gen_ = 1;
  }
  size_t steps = 0;
  while (!work_.empty()) {
    uint32_t s = work_.back();
    work_.pop_back();
    if (seen(s)) continue;
    if (++steps > kMaxExpandSteps) return false;
    if (s == 0) {
      out.push_back(0);
      continue;
    }
    const StackNode node = pool[s];  // a copy: intern() may grow the pool
    const Elem e = g_.elem(node.elem);
    if (e.kind == Elem::Char) {
      out.push_back(s);
      if (out.size() - out_begin > kMaxStacks) return false;
      continue;
    }
    uint32_t cont = node.parent;
    if (g_.elem(node.elem + 1).kind != Elem::End) cont = pool.intern(node.elem + 1, node.parent);
    if (cont == kNoStack) continue;  // past kMaxStackDepth: this path ends
    for (uint32_t alt : g_.alternatives(e.arg)) {
      uint32_t t = g_.elem(alt).kind == Elem::End ? cont : pool.intern(alt, cont);
      if (t != kNoStack) work_.push_back(t);
    }
  }
  return true;
}

bool Stepper::start(StackPool& pool, std::vector<uint32_t>& out) {
  work_.clear();
  size_t begin = out.size();
  for (uint32_t alt : g_.alternatives(g_.root()))
    work_.push_back(g_.elem(alt).kind == Elem::End ? 0 : pool.intern(alt, 0));
  return expand(pool, begin, out);
}

bool Stepper::advance(StackPool& pool, const uint32_t* tops, size_t n, uint32_t cp,
                      std::vector<uint32_t>& out) {
  // `tops` may point into `out`: read them all before expand() appends.
  work_.clear();
  size_t begin = out.size();
  for (size_t i = 0; i < n; ++i) {
    if (tops[i] == 0) continue;
    const StackNode node = pool[tops[i]];
    if (!g_.char_class(g_.elem(node.elem).arg).contains(cp)) continue;
    uint32_t next = node.elem + 1;
    uint32_t t = g_.elem(next).kind == Elem::End ? node.parent : pool.intern(next, node.parent);
    if (t != kNoStack) work_.push_back(t);
  }
  if (work_.empty()) return true;
  return expand(pool, begin, out);
}

bool Stepper::partial_ok(const StackPool& pool, const uint32_t* tops, size_t n, uint32_t lo,
                         uint32_t hi) const {
  for (size_t i = 0; i < n; ++i)
    if (tops[i] != 0 && g_.char_class(g_.elem(pool[tops[i]].elem).arg).intersects(lo, hi))
      return true;
  return false;
}

}  // namespace lr::grammar
