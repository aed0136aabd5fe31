// GBNF text -> rules of element sequences. Groups and repetitions become
// helper rules named "<rule>#<n>" ('#' cannot occur in a written name), so
// every sequence item is one element: a character class or a rule reference.
//
// A rule runs until the next "name ::=" or the end of the text, so
// alternatives may continue on the next line at any nesting (a superset of
// llama.cpp's layout rules; every grammar it accepts reads the same here).
#include <fmt/format.h>

#include "core/error.h"
#include "grammar/gbnf_compiler.h"

namespace lr::grammar {
namespace {

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

void GbnfCompiler::error_at(size_t offset, const std::string& what) const {
  size_t line = 1, col = 1;
  for (size_t i = 0; i < offset && i < src_.size(); ++i) {
    if (src_[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  fail("grammar: {} at line {}, column {}", what, line, col);
}

void GbnfCompiler::count(size_t n) {
  elements_ += n;
  if (elements_ > kMaxElements)
    error_at(pos_, fmt::format("grammar too large: over {} elements", kMaxElements));
}

void GbnfCompiler::skip_space() {
  while (pos_ < src_.size()) {
    char c = src_[pos_];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      ++pos_;
    } else if (c == '#') {
      while (pos_ < src_.size() && src_[pos_] != '\n') ++pos_;
    } else {
      break;
    }
  }
}

std::string GbnfCompiler::parse_name() {
  size_t start = pos_;
  while (pos_ < src_.size() && is_name_char(src_[pos_])) ++pos_;
  if (pos_ == start) error_at(start, "expected a rule name");
  return std::string(src_.substr(start, pos_ - start));
}

// A rule name followed by "::=": the current rule has ended.
bool GbnfCompiler::at_rule_start() const {
  size_t p = pos_;
  while (p < src_.size() && is_name_char(src_[p])) ++p;
  if (p == pos_) return false;
  while (p < src_.size() && (src_[p] == ' ' || src_[p] == '\t')) ++p;
  return src_.substr(p, 3) == "::=";
}

uint32_t GbnfCompiler::rule_id(const std::string& name, size_t offset) {
  auto it = ids_.find(name);
  if (it != ids_.end()) return it->second;
  if (rules_.size() >= kMaxRules)
    error_at(offset, fmt::format("too many rules (limit {})", kMaxRules));
  auto id = static_cast<uint32_t>(rules_.size());
  ids_.emplace(name, id);
  g_.rule_names_.push_back(name);
  rules_.emplace_back();
  defined_.push_back(false);
  where_.push_back(offset);
  helpers_.push_back(0);
  return id;
}

uint32_t GbnfCompiler::new_helper(uint32_t parent, Alts alts) {
  std::string name = fmt::format("{}#{}", g_.rule_names_[parent], ++helpers_[parent]);
  uint32_t id = rule_id(name, pos_);
  rules_[id] = std::move(alts);
  defined_[id] = true;
  return id;
}

uint32_t GbnfCompiler::add_class(std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negated) {
  // Literal characters are most of a grammar's classes: share them.
  bool single = !negated && ranges.size() == 1 && ranges[0].first == ranges[0].second;
  if (single) {
    auto it = single_char_.find(ranges[0].first);
    if (it != single_char_.end()) return it->second;
  }
  auto id = static_cast<uint32_t>(g_.classes_.size());
  if (single) single_char_.emplace(ranges[0].first, id);
  g_.classes_.push_back(make_class(std::move(ranges), negated));
  return id;
}

uint32_t GbnfCompiler::parse_hex(int digits) {
  uint32_t v = 0;
  for (int i = 0; i < digits; ++i) {
    int h = pos_ < src_.size() ? hex_value(src_[pos_]) : -1;
    if (h < 0) error_at(pos_, fmt::format("bad escape: expected {} hex digits", digits));
    v = v * 16 + static_cast<uint32_t>(h);
    ++pos_;
  }
  if (v > kMaxCodePoint)
    error_at(pos_, fmt::format("bad escape: code point {:#x} is beyond U+10FFFF", v));
  return v;
}

// One character of a literal or class (an escape or one UTF-8 sequence).
uint32_t GbnfCompiler::parse_char(bool in_class) {
  size_t start = pos_;
  auto c = static_cast<unsigned char>(src_[pos_++]);
  if (c == '\\') {
    if (pos_ >= src_.size()) error_at(start, "bad escape at the end of the text");
    char e = src_[pos_++];
    switch (e) {
      case 'x':
        return parse_hex(2);
      case 'u':
        return parse_hex(4);
      case 'U':
        return parse_hex(8);
      case 'n':
        return '\n';
      case 't':
        return '\t';
      case 'r':
        return '\r';
      case '\\':
      case '"':
      case '[':
      case ']':
      case '/':
      case '\'':
        return static_cast<unsigned char>(e);
      case '-':
      case '^':
        if (in_class) return static_cast<unsigned char>(e);
        break;
      default:
        break;
    }
    error_at(start, fmt::format("bad escape '\\{}'", e));
  }
  if (c < 0x80) return c;
  int len = c >= 0xF0 && c < 0xF8 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 0;
  if (c >= 0xF8) len = 0;
  if (len == 0) error_at(start, "invalid UTF-8 in the grammar text");
  uint32_t cp = c & (0x7F >> len);
  for (int i = 1; i < len; ++i) {
    if (pos_ >= src_.size() || (static_cast<unsigned char>(src_[pos_]) & 0xC0) != 0x80)
      error_at(start, "invalid UTF-8 in the grammar text");
    cp = (cp << 6) | (static_cast<unsigned char>(src_[pos_++]) & 0x3F);
  }
  if (cp > kMaxCodePoint) error_at(start, "invalid UTF-8 in the grammar text");
  return cp;
}

void GbnfCompiler::parse_literal(Seq& seq) {
  size_t start = pos_++;  // the opening quote
  while (true) {
    if (pos_ >= src_.size() || src_[pos_] == '\n') error_at(start, "unterminated string literal");
    if (src_[pos_] == '"') break;
    uint32_t cp = parse_char(false);
    count(1);
    seq.push_back({Elem::Char, add_class({{cp, cp}}, false)});
  }
  ++pos_;
}

uint32_t GbnfCompiler::parse_class() {
  size_t start = pos_++;  // '['
  bool negated = pos_ < src_.size() && src_[pos_] == '^';
  if (negated) ++pos_;
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  while (true) {
    if (pos_ >= src_.size()) error_at(start, "unterminated character class (missing ']')");
    if (src_[pos_] == ']') break;
    uint32_t lo = parse_char(true), hi = lo;
    if (pos_ + 1 < src_.size() && src_[pos_] == '-' && src_[pos_ + 1] != ']') {
      ++pos_;
      size_t at = pos_;
      hi = parse_char(true);
      if (hi < lo) error_at(at, "character range is reversed");
    }
    ranges.emplace_back(lo, hi);
    if (ranges.size() > 4096) error_at(start, "character class too large");
  }
  ++pos_;
  return add_class(std::move(ranges), negated);
}

void GbnfCompiler::parse_braces(uint64_t& min, uint64_t& max) {
  size_t start = pos_++;  // '{'
  auto number = [&](uint64_t& out) {
    size_t digits = 0;
    out = 0;
    while (pos_ < src_.size() && src_[pos_] >= '0' && src_[pos_] <= '9') {
      if (++digits > 9)
        error_at(start, fmt::format("repetition bound too large (limit {})", kMaxRepeat));
      out = out * 10 + static_cast<uint64_t>(src_[pos_++] - '0');
    }
    return digits > 0;
  };
  skip_space();
  bool has_min = number(min);
  skip_space();
  max = min;
  if (pos_ < src_.size() && src_[pos_] == ',') {
    ++pos_;
    skip_space();
    if (!number(max)) max = UINT64_MAX;
    skip_space();
  } else if (!has_min) {
    error_at(start, "expected a number in '{m,n}'");
  }
  if (!has_min) min = 0;
  if (pos_ >= src_.size() || src_[pos_] != '}')
    error_at(start, "expected '}' closing the repetition");
  ++pos_;
  if (min > kMaxRepeat || (max != UINT64_MAX && max > kMaxRepeat))
    error_at(start, fmt::format("repetition bound too large (limit {})", kMaxRepeat));
  if (max < min) error_at(start, "repetition {m,n} has n < m");
}

// Replaces the item at seq[item_start..] by min copies and then a star or a
// chain of nested optionals: x{2,4} -> x x O2, O2 ::= x O1 | "", O1 ::= x | "".
void GbnfCompiler::parse_repeat(Seq& seq, size_t item_start, uint64_t min, uint64_t max) {
  if (item_start == seq.size()) return;  // an empty literal repeated is still empty
  if (seq.size() - item_start > 1) {
    Alts group{Seq(seq.begin() + static_cast<long>(item_start), seq.end())};
    seq.resize(item_start);
    count(1);
    seq.push_back({Elem::Ref, new_helper(current_, std::move(group))});
  }
  Elem x = seq.back();
  seq.pop_back();
  count(min + 1);
  for (uint64_t i = 0; i < min; ++i) seq.push_back(x);
  if (max == UINT64_MAX) {
    uint32_t star =
        rule_id(fmt::format("{}#{}", g_.rule_names_[current_], ++helpers_[current_]), pos_);
    defined_[star] = true;
    rules_[star] = Alts{Seq{x, Elem{Elem::Ref, star}}, Seq{}};
    seq.push_back({Elem::Ref, star});
    return;
  }
  if (max == min) return;
  count(3 * (max - min));
  uint32_t inner = new_helper(current_, Alts{Seq{x}, Seq{}});
  for (uint64_t i = 1; i < max - min; ++i)
    inner = new_helper(current_, Alts{Seq{x, Elem{Elem::Ref, inner}}, Seq{}});
  seq.push_back({Elem::Ref, inner});
}

GbnfCompiler::Seq GbnfCompiler::parse_sequence(int depth) {
  Seq seq;
  size_t item_start = SIZE_MAX;  // where the last item begins, for a postfix operator
  while (true) {
    skip_space();
    if (pos_ >= src_.size()) break;
    char c = src_[pos_];
    if (c == '|' || c == ')' || at_rule_start()) break;
    size_t at = pos_;
    if (c == '"') {
      item_start = seq.size();
      parse_literal(seq);
    } else if (c == '[') {
      item_start = seq.size();
      count(1);
      seq.push_back({Elem::Char, parse_class()});
    } else if (c == '.') {
      ++pos_;
      item_start = seq.size();
      count(1);
      seq.push_back({Elem::Char, add_class({{0, kMaxCodePoint}}, false)});
    } else if (is_name_char(c)) {
      item_start = seq.size();
      count(1);
      seq.push_back({Elem::Ref, rule_id(parse_name(), at)});
    } else if (c == '(') {
      if (depth + 1 > kMaxNesting)
        error_at(at, fmt::format("parentheses nested too deep (limit {})", kMaxNesting));
      ++pos_;
      Alts alts = parse_alternates(depth + 1);
      skip_space();
      if (pos_ >= src_.size() || src_[pos_] != ')') error_at(at, "unbalanced '(': missing ')'");
      ++pos_;
      item_start = seq.size();
      count(1);
      seq.push_back({Elem::Ref, new_helper(current_, std::move(alts))});
    } else if (c == '*' || c == '+' || c == '?' || c == '{') {
      if (item_start == SIZE_MAX) error_at(at, fmt::format("'{}' has no item to repeat", c));
      uint64_t min = c == '+' ? 1 : 0, max = c == '?' ? 1 : UINT64_MAX;
      if (c == '{') {
        parse_braces(min, max);
      } else {
        ++pos_;
      }
      parse_repeat(seq, item_start, min, max);
      item_start = SIZE_MAX;
    } else if (c == '<' || c == '!') {
      error_at(at, "token references ('<[id]>') are not supported");
    } else if (c == ':') {
      error_at(at, "'::=' without a rule name before it");
    } else {
      error_at(at, fmt::format("unexpected character '{}'", c));
    }
  }
  return seq;
}

GbnfCompiler::Alts GbnfCompiler::parse_alternates(int depth) {
  Alts alts;
  alts.push_back(parse_sequence(depth));
  while (pos_ < src_.size() && src_[pos_] == '|') {
    ++pos_;
    alts.push_back(parse_sequence(depth));
  }
  return alts;
}

void GbnfCompiler::parse_rule() {
  size_t at = pos_;
  std::string name = parse_name();
  skip_space();
  if (src_.substr(pos_, 3) != "::=")
    error_at(pos_, fmt::format("expected '::=' after rule name '{}'", name));
  pos_ += 3;
  uint32_t id = rule_id(name, at);
  if (defined_[id]) error_at(at, fmt::format("rule '{}' is defined twice", name));
  defined_[id] = true;
  where_[id] = at;
  current_ = id;
  Alts alts = parse_alternates(0);
  if (pos_ < src_.size() && src_[pos_] == ')') error_at(pos_, "unbalanced ')'");
  rules_[id] = std::move(alts);
}

Grammar GbnfCompiler::run(std::string_view root) {
  if (src_.size() > kMaxSourceBytes)
    fail("grammar: text too large ({} bytes, limit {})", src_.size(), kMaxSourceBytes);
  while (true) {
    skip_space();
    if (pos_ >= src_.size()) break;
    parse_rule();
  }
  auto it = ids_.find(std::string(root));
  if (it == ids_.end() || !defined_[it->second])
    fail("grammar: no rule named '{}' (the root)", root);
  g_.root_ = it->second;
  for (size_t r = 0; r < rules_.size(); ++r)
    if (!defined_[r]) error_at(where_[r], fmt::format("undefined rule '{}'", g_.rule_names_[r]));
  check_left_recursion();
  flatten();
  return std::move(g_);
}

}  // namespace lr::grammar
