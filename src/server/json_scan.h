// The byte-level pieces of the tool-call parser (tool_calls.cpp): character
// classes, UTF-8 boundaries, JSON number syntax, and a validating JSON
// scanner fed one byte at a time. Internal to the parser; a header so the
// parser's file holds its state machine alone.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace lr::server::tools::scan {

inline bool is_ws(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}
inline bool is_alnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}
inline bool is_name_char(char c) {
  return is_alnum(c) || c == '_' || c == '-' || c == '.';
}
inline bool is_id_char(char c) {
  return is_alnum(c) || c == '_' || c == '-';
}

// The length of `s` without an incomplete UTF-8 character at its end, so a
// client never gets half a character in one chunk.
inline size_t utf8_complete_len(std::string_view s) {
  size_t n = s.size();
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    const auto b = static_cast<unsigned char>(s[n - back]);
    if ((b & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t want = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
    return want > back ? n - back : n;
  }
  return n;
}

inline bool valid_number(std::string_view s) {
  size_t i = 0;
  auto digits = [&] {
    const size_t from = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
    return i > from;
  };
  if (i < s.size() && s[i] == '-') ++i;
  if (i < s.size() && s[i] == '0') {
    ++i;
  } else if (!digits()) {
    return false;
  }
  if (i < s.size() && s[i] == '.' && (++i, !digits())) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    if (!digits()) return false;
  }
  return i == s.size();
}

// A validating JSON scanner fed one byte at a time: it says where a value
// ends, whether the bytes so far can still be JSON, and which bytes the
// compact form keeps (everything but whitespace outside strings). The top
// level must be an object, an array or a string.
class JsonScan {
 public:
  enum class R { More, Done, Bad };

  // Continue inside one open object, just after a member's value: used to
  // skip the rest of a call object once its arguments have been streamed.
  void start_in_object() {
    stack_.clear();  // (not `= "{"`: GCC 12 warns a false -Wrestrict on it)
    stack_.push_back('{');
    s_ = S::CommaOrEnd;
  }
  bool kept() const { return kept_; }

  R push(char c) {
    kept_ = true;
    switch (s_) {
      case S::Str:
        if (c == '"') return after_value(key_ ? S::Colon : S::CommaOrEnd);
        if (c == '\\') s_ = S::Esc;
        if (static_cast<unsigned char>(c) < 0x20) return bad();
        return R::More;
      case S::Esc:
        if (c == 'u') {
          hex_ = 4, s_ = S::Hex;
        } else if (std::string_view("\"\\/bfnrt").find(c) != std::string_view::npos) {
          s_ = S::Str;
        } else {
          return bad();
        }
        return R::More;
      case S::Hex:
        if (!std::isxdigit(static_cast<unsigned char>(c))) return bad();
        if (--hex_ == 0) s_ = S::Str;
        return R::More;
      case S::Scalar:
        if ((is_alnum(c) || c == '+' || c == '-' || c == '.') && scalar_.size() < 64) {
          scalar_ += c;
          return R::More;
        }
        if (scalar_ != "true" && scalar_ != "false" && scalar_ != "null" && !valid_number(scalar_))
          return bad();
        s_ = S::CommaOrEnd;
        return push(c);
      case S::Done:
      case S::Bad:
        return bad();
      default:
        break;
    }
    if (is_ws(c)) {
      kept_ = false;
      return R::More;
    }
    return structural(c);
  }

 private:
  enum class S {
    Val,
    ValOrEnd,
    Key,
    KeyOrEnd,
    Colon,
    CommaOrEnd,
    Str,
    Esc,
    Hex,
    Scalar,
    Done,
    Bad
  };

  R bad() {
    s_ = S::Bad;
    return R::Bad;
  }
  // A string or container just closed: the top level ends, or its container goes on.
  R after_value(S next) {
    if (stack_.empty()) {
      s_ = S::Done;
      return R::Done;
    }
    s_ = next;
    return R::More;
  }
  R open(char c) {
    if (stack_.size() >= 128) return bad();  // deeper than any real call: refuse, bounded memory
    stack_ += c;
    s_ = c == '{' ? S::KeyOrEnd : S::ValOrEnd;
    return R::More;
  }
  R close(char c) {
    if (stack_.empty() || stack_.back() != (c == '}' ? '{' : '[')) return bad();
    stack_.pop_back();
    return after_value(S::CommaOrEnd);
  }
  R structural(char c) {
    switch (s_) {
      case S::ValOrEnd:
        if (c == ']') return close(c);
        [[fallthrough]];
      case S::Val:
        if (c == '{' || c == '[') return open(c);
        if (c == '"') return key_ = false, s_ = S::Str, R::More;
        if (stack_.empty() ||
            !(c == '-' || (c >= '0' && c <= '9') || c == 't' || c == 'f' || c == 'n'))
          return bad();
        scalar_.assign(1, c), s_ = S::Scalar;
        return R::More;
      case S::KeyOrEnd:
        if (c == '}') return close(c);
        [[fallthrough]];
      case S::Key:
        if (c != '"') return bad();
        return key_ = true, s_ = S::Str, R::More;
      case S::Colon:
        if (c != ':') return bad();
        return s_ = S::Val, R::More;
      case S::CommaOrEnd:
        if (c == ',') return s_ = stack_.back() == '{' ? S::Key : S::Val, R::More;
        if (c == '}' || c == ']') return close(c);
        return bad();
      default:
        return bad();
    }
  }

  S s_ = S::Val;
  std::string stack_;  // '{' and '[' of the open containers
  std::string scalar_;
  bool key_ = false, kept_ = false;
  int hex_ = 0;
};

}  // namespace lr::server::tools::scan
