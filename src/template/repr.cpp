// Python's str() and repr() of template values, and float / string reprs.
#include <fmt/format.h>

#include <charconv>
#include <cmath>

#include "core/error.h"
#include "template/unicode.h"
#include "template/value.h"

namespace lr::jinja {

namespace {

void append_repr(std::string& out, const Value& v, int depth);

void append_items(std::string& out, const std::vector<Value>& items, int depth) {
  for (size_t k = 0; k < items.size(); ++k) {
    if (k) out += ", ";
    append_repr(out, items[k], depth + 1);
  }
}

void append_dict(std::string& out, const Dict& d, int depth) {
  out += '{';
  bool first = true;
  for (const auto& [k, v] : d.entries()) {
    if (!first) out += ", ";
    first = false;
    append_repr(out, k, depth + 1);
    out += ": ";
    append_repr(out, v, depth + 1);
  }
  out += '}';
}

void append_value(std::string& out, const Value& v, int depth, bool as_repr) {
  check_depth(depth);
  if (depth > 0) tick();  // a step per item printed
  switch (v.kind()) {
    case Kind::Undefined:
      out += as_repr ? "Undefined" : "";
      break;
    case Kind::None:
      out += "None";
      break;
    case Kind::Bool:
      out += v.boolean() ? "True" : "False";
      break;
    case Kind::Int:
      out += std::to_string(v.integer());
      break;
    case Kind::Float:
      out += float_repr(v.number());
      break;
    case Kind::String:
      if (!as_repr) {
        out += v.str();
      } else if (v.is_markup()) {
        out += "Markup(" + str_repr(v.str()) + ")";
      } else {
        out += str_repr(v.str());
      }
      break;
    case Kind::List:
      if (std::string_view(v.seq().type) == "range") {
        const int64_t* r = v.seq().range;
        out += r[2] == 1 ? fmt::format("range({}, {})", r[0], r[1])
                         : fmt::format("range({}, {}, {})", r[0], r[1], r[2]);
        break;
      }
      out += '[';
      append_items(out, v.items(), depth);
      out += ']';
      break;
    case Kind::Tuple:
      out += '(';
      append_items(out, v.items(), depth);
      out += v.items().size() == 1 ? ",)" : ")";
      break;
    case Kind::View:
      out += v.seq().type;
      out += "([";
      append_items(out, v.items(), depth);
      out += "])";
      break;
    case Kind::Iterator:
      lr::fail("cannot print a {} (Python prints its memory address): convert it with |list",
               v.seq().type);
    case Kind::Dict:
      append_dict(out, v.dict(), depth);
      break;
    case Kind::Namespace:
      out += "<Namespace ";
      append_dict(out, v.dict(), depth);
      out += '>';
      break;
    case Kind::Object:
      out += v.object().repr();
      break;
  }
  check_size(out.size());
}

void append_repr(std::string& out, const Value& v, int depth) {
  append_value(out, v, depth, true);
}

}  // namespace

std::string to_str(const Value& v) {
  if (v.is_string()) return v.str();
  std::string out;
  append_value(out, v, 0, false);
  return out;
}

void append_str(std::string& out, const Value& v) {
  append_value(out, v, 0, false);
  check_size(out.size());
}

std::string repr(const Value& v) {
  std::string out;
  append_value(out, v, 0, true);
  return out;
}

std::string str_repr(std::string_view s) {
  tick_chars(s.size());
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (size_t i = 0; i < s.size();) {
    const char32_t c = utf8::next(s, i);
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (utf8::is_printable(c)) {
      utf8::append(out, c);
    } else if (c <= 0xFF) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned>(c));
    } else if (c <= 0xFFFF) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
    } else {
      out += fmt::format("\\U{:08x}", static_cast<unsigned>(c));
    }
  }
  out += quote;
  check_size(out.size());
  return out;
}

std::string float_repr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, f, std::chars_format::scientific);
  LR_ASSERT(r.ec == std::errc());
  const std::string_view sci(buf, r.ptr - buf);  // [-]d[.ddd]e(+|-)xx
  const size_t e_pos = sci.find('e');
  LR_ASSERT(e_pos != std::string_view::npos);
  std::string out;
  size_t k = 0;
  if (sci[0] == '-') out += '-', k = 1;
  std::string digits;
  for (; k < e_pos; ++k)
    if (sci[k] != '.') digits += sci[k];
  const int exp = std::stoi(std::string(sci.substr(e_pos + 1)));
  const int decpt = exp + 1;  // digits d1d2... mean 0.d1d2... * 10^decpt
  const int n = static_cast<int>(digits.size());
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0.";
      out.append(static_cast<size_t>(-decpt), '0');
      out += digits;
    } else if (decpt >= n) {
      out += digits;
      out.append(static_cast<size_t>(decpt - n), '0');
      out += ".0";
    } else {
      out.append(digits, 0, static_cast<size_t>(decpt));
      out += '.';
      out.append(digits, static_cast<size_t>(decpt));
    }
  } else {
    out += digits[0];
    if (n > 1) {
      out += '.';
      out.append(digits, 1);
    }
    out += fmt::format("e{}{:02d}", exp < 0 ? '-' : '+', std::abs(exp));
  }
  return out;
}

std::string html_escape(std::string_view s) {
  tick_chars(s.size());
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  check_size(out.size());
  return out;
}

}  // namespace lr::jinja
