#include "tokenizer/spm.h"

#include <algorithm>
#include <queue>

namespace lr {

namespace {

struct Symbol {
  uint32_t off, len;  // bytes of the text; len 0 once merged away
  int32_t prev, next;
};

struct Candidate {
  float score;
  int32_t left, right;
  uint32_t len;  // combined length when queued
  bool operator<(const Candidate& o) const {  // max-heap: highest score, then leftmost
    return score != o.score ? score < o.score : left > o.left;
  }
};

// Byte length of the character starting with c; lenient, so stray bytes make
// one-byte symbols that later fall back to byte tokens.
uint32_t char_len(unsigned char c) {
  if (c < 0xC0) return 1;
  if (c < 0xE0) return 2;
  if (c < 0xF0) return 3;
  return 4;
}

// Token types a merge may produce (control, unknown, unused and byte entries are
// never formed from plain text).
bool mergeable(TokenType t) {
  return t == TokenType::Normal || t == TokenType::UserDefined || t == TokenType::Undefined;
}

std::optional<int32_t> lookup(const Vocab& v, std::string_view s) {
  auto id = v.find(s);
  if (id && mergeable(v.type[*id])) return id;
  return std::nullopt;
}

}  // namespace

std::string spm_escape_spaces(std::string_view text) {
  std::string out;
  out.reserve(text.size() + text.size() / 4);
  for (char c : text) {
    if (c == ' ') out += "\xE2\x96\x81";
    else out += c;
  }
  return out;
}

void spm_encode(const Vocab& v, std::string_view text, std::vector<int32_t>& out) {
  if (text.empty()) return;
  std::vector<Symbol> sym;
  sym.reserve(text.size());
  for (size_t off = 0; off < text.size();) {
    const uint32_t len = std::min<uint32_t>(char_len(static_cast<unsigned char>(text[off])),
                                            static_cast<uint32_t>(text.size() - off));
    const auto i = static_cast<int32_t>(sym.size());
    sym.push_back(Symbol{static_cast<uint32_t>(off), len, i - 1, i + 1});
    off += len;
  }
  sym.back().next = -1;

  std::priority_queue<Candidate> queue;
  auto consider = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const uint32_t len = sym[l].len + sym[r].len;
    if (auto id = lookup(v, text.substr(sym[l].off, len)))
      queue.push(Candidate{v.score[*id], l, r, len});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(sym.size()); ++i) consider(i, i + 1);

  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& l = sym[c.left];
    Symbol& r = sym[c.right];
    if (l.len == 0 || r.len == 0 || l.next != c.right || l.len + r.len != c.len) continue;
    l.len += r.len;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = c.left;
    r.len = 0;
    consider(l.prev, c.left);
    consider(c.left, l.next);
  }

  for (int32_t i = 0; i >= 0; i = sym[i].next) {
    const std::string_view piece = text.substr(sym[i].off, sym[i].len);
    if (auto id = lookup(v, piece)) {
      out.push_back(*id);
      continue;
    }
    const bool bytes_ok = std::all_of(piece.begin(), piece.end(), [&](char ch) {
      return v.byte_token[static_cast<uint8_t>(ch)] >= 0;
    });
    if (bytes_ok) {
      for (char ch : piece) out.push_back(v.byte_token[static_cast<uint8_t>(ch)]);
    } else if (v.unk >= 0) {
      out.push_back(v.unk);  // no byte fallback: one unknown token per character
    }
  }
}

}  // namespace lr
