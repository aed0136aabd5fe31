#include "template/lexer.h"

#include <fmt/format.h>

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "core/error.h"
#include "template/unicode.h"

namespace lr::jinja {

namespace {

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
         static_cast<unsigned char>(c) >= 0x80;
}
bool is_name_char(char c) {
  return is_name_start(c) || is_digit(c);
}

// \r\n and \r become \n; one trailing newline goes (keep_trailing_newline=False).
std::string normalize(std::string_view in) {
  std::string s;
  s.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '\r') {
      s += '\n';
      if (i + 1 < in.size() && in[i + 1] == '\n') ++i;
    } else {
      s += in[i];
    }
  }
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

// The length of the Python-whitespace run at s[i] (0 if none).
size_t space_run(std::string_view s, size_t i) {
  size_t j = i;
  while (j < s.size()) {
    size_t k = j;
    if (!utf8::is_space(utf8::next(s, k))) break;
    j = k;
  }
  return j - i;
}

std::string_view rstrip(std::string_view s) {
  std::u32string u = utf8::decode(s);
  size_t n = u.size();
  while (n > 0 && utf8::is_space(u[n - 1])) --n;
  size_t bytes = 0;
  for (size_t k = 0, i = 0; k < n; ++k) utf8::next(s, i), bytes = i;
  return s.substr(0, n == 0 ? 0 : bytes);
}

