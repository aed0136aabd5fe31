// Python's str.strip / split / rsplit / splitlines / replace, by code point.
#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "template/builtins.h"
#include "template/unicode.h"

namespace lr::jinja {

namespace {

Value piece(const Value& self, std::string s) {
  return self.is_markup() ? Value::markup(std::move(s)) : Value(std::move(s));
}

std::vector<Value> split_whitespace(const Value& self, int64_t maxsplit, bool from_right) {
  const std::u32string s = utf8::decode(self.str());
  const size_t n = s.size();
  std::vector<Value> out;
  auto add = [&](size_t a, size_t b) {
    out.push_back(piece(self, utf8::encode(s.substr(a, b - a))));
  };
  int64_t count = maxsplit < 0 ? INT64_MAX : maxsplit;
  if (!from_right) {
    size_t i = 0;
    while (count-- > 0) {
      while (i < n && utf8::is_space(s[i])) ++i;
      if (i == n) break;
      const size_t j = i++;
      while (i < n && !utf8::is_space(s[i])) ++i;
      add(j, i);
    }
    if (i < n) {
      while (i < n && utf8::is_space(s[i])) ++i;
      if (i != n) add(i, n);
    }
    return out;
  }
  size_t i = n;  // one past the next character to look at
  while (count-- > 0) {
    while (i > 0 && utf8::is_space(s[i - 1])) --i;
    if (i == 0) break;
    const size_t j = i--;
    while (i > 0 && !utf8::is_space(s[i - 1])) --i;
    add(i, j);
  }
  if (i > 0) {
    while (i > 0 && utf8::is_space(s[i - 1])) --i;
    if (i != 0) add(0, i);
  }
  std::reverse(out.begin(), out.end());
  return out;
}

}  // namespace

std::string py_strip(std::string_view text, const Value& chars, bool left, bool right) {
  std::u32string set;
  const bool spaces = chars.is_none() || chars.is_undefined();
  if (!spaces) {
    if (!chars.is_string()) lr::fail("strip arg must be None or str, not {}", type_name(chars));
    set = utf8::decode(chars.str());
  }
  auto strip_it = [&](char32_t c) {
    return spaces ? utf8::is_space(c) : set.find(c) != std::u32string::npos;
  };
  const std::u32string s = utf8::decode(text);
  size_t b = 0, e = s.size();
  if (left)
    while (b < e && strip_it(s[b])) ++b;
  if (right)
    while (e > b && strip_it(s[e - 1])) --e;
  return utf8::encode(std::u32string_view(s).substr(b, e - b));
}

std::vector<Value> py_split(const Value& self, const Value& sep, int64_t maxsplit,
                            bool from_right) {
  if (sep.is_none()) return split_whitespace(self, maxsplit, from_right);
  if (!sep.is_string()) lr::fail("must be str or None, not {}", type_name(sep));
  const std::string& s = self.str();
  const std::string& d = sep.str();
  if (d.empty()) lr::fail("empty separator");
  tick_search(s.size(), d.size());
  std::vector<Value> out;
  int64_t count = maxsplit < 0 ? INT64_MAX : maxsplit;
  if (!from_right) {
    size_t i = 0;
    for (size_t p; count-- > 0 && (p = s.find(d, i)) != std::string::npos; i = p + d.size()) {
      out.push_back(piece(self, s.substr(i, p - i)));
      tick();
    }
    out.push_back(piece(self, s.substr(i)));
    return out;
  }
  size_t end = s.size();
  while (count-- > 0 && end >= d.size()) {
    const size_t p = s.rfind(d, end - d.size());
    if (p == std::string::npos) break;
    out.push_back(piece(self, s.substr(p + d.size(), end - p - d.size())));
    end = p;
    tick();
  }
  out.push_back(piece(self, s.substr(0, end)));
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> py_splitlines(std::string_view s, bool keepends) {
  tick_chars(s.size());
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i < s.size();) {
    const size_t at = i;
    const char32_t c = utf8::next(s, i);
    if (!utf8::is_linebreak(c)) continue;
    if (c == '\r' && i < s.size() && s[i] == '\n') ++i;
    out.emplace_back(s.substr(start, (keepends ? i : at) - start));
    start = i;
  }
  if (start < s.size()) out.emplace_back(s.substr(start));
  tick(out.size());
  return out;
}

std::string py_replace(std::string_view s, std::string_view old, std::string_view repl,
                       int64_t count) {
  if (count < 0) count = INT64_MAX;
  tick_search(s.size(), old.size());
  std::string out;
  if (old.empty()) {  // repl before every character and at the end
    size_t i = 0;
    for (; i < s.size() && count > 0; --count) {
      out += repl;
      const size_t at = i;
      utf8::next(s, i);
      out += s.substr(at, i - at);
      check_size(out.size());
    }
    if (i == s.size() && count > 0) out += repl;
    out += s.substr(i);
    check_size(out.size());
    return out;
  }
  size_t i = 0;
  for (size_t p; count > 0 && (p = s.find(old, i)) != std::string_view::npos; --count) {
    out += s.substr(i, p - i);
    out += repl;
    i = p + old.size();
    check_size(out.size());
  }
  out += s.substr(i);
  check_size(out.size());
  return out;
}

}  // namespace lr::jinja
