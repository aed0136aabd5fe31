// The token trie and the mask walk.
#include "grammar/token_mask.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace lr::grammar {

TokenMask::TokenMask(std::vector<std::string> token_bytes, std::vector<int32_t> end_tokens)
    : n_vocab_(token_bytes.size()), end_tokens_(std::move(end_tokens)) {
  std::vector<char> is_end(n_vocab_, 0);
  for (int32_t t : end_tokens_) {
    if (t < 0 || static_cast<size_t>(t) >= n_vocab_)
      fail("grammar: end token {} is outside the vocabulary ({})", t, n_vocab_);
    is_end[static_cast<size_t>(t)] = 1;
  }
  std::vector<int32_t> order;
  for (size_t i = 0; i < n_vocab_; ++i)
    if (!token_bytes[i].empty() && !is_end[i]) order.push_back(static_cast<int32_t>(i));
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return token_bytes[a] < token_bytes[b]; });
  // Sorted strings list the trie in preorder: each string shares its longest
  // common prefix with the one before, and adds nodes for the rest.
  std::vector<uint32_t> path;  // node index per depth - 1
  const std::string* prev = nullptr;
  for (int32_t id : order) {
    const std::string& s = token_bytes[id];
    size_t common = 0;
    if (prev != nullptr)
      while (common < s.size() && common < prev->size() && s[common] == (*prev)[common]) ++common;
    while (path.size() > common) {
      nodes_[path.back()].end = static_cast<uint32_t>(nodes_.size());
      path.pop_back();
    }
    for (size_t d = common; d < s.size(); ++d) {
      path.push_back(static_cast<uint32_t>(nodes_.size()));
      nodes_.push_back({static_cast<uint32_t>(d + 1), 0, 0, 0, static_cast<uint8_t>(s[d])});
    }
    Node& last = nodes_[path.back()];
    if (last.tok_count == 0) last.tok_begin = static_cast<uint32_t>(ids_.size());
    ++last.tok_count;
    ids_.push_back(id);
    max_depth_ = std::max<uint32_t>(max_depth_, static_cast<uint32_t>(s.size()));
    prev = &s;
  }
  for (uint32_t n : path) nodes_[n].end = static_cast<uint32_t>(nodes_.size());
}

namespace {

// The walk's state after the bytes down to one trie depth: a range of
// stacks in the shared buffer and the partial code point.
struct Level {
  size_t begin, end;  // the stacks: buf[begin, end)
  size_t buf_end;     // buf's size once this level was made
  size_t pool_size;   // the pool's size once this level was made
  Utf8State utf8;
};

// A memo of steps whose stacks are all in the matcher's own pool (which the
// walk never truncates). Inside a JSON string, say, every plain character
// leads back to the same stacks, so most trie nodes hit it.
struct StepMemo {
  static constexpr size_t kIn = 4, kOut = 8, kSlots = 4096;
  struct Entry {
    uint32_t gen = 0, cp = 0;
    uint8_t n_in = 0, n_out = 0;
    bool ok = false;
    uint32_t in[kIn], out[kOut];
  };
  std::vector<Entry> slots = std::vector<Entry>(kSlots);
  uint32_t gen = 0;

  static size_t slot(const uint32_t* tops, size_t n, uint32_t cp) {
    uint64_t h = cp * 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < n; ++i) h = (h ^ tops[i]) * 0xFF51AFD7ED558CCDull;
    return static_cast<size_t>(h >> 52) & (kSlots - 1);
  }
  const Entry* find(const uint32_t* tops, size_t n, uint32_t cp) const {
    if (n > kIn) return nullptr;
    const Entry& e = slots[slot(tops, n, cp)];
    if (e.gen != gen || e.cp != cp || e.n_in != n || !std::equal(tops, tops + n, e.in))
      return nullptr;
    return &e;
  }
  void store(const uint32_t* tops, size_t n, uint32_t cp, const uint32_t* out, size_t n_out,
             bool ok, size_t base) {
    if (n > kIn || n_out > kOut) return;
    for (size_t i = 0; i < n; ++i)
      if (tops[i] >= base) return;
    for (size_t i = 0; i < n_out; ++i)
      if (out[i] >= base) return;
    Entry& e = slots[slot(tops, n, cp)];
    e = {gen, cp, static_cast<uint8_t>(n), static_cast<uint8_t>(n_out), ok, {}, {}};
    std::copy(tops, tops + n, e.in);
    std::copy(out, out + n_out, e.out);
  }
};

struct Scratch {
  StackPool pool;
  std::vector<uint32_t> buf;
  std::vector<Level> levels;
  StepMemo memo;
};

}  // namespace

void TokenMask::fill(const Matcher& m, std::vector<uint8_t>& allowed) const {
  allowed.assign(n_vocab_, 0);
  if (m.can_end())
    for (int32_t t : end_tokens_) allowed[static_cast<size_t>(t)] = 1;
  thread_local Scratch sc;
  sc.pool = m.pool_;
  sc.buf.assign(m.tops_.begin(), m.tops_.end());
  sc.levels.resize(max_depth_ + 1);
  sc.levels[0] = {0, sc.buf.size(), sc.buf.size(), sc.pool.size(), m.utf8_};
  const size_t base = sc.pool.size();  // the matcher's nodes: never truncated in this walk
  if (++sc.memo.gen == 0) {
    sc.memo.slots.assign(StepMemo::kSlots, {});
    sc.memo.gen = 1;
  }
  Stepper stepper(m.grammar());
  for (size_t i = 0; i < nodes_.size();) {
    const Node& node = nodes_[i];
    const Level& up = sc.levels[node.depth - 1];
    sc.pool.truncate(up.pool_size);
    sc.buf.resize(up.buf_end);
    Level here = up;
    uint32_t cp = 0;
    bool ok = true;
    switch (here.utf8.feed(node.byte, cp)) {
      case Utf8State::Invalid:
        ok = false;
        break;
      case Utf8State::Partial: {  // prune early if no completion can be taken
        uint32_t lo = 0, hi = 0;
        ok = here.utf8.bounds(lo, hi) &&
             stepper.partial_ok(sc.pool, sc.buf.data() + up.begin, up.end - up.begin, lo, hi);
        break;
      }
      case Utf8State::Complete: {
        here.begin = sc.buf.size();
        const size_t n = up.end - up.begin;
        if (const StepMemo::Entry* e = sc.memo.find(sc.buf.data() + up.begin, n, cp)) {
          sc.buf.insert(sc.buf.end(), e->out, e->out + e->n_out);
          ok = e->ok;
        } else {
          ok = stepper.advance(sc.pool, sc.buf.data() + up.begin, n, cp, sc.buf);
          sc.memo.store(sc.buf.data() + up.begin, n, cp, sc.buf.data() + here.begin,
                        sc.buf.size() - here.begin, ok, base);
        }
        ok = ok && sc.buf.size() > here.begin;
        here.end = here.buf_end = sc.buf.size();
        here.pool_size = sc.pool.size();
        break;
      }
    }
    if (!ok) {
      i = node.end;  // no token under this prefix can be taken
      continue;
    }
    sc.levels[node.depth] = here;
    // A token ending inside a code point was checked by the Partial case.
    for (uint32_t k = 0; k < node.tok_count; ++k)
      allowed[static_cast<size_t>(ids_[node.tok_begin + k])] = 1;
    ++i;
  }
}

}  // namespace lr::grammar