bool all_space(std::string_view s) {
  if (s.empty()) return false;
  return space_run(s, 0) == s.size();
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) : src_(normalize(source)) {}

  std::vector<Token> run() {
    while (pos_ < src_.size()) root();
    push(Tok::Eof, src_.size());
    return std::move(out_);
  }

 private:
  [[noreturn]] void fail_at(size_t pos, const std::string& msg) {
    lr::fail("chat template line {}: {}", line_at(pos), msg);
  }

  int line_at(size_t pos) {
    if (pos < line_pos_) line_pos_ = 0, line_ = 1;
    for (; line_pos_ < pos && line_pos_ < src_.size(); ++line_pos_)
      if (src_[line_pos_] == '\n') ++line_;
    return line_;
  }

  Token& push(Tok type, size_t pos, std::string text = {}) {
    Token t;
    t.type = type;
    t.line = line_at(pos);
    t.text = std::move(text);
    out_.push_back(std::move(t));
    return out_.back();
  }

  // Text before a tag, with the tag's whitespace control applied.
  void emit_text(size_t begin, size_t end, char sign, bool lstrip) {
    std::string_view text(src_.data() + begin, end - begin);
    if (sign == '-') {
      text = rstrip(text);
    } else if (sign != '+' && lstrip) {
      const size_t nl = text.rfind('\n');
      const size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting_) && all_space(text.substr(l_pos)))
        text = text.substr(0, l_pos);
    }
    if (!text.empty()) push(Tok::Data, begin, std::string(text));
  }

  void root() {
    size_t p = pos_;
    while (true) {
      p = src_.find('{', p);
      if (p == std::string::npos || p + 1 >= src_.size()) {
        push(Tok::Data, pos_, src_.substr(pos_));
        pos_ = src_.size();
        return;
      }
      const char k = src_[p + 1];
      if (k == '%' || k == '{' || k == '#') break;
      ++p;
    }
    const char kind = src_[p + 1];
    const char sign =
        p + 2 < src_.size() && (src_[p + 2] == '-' || src_[p + 2] == '+') ? src_[p + 2] : 0;
    if (kind == '%' && raw_begin(p, sign)) return;
    emit_text(pos_, p, sign, kind != '{');
    line_starting_ = false;
    pos_ = p + 2 + (sign ? 1 : 0);
    if (kind == '#') {
      comment(p);
    } else {
      tag(kind == '%', p);
    }
  }

  // {% raw %}...{% endraw %}: returns false when the tag at p is not raw.
  bool raw_begin(size_t p, char sign) {
    size_t i = p + 2 + (sign ? 1 : 0);
    i += space_run(src_, i);
    if (src_.compare(i, 3, "raw") != 0) return false;
    i += 3;
    i += space_run(src_, i);
    if (src_.compare(i, 3, "-%}") == 0) {
      i += 3;
      i += space_run(src_, i);
    } else if (src_.compare(i, 2, "%}") == 0) {
      i += 2;
    } else {
      return false;
    }
    emit_text(pos_, p, sign, true);
    if (i >= src_.size()) {  // jinja2 drops a {% raw %} that ends the template
      pos_ = i;
      return true;
    }
    // The body runs to the first {% endraw %}.
    for (size_t q = src_.find("{%", i); q != std::string::npos; q = src_.find("{%", q + 1)) {
      size_t j = q + 2;
      const char end_sign = j < src_.size() && (src_[j] == '-' || src_[j] == '+') ? src_[j] : 0;
      if (end_sign) ++j;
      j += space_run(src_, j);
      if (src_.compare(j, 6, "endraw") != 0) continue;
      j += 6;
      j += space_run(src_, j);
      size_t end;
      if (!block_end_at(j, end)) continue;
      line_starting_ = src_[i - 1] == '\n';
      emit_text(i, q, end_sign, true);
      line_starting_ = src_[end - 1] == '\n';
      pos_ = end;
      return true;
    }
    fail_at(p, "missing end of raw directive ({% endraw %})");
  }

  // A block end at i (+%}, -%} and the whitespace after, %} and one newline):
  // sets `end` past it.
  bool block_end_at(size_t i, size_t& end) {
    if (src_.compare(i, 3, "+%}") == 0) {
      end = i + 3;
    } else if (src_.compare(i, 3, "-%}") == 0) {
      end = i + 3 + space_run(src_, i + 3);
    } else if (src_.compare(i, 2, "%}") == 0) {
      end = i + 2 + (i + 2 < src_.size() && src_[i + 2] == '\n' ? 1 : 0);
    } else {
      return false;
    }
    return true;
  }

  void comment(size_t p) {
    if (pos_ >= src_.size()) return;  // jinja2 drops a {# that ends the template
    for (size_t q = src_.find("#}", pos_); q != std::string::npos; q = src_.find("#}", q + 1)) {
      size_t end = q + 2;
      if (q > pos_ && src_[q - 1] == '-') {
        end += space_run(src_, end);
      } else if (!(q > pos_ && src_[q - 1] == '+') && end < src_.size() && src_[end] == '\n') {
        ++end;
      }
      line_starting_ = src_[end - 1] == '\n';
      pos_ = end;
      return;
    }
    fail_at(p, "missing end of comment tag ('#}')");
  }

  void tag(bool block, size_t begin) {
    push(block ? Tok::BlockBegin : Tok::VarBegin, begin);
    std::string balance;  // the closing brackets expected, innermost last
    while (pos_ < src_.size()) {
      if (balance.empty()) {
        size_t end;
        if (block ? block_end_at(pos_, end) : var_end_at(pos_, end)) {
          push(block ? Tok::BlockEnd : Tok::VarEnd, pos_);
          line_starting_ = src_[end - 1] == '\n';
          pos_ = end;
          return;
        }
      }
      if (const size_t ws = space_run(src_, pos_)) {
        line_starting_ = src_[pos_ + ws - 1] == '\n';
        pos_ += ws;
        continue;
      }
      line_starting_ = false;
      if (number() || name() || string()) continue;
      op(balance);
    }
  }

  bool var_end_at(size_t i, size_t& end) {
    if (src_.compare(i, 3, "-}}") == 0) {
      end = i + 3 + space_run(src_, i + 3);
    } else if (src_.compare(i, 2, "}}") == 0) {
      end = i + 2;
    } else {
      return false;
    }
    return true;
  }

  // Digits with single underscores between them, from i: returns the end (i if none).
  size_t digits(size_t i, bool (*ok)(char)) {
    if (i >= src_.size() || !ok(src_[i])) return i;
    size_t j = i + 1;
    while (j < src_.size()) {
      if (ok(src_[j])) {
        ++j;
      } else if (src_[j] == '_' && j + 1 < src_.size() && ok(src_[j + 1])) {
        j += 2;
      } else {
        break;
      }
    }
    return j;
  }

  bool number() {
    const size_t start = pos_;
    if (!is_digit(src_[start])) return false;
    auto strip = [](std::string_view s) {
      std::string r;
      for (char c : s)
        if (c != '_') r += c;
      return r;
    };
    // float: digits ( (.digits)? e[+-]digits | .digits ), not after a '.'
    if (start == 0 || src_[start - 1] != '.') {
      const size_t int_end = digits(start, is_digit);
      size_t j = int_end;
      bool frac = false;
      if (j < src_.size() && src_[j] == '.' && digits(j + 1, is_digit) > j + 1) {
        j = digits(j + 1, is_digit);
        frac = true;
      }
      bool exp = false;
      if (j < src_.size() && (src_[j] == 'e' || src_[j] == 'E')) {
        size_t k = j + 1;
        if (k < src_.size() && (src_[k] == '+' || src_[k] == '-')) ++k;
        if (digits(k, is_digit) > k) j = digits(k, is_digit), exp = true;
      }
      if (frac || exp) {
        const std::string lit = strip(std::string_view(src_).substr(start, j - start));
        Token& t = push(Tok::Float, start, lit);
        const auto r = std::from_chars(lit.data(), lit.data() + lit.size(), t.number);
        if (r.ec == std::errc::result_out_of_range)  // Python: inf, or 0.0 when tiny
          t.number = lit.find("e-") != std::string::npos || lit.find("E-") != std::string::npos
                         ? 0.0
                         : HUGE_VAL;
        pos_ = j;
        return true;
      }
    }
    int base = 10;
    size_t j;
    const char p = start + 1 < src_.size() ? static_cast<char>(src_[start + 1] | 32) : 0;
    if (src_[start] == '0' && (p == 'b' || p == 'o' || p == 'x')) {
      base = p == 'b' ? 2 : p == 'o' ? 8 : 16;
      auto ok = base == 2 ? +[](char c) { return c == '0' || c == '1'; }
                : base == 8
                    ? +[](char c) { return c >= '0' && c <= '7'; }
                    : +[](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; };
      size_t k = start + 2;
      if (k < src_.size() && src_[k] == '_') ++k;
      j = digits(k, ok);
      if (j == k) {  // "0x" alone: the integer 0, then the name x
        j = start + 1;
        base = 10;
      }
    } else if (src_[start] == '0') {
      j = digits(
          start, +[](char c) { return c == '0'; });
    } else {
      j = digits(start, is_digit);
    }
    std::string lit = strip(std::string_view(src_).substr(start, j - start));
    errno = 0;
    const char* body = lit.c_str() + (base == 10 ? 0 : 2);
    char* stop = nullptr;
    const long long v = std::strtoll(body, &stop, base);
    if (errno == ERANGE) fail_at(start, fmt::format("integer literal {} is too large", lit));
    Token& t = push(Tok::Int, start, lit);
    t.integer = v;
    pos_ = j;
    return true;
  }

  bool name() {
    if (!is_name_start(src_[pos_])) return false;
    size_t j = pos_ + 1;
    while (j < src_.size() && is_name_char(src_[j])) ++j;
    push(Tok::Name, pos_, src_.substr(pos_, j - pos_));
    pos_ = j;
    return true;
  }

  bool string() {
    const char q = src_[pos_];
    if (q != '\'' && q != '"') return false;
    size_t j = pos_ + 1;
    while (j < src_.size() && src_[j] != q) j += src_[j] == '\\' ? 2 : 1;
    if (j >= src_.size()) fail_at(pos_, "unterminated string literal");
    push(Tok::String, pos_, unescape(std::string_view(src_).substr(pos_ + 1, j - pos_ - 1), pos_));
    pos_ = j + 1;
    return true;
  }

  // Python's unicode-escape decoding of the literal's body.
  std::string unescape(std::string_view s, size_t at) {
    std::string out;
    for (size_t i = 0; i < s.size();) {
      if (s[i] != '\\' || i + 1 >= s.size()) {
        out += s[i++];
        continue;
      }
      const char c = s[i + 1];
      i += 2;
      auto hex = [&](int n) -> char32_t {
        char32_t v = 0;
        for (int k = 0; k < n; ++k, ++i) {
          if (i >= s.size() || !std::isxdigit(static_cast<unsigned char>(s[i])))
            fail_at(at, fmt::format("truncated \\{} escape in a string literal", c));
          const char d = static_cast<char>(s[i] | 32);
          v = v * 16 + static_cast<char32_t>(d <= '9' ? d - '0' : d - 'a' + 10);
        }
        if (v > 0x10FFFF) fail_at(at, "illegal Unicode character in a string literal");
        return v;
      };
      switch (c) {
        case '\n':
          break;
        case '\\':
          out += '\\';
          break;
        case '\'':
          out += '\'';
          break;
        case '"':
          out += '"';
          break;
        case 'a':
          out += '\a';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'v':
          out += '\v';
          break;
        case 'x':
          utf8::append(out, hex(2));
          break;
        case 'u':
          utf8::append(out, hex(4));
          break;
        case 'U':
          utf8::append(out, hex(8));
          break;
        case 'N':
          fail_at(at, "\\N{...} escapes are not supported");
        default:
          if (c >= '0' && c <= '7') {
            char32_t v = c - '0';
            for (int k = 0; k < 2 && i < s.size() && s[i] >= '0' && s[i] <= '7'; ++k, ++i)
              v = v * 8 + (s[i] - '0');
            utf8::append(out, v);
          } else if (static_cast<unsigned char>(c) >= 0x80) {
            // Python escaped the character first (backslashreplace), so the
            // backslash escapes that escape's backslash.
            size_t k = i - 1;
            const char32_t u = utf8::next(s, k);
            i = k;
            out += u <= 0xFF     ? fmt::format("\\x{:02x}", static_cast<unsigned>(u))
                   : u <= 0xFFFF ? fmt::format("\\u{:04x}", static_cast<unsigned>(u))
                                 : fmt::format("\\U{:08x}", static_cast<unsigned>(u));
          } else {
            out += '\\';
            out += c;
          }
      }
    }
    return out;
  }

  void op(std::string& balance) {
    static const char* const kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
    for (const char* o : kTwo) {
      if (src_.compare(pos_, 2, o) == 0) {
        push(Tok::Op, pos_, o);
        pos_ += 2;
        return;
      }
    }
    const char c = src_[pos_];
    if (std::string_view("+-/*%~[](){}|.,:;=<>").find(c) == std::string_view::npos) {
      size_t k = pos_;
      std::string ch;
      utf8::append(ch, utf8::next(src_, k));
      fail_at(pos_, fmt::format("unexpected character '{}'", ch));
    }
    if (c == '(' || c == '[' || c == '{') {
      balance += c == '(' ? ')' : c == '[' ? ']' : '}';
    } else if (c == ')' || c == ']' || c == '}') {
      if (balance.empty()) fail_at(pos_, fmt::format("unexpected '{}'", c));
      if (balance.back() != c)
        fail_at(pos_, fmt::format("unexpected '{}', expected '{}'", c, balance.back()));
      balance.pop_back();
    }
    push(Tok::Op, pos_, std::string(1, c));
    ++pos_;
  }

  std::string src_;
  size_t pos_ = 0;
  bool line_starting_ = true;
  std::vector<Token> out_;
  size_t line_pos_ = 0;
  int line_ = 1;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) {
  return Lexer(source).run();
}

std::string describe(const Token& t) {
  switch (t.type) {
    case Tok::Data:
      return "template text";
    case Tok::VarBegin:
      return "'{{'";
    case Tok::VarEnd:
      return "'}}'";
    case Tok::BlockBegin:
      return "'{%'";
    case Tok::BlockEnd:
      return "'%}'";
    case Tok::Name:
      return fmt::format("'{}'", t.text);
    case Tok::String:
      return "a string";
    case Tok::Int:
    case Tok::Float:
      return fmt::format("'{}'", t.text);
    case Tok::Op:
      return fmt::format("'{}'", t.text);
    case Tok::Eof:
      return "end of template";
  }
  return "token";
}

}  // namespace lr::jinja
