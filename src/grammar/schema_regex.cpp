// JSON Schema `pattern` -> GBNF. The regex matches the decoded string; the
// grammar matches its JSON text, so each character class becomes the raw
// characters plus the escapes json.dumps(..., ensure_ascii=False) writes for
// '"', '\' and control characters.
#include <fmt/format.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "core/error.h"
#include "grammar/gbnf_compiler.h"
#include "grammar/json_schema.h"
#include "grammar/schema_internal.h"

namespace lr::grammar {
namespace {

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

std::string cp_escape(uint32_t cp) {
  if (cp < 0x100) return fmt::format("\\x{:02X}", cp);
  if (cp < 0x10000) return fmt::format("\\u{:04X}", cp);
  return fmt::format("\\U{:08X}", cp);
}

std::string control_escape(uint32_t c) {
  switch (c) {
    case '\b':
      return "\\b";
    case '\t':
      return "\\t";
    case '\n':
      return "\\n";
    case '\f':
      return "\\f";
    case '\r':
      return "\\r";
    default:
      return fmt::format("\\u{:04x}", c);
  }
}

class RegexToGbnf {
 public:
  explicit RegexToGbnf(std::string_view p) : p_(p) {}

  std::string run() {
    bool head = !p_.empty() && p_[0] == '^';
    if (head) p_.remove_prefix(1);
    bool tail = false;
    if (!p_.empty() && p_.back() == '$') {
      size_t slashes = 0;
      while (slashes + 1 < p_.size() && p_[p_.size() - 2 - slashes] == '\\') ++slashes;
      tail = slashes % 2 == 0;
      if (tail) p_.remove_suffix(1);
    }
    std::string body = alternation(0);
    if (i_ != p_.size()) bad(fmt::format("unbalanced ')' at offset {}", i_));
    const std::string any = json_chars_gbnf({{0, kMaxCodePoint}}) + "*";
    return fmt::format("{}({}){}", head ? "" : any + " ", body, tail ? "" : " " + any);
  }

 private:
  [[noreturn]] void bad(const std::string& what) const {
    fail(
        "json schema: pattern '{}': {} (supported: literals, [classes], ., \\d \\w \\s, * + ? "
        "{{m,n}}, groups, |, ^ $ at the ends)",
        p_, what);
  }

  std::string alternation(int depth) {
    if (depth > 32) bad("groups nested too deep");
    std::vector<std::string> alts{sequence(depth)};
    while (i_ < p_.size() && p_[i_] == '|') {
      ++i_;
      alts.push_back(sequence(depth));
    }
    std::string out;
    for (size_t k = 0; k < alts.size(); ++k)
      out += (k ? " | " : "") + (alts[k].empty() ? "\"\"" : alts[k]);
    return out;
  }

  std::string sequence(int depth) {
    std::string out;
    while (i_ < p_.size() && p_[i_] != '|' && p_[i_] != ')') {
      std::string item = atom(depth);
      item += quantifier();
      out += (out.empty() ? "" : " ") + item;
    }
    return out;
  }

  std::string quantifier() {
    if (i_ >= p_.size()) return "";
    char c = p_[i_];
    std::string q;
    if (c == '*' || c == '+' || c == '?') {
      q = std::string(1, c);
      ++i_;
    } else if (c == '{') {
      size_t close = p_.find('}', i_);
      if (close == std::string_view::npos) bad("'{' without '}'");
      std::string_view body = p_.substr(i_ + 1, close - i_ - 1);
      if (body.empty() || body.find_first_not_of("0123456789,") != std::string_view::npos ||
          std::count(body.begin(), body.end(), ',') > 1)
        bad(fmt::format("bad repetition '{{{}}}'", body));
      q = fmt::format("{{{}}}", body);
      i_ = close + 1;
    } else {
      return "";
    }
    if (i_ < p_.size() && p_[i_] == '?') ++i_;  // lazy: the same language
    if (i_ < p_.size() && (p_[i_] == '+' || p_[i_] == '*' || p_[i_] == '{'))
      bad("stacked quantifiers");
    return q;
  }

  uint32_t next_cp() {
    auto c = static_cast<unsigned char>(p_[i_++]);
    if (c < 0x80) return c;
    int len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
    uint32_t cp = c & (0x7Fu >> len);
    for (int k = 1; k < len && i_ < p_.size(); ++k)
      cp = (cp << 6) | (static_cast<unsigned char>(p_[i_++]) & 0x3F);
    return cp;
  }

  // An escape after '\': a class (\d \w \s and negations) or one character.
  Ranges escape() {
    if (i_ >= p_.size()) bad("'\\' at the end");
    char e = p_[i_++];
    Ranges digit{{'0', '9'}}, word{{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}},
        space{{'\t', '\r'}, {' ', ' '}};
    switch (e) {
      case 'd':
        return digit;
      case 'w':
        return word;
      case 's':
        return space;
      case 'D':
        return make_class(digit, true).ranges;
      case 'W':
        return make_class(word, true).ranges;
      case 'S':
        return make_class(space, true).ranges;
      case 'n':
        return {{'\n', '\n'}};
      case 't':
        return {{'\t', '\t'}};
      case 'r':
        return {{'\r', '\r'}};
      case 'f':
        return {{'\f', '\f'}};
      case 'v':
        return {{'\v', '\v'}};
      default:
        break;
    }
    if (std::string_view(".*+?()[]{}|\\/^$-\"'").find(e) != std::string_view::npos)
      return {{uint32_t(e), uint32_t(e)}};
    bad(fmt::format("unsupported escape '\\{}'", e));
  }

