// The stack-set matcher over code points.
#include "grammar/matcher.h"

#include <algorithm>

#include "core/error.h"

namespace lr::grammar {

Matcher::Matcher(std::shared_ptr<const Grammar> grammar) : grammar_(std::move(grammar)) {
  LR_ASSERT(grammar_ != nullptr);
  Stepper stepper(*grammar_);
  if (!stepper.start(pool_, tops_))
    fail("grammar: the start state exceeds the matcher limits ({} stacks, depth {})", kMaxStacks,
         kMaxStackDepth);
  compact();
}

bool Matcher::accept_bytes(std::string_view bytes) {
  if (bytes.empty()) return true;
  // Only nodes are added while stepping: truncating the pool undoes a failure.
  const size_t pool_size = pool_.size();
  std::vector<uint32_t> tops = tops_, next;
  Utf8State u = utf8_;
  Stepper stepper(*grammar_);
  auto undo = [&] {
    pool_.truncate(pool_size);
    return false;
  };
  for (char c : bytes) {
    uint32_t cp = 0;
    auto r = u.feed(static_cast<uint8_t>(c), cp);
    if (r == Utf8State::Invalid) return undo();
    if (r == Utf8State::Partial) continue;
    next.clear();
    if (!stepper.advance(pool_, tops.data(), tops.size(), cp, next) || next.empty()) return undo();
    tops.swap(next);
  }
  if (u.remain > 0) {
    uint32_t lo = 0, hi = 0;
    if (!u.bounds(lo, hi) || !stepper.partial_ok(pool_, tops.data(), tops.size(), lo, hi))
      return undo();
  }
  tops_.swap(tops);
  utf8_ = u;
  compact();
  return true;
}

bool Matcher::can_end() const {
  return utf8_.remain == 0 && std::find(tops_.begin(), tops_.end(), 0u) != tops_.end();
}

std::string Matcher::state_key() const {
  std::vector<std::vector<uint32_t>> stacks;
  for (uint32_t s : tops_) {
    std::vector<uint32_t>& v = stacks.emplace_back();
    for (uint32_t id = s; id != 0; id = pool_[id].parent) v.push_back(pool_[id].elem);
  }
  std::sort(stacks.begin(), stacks.end());
  std::string key;
  auto put = [&](uint32_t x) { key.append(reinterpret_cast<const char*>(&x), sizeof x); };
  put(utf8_.value);
  put(uint32_t(utf8_.remain) << 8 | utf8_.len);
  for (const auto& v : stacks) {
    put(uint32_t(v.size()));
    for (uint32_t e : v) put(e);
  }
  return key;
}

bool Matcher::dead() const {
  return std::all_of(tops_.begin(), tops_.end(), [](uint32_t s) { return s == 0; });
}

// Rebuilds the pool with only the nodes the current stacks reach, so it stays
// as small as the state however long the text grows.
void Matcher::compact() {
  StackPool fresh;
  std::vector<uint32_t> remap(pool_.size(), kNoStack), chain;
  remap[0] = 0;
  for (uint32_t& top : tops_) {
    chain.clear();
    for (uint32_t s = top; remap[s] == kNoStack; s = pool_[s].parent) chain.push_back(s);
    for (size_t i = chain.size(); i-- > 0;) {
      const StackNode& n = pool_[chain[i]];
      remap[chain[i]] = fresh.intern(n.elem, remap[n.parent]);
    }
    top = remap[top];
  }
  pool_ = std::move(fresh);
}

}  // namespace lr::grammar
