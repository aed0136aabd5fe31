// Internal: the GBNF text -> Grammar compiler (gbnf_parser.cpp parses,
// gbnf_check.cpp validates and flattens). Not part of the public API.
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "grammar/grammar.h"

namespace lr::grammar {

// Builds a normalized class from inclusive ranges (negated: the complement
// over all code points).
CharClass make_class(std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negated);

class GbnfCompiler {
 public:
  explicit GbnfCompiler(std::string_view src) : src_(src) {}
  Grammar run(std::string_view root);

 private:
  using Seq = std::vector<Elem>;
  using Alts = std::vector<Seq>;

  // gbnf_parser.cpp
  void parse_rule();
  Alts parse_alternates(int depth);
  Seq parse_sequence(int depth);
  void parse_literal(Seq& seq);
  uint32_t parse_class();
  uint32_t parse_char(bool in_class);
  uint32_t parse_hex(int digits);
  void parse_repeat(Seq& seq, size_t item_start, uint64_t min, uint64_t max);
  void parse_braces(uint64_t& min, uint64_t& max);
  std::string parse_name();
  bool at_rule_start() const;
  void skip_space();
  uint32_t rule_id(const std::string& name, size_t offset);
  uint32_t new_helper(uint32_t parent, Alts alts);
  uint32_t add_class(std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negated);
  void count(size_t n);
  [[noreturn]] void error_at(size_t offset, const std::string& what) const;

  // gbnf_check.cpp
  void flatten();
  void check_left_recursion();

  std::string_view src_;
  size_t pos_ = 0;
  Grammar g_;
  std::unordered_map<std::string, uint32_t> ids_;
  std::vector<Alts> rules_;
  std::vector<bool> defined_;
  std::vector<size_t> where_;      // the offset of a rule's definition, or of its first use
  std::vector<uint32_t> helpers_;  // per rule: how many helper rules it has spawned
  std::unordered_map<uint32_t, uint32_t> single_char_;  // code point -> class id
  uint32_t current_ = 0;                                // the rule being parsed, for naming helpers
  size_t elements_ = 0;
};

}  // namespace lr::grammar
