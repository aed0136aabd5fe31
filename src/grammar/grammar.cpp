// Character classes and the Grammar entry points.
#include "grammar/grammar.h"

#include <algorithm>

#include "grammar/gbnf_compiler.h"

namespace lr::grammar {

CharClass make_class(std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negated) {
  std::sort(ranges.begin(), ranges.end());
  std::vector<std::pair<uint32_t, uint32_t>> merged;
  for (auto r : ranges) {
    if (!merged.empty() && r.first <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, r.second);
    } else {
      merged.push_back(r);
    }
  }
  CharClass c;
  if (negated) {
    uint32_t next = 0;
    for (auto [lo, hi] : merged) {
      if (lo > next) c.ranges.emplace_back(next, lo - 1);
      next = hi + 1;
    }
    if (next <= kMaxCodePoint) c.ranges.emplace_back(next, kMaxCodePoint);
  } else {
    c.ranges = std::move(merged);
  }
  for (auto [lo, hi] : c.ranges)
    for (uint32_t cp = lo; cp <= hi && cp < 128; ++cp) c.ascii[cp >> 6] |= uint64_t{1} << (cp & 63);
  return c;
}

bool CharClass::contains(uint32_t cp) const {
  if (cp < 128) return (ascii[cp >> 6] >> (cp & 63)) & 1;
  // Classes are short: a linear scan beats a binary search on them.
  for (auto [lo, hi] : ranges) {
    if (cp < lo) return false;
    if (cp <= hi) return true;
  }
  return false;
}

bool CharClass::intersects(uint32_t lo, uint32_t hi) const {
  for (auto [a, b] : ranges)
    if (a <= hi && lo <= b) return true;
  return false;
}

Grammar Grammar::parse(std::string_view gbnf, std::string_view root) {
  return GbnfCompiler(gbnf).run(root);
}

std::shared_ptr<const Grammar> Grammar::parse_shared(std::string_view gbnf, std::string_view root) {
  return std::make_shared<const Grammar>(parse(gbnf, root));
}

}  // namespace lr::grammar