  Ranges class_body() {
    size_t start = i_ - 1;
    bool negated = i_ < p_.size() && p_[i_] == '^';
    if (negated) ++i_;
    Ranges r;
    bool first = true;
    while (true) {
      if (i_ >= p_.size()) bad(fmt::format("unterminated class at offset {}", start));
      if (p_[i_] == ']' && !first) break;
      first = false;
      Ranges item;
      if (p_[i_] == '\\') {
        ++i_;
        item = escape();
      } else {
        uint32_t cp = next_cp();
        item = {{cp, cp}};
      }
      if (item.size() == 1 && item[0].first == item[0].second && i_ + 1 < p_.size() &&
          p_[i_] == '-' && p_[i_ + 1] != ']') {
        ++i_;
        uint32_t hi = 0;
        if (p_[i_] == '\\') {
          ++i_;
          Ranges h = escape();
          if (h.size() != 1 || h[0].first != h[0].second) bad("a class cannot end a range");
          hi = h[0].first;
        } else {
          hi = next_cp();
        }
        if (hi < item[0].first) bad("reversed range in a class");
        item[0].second = hi;
      }
      r.insert(r.end(), item.begin(), item.end());
    }
    ++i_;
    return make_class(std::move(r), negated).ranges;
  }

  std::string atom(int depth) {
    char c = p_[i_];
    if (c == '(') {
      ++i_;
      if (i_ < p_.size() && p_[i_] == '?') {
        if (p_.substr(i_, 2) != "?:") bad("lookaround, named groups and flags are not supported");
        i_ += 2;
      }
      std::string inner = alternation(depth + 1);
      if (i_ >= p_.size() || p_[i_] != ')') bad("unbalanced '('");
      ++i_;
      return fmt::format("({})", inner.empty() ? std::string("\"\"") : inner);
    }
    if (c == '[') {
      ++i_;
      return json_chars_gbnf(class_body());
    }
    if (c == '.') {
      ++i_;
      return json_chars_gbnf(make_class({{'\n', '\n'}}, true).ranges);
    }
    if (c == '\\') {
      ++i_;
      if (i_ < p_.size() &&
          (p_[i_] == 'b' || p_[i_] == 'B' || p_[i_] == 'A' || p_[i_] == 'Z' || p_[i_] == 'z'))
        bad(fmt::format("assertion '\\{}' is not supported", p_[i_]));
      if (i_ < p_.size() && p_[i_] >= '1' && p_[i_] <= '9')
        bad("back-references are not supported");
      return json_chars_gbnf(escape());
    }
    if (c == '^' || c == '$') bad(fmt::format("'{}' is only supported at the ends", c));
    if (c == '*' || c == '+' || c == '?' || c == '{')
      bad(fmt::format("'{}' has nothing to repeat", c));
    uint32_t cp = next_cp();
    return json_chars_gbnf({{cp, cp}});
  }

  std::string_view p_;
  size_t i_ = 0;
};

}  // namespace

std::string json_chars_gbnf(const Ranges& ranges) {
  Ranges raw;
  std::vector<std::string> alts;
  for (auto [lo, hi] : ranges) {
    for (uint32_t c = lo; c <= std::min<uint32_t>(hi, 0x1F); ++c)
      alts.push_back('"' + gbnf_literal(control_escape(c)) + '"');
    // Split the range around '"' and '\', which JSON writes escaped.
    uint32_t a = std::max<uint32_t>(lo, 0x20);
    for (uint32_t special : {uint32_t('"'), uint32_t('\\')}) {
      if (a > hi) break;
      if (special >= a && special <= hi) {
        if (special > a) raw.emplace_back(a, special - 1);
        alts.push_back(special == '"' ? "\"\\\\\\\"\"" : "\"\\\\\\\\\"");
        a = special + 1;
      }
    }
    if (a <= hi) raw.emplace_back(a, hi);
  }
  if (!raw.empty()) {
    std::string cls = "[";
    for (auto [lo, hi] : raw) cls += lo == hi ? cp_escape(lo) : cp_escape(lo) + "-" + cp_escape(hi);
    alts.insert(alts.begin(), cls + "]");
  }
  if (alts.empty()) return "[^\\x00-\\U0010FFFF]";  // the empty set
  if (alts.size() == 1) return alts[0];
  std::string out = "(";
  for (size_t k = 0; k < alts.size(); ++k) out += (k ? " | " : "") + alts[k];
  return out + ")";
}

std::string gbnf_literal(std::string_view text) {
  std::string out;
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7F) {
      out += fmt::format("\\x{:02X}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string pattern_to_gbnf(std::string_view pattern) {
  return RegexToGbnf(pattern).run();
}

}  // namespace lr::grammar
