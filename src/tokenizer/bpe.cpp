#include "tokenizer/bpe.h"

#include <queue>

#include "tokenizer/byte_level.h"

namespace lr {

namespace {

struct Symbol {
  int32_t id;        // current token, -1 when the merged text is not a vocab entry
  int32_t prev, next;
  uint32_t begin, end;  // byte range in the word
};

struct Candidate {
  int32_t rank;
  int32_t left, right;  // symbol indices
  int32_t left_id, right_id;
  bool operator>(const Candidate& o) const {
    return rank != o.rank ? rank > o.rank : left > o.left;
  }
};

}  // namespace

void bpe_encode_word(const Vocab& v, std::string_view word, bool ignore_merges,
                     std::vector<int32_t>& out) {
  if (word.empty()) return;
  if (ignore_merges) {
    if (auto id = v.find(byte_level::encode(word))) {
      out.push_back(*id);
      return;
    }
  }
  if (word.size() == 1) {
    const int32_t id = v.byte_token[static_cast<uint8_t>(word[0])];
    if (id >= 0) out.push_back(id);
    return;
  }

  std::vector<Symbol> sym(word.size());
  for (size_t i = 0; i < word.size(); ++i) {
    sym[i] = Symbol{v.byte_token[static_cast<uint8_t>(word[i])], static_cast<int32_t>(i) - 1,
                    static_cast<int32_t>(i) + 1, static_cast<uint32_t>(i),
                    static_cast<uint32_t>(i + 1)};
  }
  sym.back().next = -1;

  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto consider = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0 || sym[l].id < 0 || sym[r].id < 0) return;
    if (const Vocab::Merge* m = v.find_merge(sym[l].id, sym[r].id))
      queue.push(Candidate{m->rank, l, r, sym[l].id, sym[r].id});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(sym.size()); ++i) consider(i, i + 1);

  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& l = sym[c.left];
    Symbol& r = sym[c.right];
    // Skip candidates made stale by an earlier merge.
    if (l.begin == l.end || r.begin == r.end || l.next != c.right || l.id != c.left_id ||
        r.id != c.right_id)
      continue;
    l.id = v.find_merge(c.left_id, c.right_id)->result;
    l.end = r.end;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = c.left;
    r.begin = r.end;  // dead
    consider(l.prev, c.left);
    consider(c.left, l.next);
  }

  for (int32_t i = 0; i >= 0; i = sym[i].next) {
    const Symbol& s = sym[i];
    if (s.id >= 0) {
      out.push_back(s.id);
      continue;
    }
    // Not a vocab entry: fall back to the tokens of its single bytes (a byte with
    // no token of its own is dropped).
    for (uint32_t b = s.begin; b < s.end; ++b) {
      const int32_t id = v.byte_token[static_cast<uint8_t>(word[b])];
      if (id >= 0) out.push_back(id);
    }
  }
}

}  // namespace lr
