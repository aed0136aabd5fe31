// A context-free grammar over Unicode code points, parsed from GBNF (the
// format of llama.cpp's grammars/README.md) and compiled into flat rules that
// the Matcher walks. Immutable after parse: share one across sequences and
// threads through a shared_ptr.
//
// Hard limits, so that no input text can make parsing or matching crash or
// hang (each one exceeded is an lr::Error naming it, or for the matcher a
// rejected continuation):
//   kMaxSourceBytes   1 MiB of grammar text
//   kMaxRules         65536 rules, the helper rules of groups/repetitions included
//   kMaxElements      2^21 compiled elements (characters, references, ends)
//   kMaxNesting       64 levels of parentheses
//   kMaxRepeat        2000 as the bound of {m,n} (as llama.cpp's threshold)
//   kMaxStacks        4096 parse stacks in one matcher state
//   kMaxStackDepth    4096 nested rule frames in one stack (e.g. JSON nesting)
//   kMaxExpandSteps   2^17 rule expansions to advance over one code point
// Left recursion (a rule that can reach itself before consuming a character)
// is refused at parse time: the stack-set matcher cannot run it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace lr::grammar {

inline constexpr size_t kMaxSourceBytes = 1u << 20;
inline constexpr size_t kMaxRules = 65536;
inline constexpr size_t kMaxElements = 1u << 21;
inline constexpr int kMaxNesting = 64;
inline constexpr uint64_t kMaxRepeat = 2000;
inline constexpr size_t kMaxStacks = 4096;
inline constexpr uint32_t kMaxStackDepth = 4096;
inline constexpr size_t kMaxExpandSteps = 1u << 17;
inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;

// One compiled element. An alternative is a run of elements closed by End.
struct Elem {
  enum Kind : uint8_t { End, Char, Ref };
  Kind kind = End;
  uint32_t arg = 0;  // Char: index into classes(); Ref: rule id
};

// A set of code points: sorted, disjoint, non-adjacent inclusive ranges
// (negation is applied at compile time), plus a bitmap of its ASCII part for
// the hot path.
struct CharClass {
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  uint64_t ascii[2] = {0, 0};
  bool contains(uint32_t cp) const;
  bool intersects(uint32_t lo, uint32_t hi) const;  // any code point of [lo, hi]
};

class Grammar {
 public:
  // Throws lr::Error naming the problem and its line:column.
  static Grammar parse(std::string_view gbnf, std::string_view root = "root");
  static std::shared_ptr<const Grammar> parse_shared(std::string_view gbnf,
                                                     std::string_view root = "root");

  uint32_t root() const { return root_; }
  size_t rule_count() const { return rule_alts_.size(); }
  const std::string& rule_name(uint32_t rule) const { return rule_names_[rule]; }
  // The start element of each alternative of a rule (an empty alternative
  // starts at an End).
  const std::vector<uint32_t>& alternatives(uint32_t rule) const { return rule_alts_[rule]; }
  const Elem& elem(uint32_t pos) const { return elems_[pos]; }
  const CharClass& char_class(uint32_t id) const { return classes_[id]; }
  size_t element_count() const { return elems_.size(); }

 private:
  friend class GbnfCompiler;
  std::vector<Elem> elems_;
  std::vector<CharClass> classes_;
  std::vector<std::vector<uint32_t>> rule_alts_;
  std::vector<std::string> rule_names_;
  uint32_t root_ = 0;
};

}  // namespace lr::grammar
