// The parsed rules -> checked, flat Grammar: refuses left recursion (which
// the stack-set matcher would expand forever) and lays every alternative out
// as a run of elements closed by End.
#include <fmt/format.h>

#include "core/error.h"
#include "grammar/gbnf_compiler.h"

namespace lr::grammar {

void GbnfCompiler::check_left_recursion() {
  const size_t n = rules_.size();
  // Nullable rules by a worklist: each alternative counts the references it
  // still waits on; one with a character can never be empty.
  std::vector<char> nullable(n, 0);
  std::vector<std::vector<std::pair<uint32_t, uint32_t>>> users(n);  // rule -> (rule, alt) using it
  std::vector<std::vector<uint32_t>> waiting(n);
  std::vector<uint32_t> work;
  for (uint32_t r = 0; r < n; ++r) {
    waiting[r].resize(rules_[r].size());
    for (uint32_t a = 0; a < rules_[r].size(); ++a) {
      uint32_t w = 0;
      bool has_char = false;
      for (const Elem& e : rules_[r][a]) {
        if (e.kind == Elem::Char)
          has_char = true;
        else
          ++w, users[e.arg].emplace_back(r, a);
      }
      waiting[r][a] = has_char ? UINT32_MAX : w;
      if (w == 0 && !has_char && !nullable[r]) nullable[r] = 1, work.push_back(r);
    }
  }
  while (!work.empty()) {
    uint32_t r = work.back();
    work.pop_back();
    for (auto [u, a] : users[r]) {
      if (waiting[u][a] == UINT32_MAX || waiting[u][a] == 0) continue;
      if (--waiting[u][a] == 0 && !nullable[u]) nullable[u] = 1, work.push_back(u);
    }
  }
  // Left edges: the rules an alternative can start with (past nullable ones).
  std::vector<std::vector<uint32_t>> left(n);
  for (uint32_t r = 0; r < n; ++r)
    for (const Seq& alt : rules_[r])
      for (const Elem& e : alt) {
        if (e.kind == Elem::Char) break;
        left[r].push_back(e.arg);
        if (!nullable[e.arg]) break;
      }
  // A cycle among left edges, by an iterative depth-first search.
  std::vector<uint8_t> color(n, 0);  // 0 new, 1 on the path, 2 done
  std::vector<std::pair<uint32_t, size_t>> path;
  for (uint32_t s = 0; s < n; ++s) {
    if (color[s]) continue;
    path.emplace_back(s, 0);
    color[s] = 1;
    while (!path.empty()) {
      auto& [r, i] = path.back();
      if (i == left[r].size()) {
        color[r] = 2;
        path.pop_back();
        continue;
      }
      uint32_t next = left[r][i++];
      if (color[next] == 1) {
        // Name the written rule, not a helper: "a#3" belongs to "a".
        std::string name = g_.rule_names_[next];
        name = name.substr(0, name.find('#'));
        error_at(
            where_[ids_.at(name)],
            fmt::format("left recursion: rule '{}' can reach itself before matching a character",
                        name));
      }
      if (color[next] == 0) {
        color[next] = 1;
        path.emplace_back(next, 0);
      }
    }
  }
}

void GbnfCompiler::flatten() {
  g_.rule_alts_.resize(rules_.size());
  g_.elems_.reserve(elements_ + rules_.size() * 2);
  for (size_t r = 0; r < rules_.size(); ++r) {
    for (const Seq& alt : rules_[r]) {
      g_.rule_alts_[r].push_back(static_cast<uint32_t>(g_.elems_.size()));
      g_.elems_.insert(g_.elems_.end(), alt.begin(), alt.end());
      g_.elems_.push_back({Elem::End, 0});
    }
    Alts().swap(rules_[r]);
  }
  if (g_.elems_.size() > kMaxElements) fail("grammar: too large: over {} elements", kMaxElements);
}

}  // namespace lr::grammar
