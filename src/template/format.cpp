// Python string formatting: str.format (with the format-spec mini-language)
// and printf-style `str % args` (the `format` filter).
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "template/builtins.h"
#include "template/unicode.h"

namespace lr::jinja {

namespace {

struct Spec {
  std::string fill = " ";
  char align = 0;
  char sign = '-';
  bool alt = false;
  int64_t width = 0;
  char grouping = 0;
  int64_t precision = -1;
  char type = 0;
};

Spec parse_spec(std::string_view s) {
  Spec p;
  size_t i = 0;
  auto is_align = [](char c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  size_t k = 0;
  if (!s.empty()) utf8::next(s, k);
  if (k < s.size() && is_align(s[k])) {
    p.fill = std::string(s.substr(0, k));
    p.align = s[k];
    i = k + 1;
  } else if (!s.empty() && is_align(s[0])) {
    p.align = s[0];
    i = 1;
  }
  if (i < s.size() && (s[i] == '+' || s[i] == '-' || s[i] == ' ')) p.sign = s[i++];
  if (i < s.size() && s[i] == '#') p.alt = true, ++i;
  if (i < s.size() && s[i] == '0') {
    if (!p.align) p.fill.assign(1, '0'), p.align = '=';
    ++i;
  }
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])) && p.width < 1'000'000)
    p.width = p.width * 10 + (s[i++] - '0');
  if (i < s.size() && (s[i] == ',' || s[i] == '_')) p.grouping = s[i++];
  if (i < s.size() && s[i] == '.') {
    ++i;
    p.precision = 0;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])) && p.precision < 10'000)
      p.precision = p.precision * 10 + (s[i++] - '0');
  }
  if (i < s.size()) p.type = s[i++];
  if (i != s.size()) lr::fail("invalid format specifier '{}'", s);
  check_size(static_cast<size_t>(p.width));
  return p;
}

std::string group(std::string digits, char sep) {
  std::string out;
  const size_t n = digits.size();
  for (size_t k = 0; k < n; ++k) {
    if (k && (n - k) % 3 == 0) out += sep;
    out += digits[k];
  }
  return out;
}

std::string pad(const std::string& body, const std::string& sign_part, const Spec& p,
                char default_align) {
  const char align = p.align ? p.align : default_align;
  const int64_t len = static_cast<int64_t>(utf8::length(body) + utf8::length(sign_part));
  const int64_t fill = p.width > len ? p.width - len : 0;
  auto fills = [&](int64_t n) {
    std::string f;
    for (int64_t k = 0; k < n; ++k) f += p.fill;
    return f;
  };
  switch (align) {
    case '<':
      return sign_part + body + fills(fill);
    case '^':
      return fills(fill / 2) + sign_part + body + fills(fill - fill / 2);
    case '=':
      return sign_part + fills(fill) + body;
    default:
      return fills(fill) + sign_part + body;
  }
}

std::string format_number(const Value& v, const Spec& p) {
  const bool neg = v.is_int() ? v.integer() < 0 : std::signbit(v.number());
  const std::string sign = neg ? "-" : p.sign == '+' ? "+" : p.sign == ' ' ? " " : "";
  char type = p.type;
  std::string body;
  if (v.is_int() && (type == 0 || type == 'd' || type == 'x' || type == 'X' || type == 'o' ||
                     type == 'b' || type == 'n')) {
    if (p.precision >= 0) lr::fail("precision not allowed in integer format specifier");
    const uint64_t mag =
        neg ? 0 - static_cast<uint64_t>(v.integer()) : static_cast<uint64_t>(v.integer());
    switch (type) {
      case 'x':
        body = (p.alt ? "0x" : "") + fmt::format("{:x}", mag);
        break;
      case 'X':
        body = (p.alt ? "0X" : "") + fmt::format("{:X}", mag);
        break;
      case 'o':
        body = (p.alt ? "0o" : "") + fmt::format("{:o}", mag);
        break;
      case 'b':
        body = (p.alt ? "0b" : "") + fmt::format("{:b}", mag);
        break;
      default:
        body = p.grouping ? group(std::to_string(mag), p.grouping) : std::to_string(mag);
    }
    return pad(body, sign, p, '>');
  }
  if (std::string_view("eEfFgG%").find(type) == std::string_view::npos || type == 0) {
    if (type == 0 && p.precision < 0) return pad(float_repr(std::fabs(v.number())), sign, p, '>');
    lr::fail("unsupported format specifier type '{}' for {}", type ? std::string(1, type) : "",
             type_name(v));
  }
  double x = std::fabs(v.number());
  const int prec = static_cast<int>(p.precision < 0 ? 6 : p.precision);
  if (type == '%') x *= 100;
  const char conv = type == '%' ? 'f' : type;
  char buf[512];
  const std::string f = std::string("%") + (p.alt ? "#" : "") + ".*" + conv;
  std::snprintf(buf, sizeof buf, f.c_str(), std::min(prec, 300), x);
  body = buf;
  if (p.grouping && std::isfinite(x)) {
    const size_t dot = body.find_first_of(".eE");
    body =
        group(body.substr(0, dot), p.grouping) + (dot == std::string::npos ? "" : body.substr(dot));
  }
  if (type == '%') body += '%';
  return pad(body, sign, p, '>');
}

// Python's format(v, spec).
std::string format_value(const Value& v, std::string_view spec) {
  if (spec.empty()) return to_str(v);
  const Spec p = parse_spec(spec);
  if (v.is_number()) return format_number(v, p);
  if (v.is_string() && (p.type == 0 || p.type == 's')) {
    std::string s = v.str();
    if (p.precision >= 0) {
      std::u32string u = utf8::decode(s);
      if (u.size() > static_cast<size_t>(p.precision)) u.resize(static_cast<size_t>(p.precision));
      s = utf8::encode(u);
    }
    return pad(s, "", p, '<');
  }
  lr::fail("unsupported format string passed to {}.__format__", type_name(v));
}

}  // namespace

std::string str_format(const Value& fmt_value, const CallArgs& args) {
  const std::string& f = fmt_value.str();
  std::string out;
  size_t auto_index = 0;
  bool used_auto = false, used_manual = false;
  for (size_t i = 0; i < f.size();) {
    const char c = f[i];
    if (c == '}') {
      if (i + 1 < f.size() && f[i + 1] == '}') {
        out += '}', i += 2;
        continue;
      }
      lr::fail("Single '}}' encountered in format string");
    }
    if (c != '{') {
      out += c, ++i;
      continue;
    }
    if (i + 1 < f.size() && f[i + 1] == '{') {
      out += '{', i += 2;
      continue;
    }
    const size_t close = f.find('}', i);
    if (close == std::string::npos) lr::fail("Single '{{' encountered in format string");
    std::string field = f.substr(i + 1, close - i - 1);
    i = close + 1;
    std::string spec;
    if (const size_t colon = field.find(':'); colon != std::string::npos) {
      spec = field.substr(colon + 1);
      field.resize(colon);
    }
    char conversion = 0;
    if (const size_t bang = field.find('!'); bang != std::string::npos) {
      if (bang + 2 != field.size()) lr::fail("expected ':' after conversion specifier");
      conversion = field[bang + 1];
      field.resize(bang);
    }
    const size_t name_end = field.find_first_of(".[");
    const std::string name = field.substr(0, name_end);
    Value v;
    if (name.empty()) {
      if (used_manual)
        lr::fail("cannot switch from manual field specification to automatic field numbering");
      used_auto = true;
      if (auto_index >= args.pos.size())
        lr::fail("Replacement index {} out of range for positional args tuple", auto_index);
      v = args.pos[auto_index++];
    } else if (std::isdigit(static_cast<unsigned char>(name[0]))) {
      if (used_auto)
        lr::fail("cannot switch from automatic field numbering to manual field specification");
      used_manual = true;
      const size_t k = std::stoul(name.substr(0, 9));
      if (k >= args.pos.size())
        lr::fail("Replacement index {} out of range for positional args tuple", k);
      v = args.pos[k];
    } else {
      auto it = std::find_if(args.kw.begin(), args.kw.end(),
                             [&](const auto& kv) { return kv.first == name; });
      if (it == args.kw.end()) lr::fail("KeyError: '{}'", name);
      v = it->second;
    }
    if (name_end != std::string::npos) {  // .attr and [key] lookups
      std::string_view rest = std::string_view(field).substr(name_end);
      while (!rest.empty()) {
        const bool dot = rest[0] == '.';
        const size_t end = dot ? rest.find_first_of(".[", 1) : rest.find(']');
        if (!dot && end == std::string_view::npos) lr::fail("Missing ']' in format string");
        const std::string key(
            rest.substr(1, (end == std::string_view::npos ? rest.size() : end) - 1));
        if (dot) {
          v = get_attr(v, key);
        } else {
          const bool numeric =
              !key.empty() && key.find_first_not_of("0123456789") == std::string::npos;
          v = get_item(
              v, numeric ? Value(static_cast<int64_t>(std::stoll(key.substr(0, 18)))) : Value(key));
        }
        rest =
            end == std::string_view::npos ? std::string_view() : rest.substr(dot ? end : end + 1);
      }
    }
    if (conversion == 'r') {
      v = Value(repr(v));
    } else if (conversion == 's') {
      v = Value(to_str(v));
    } else if (conversion) {
      lr::fail("unsupported format conversion '!{}'", conversion);
    }
    if (fmt_value.is_markup() && !v.is_markup()) v = Value(html_escape(to_str(v)));
    out += format_value(v, spec);
    check_size(out.size());
  }
  return out;
}

std::string percent_format(const Value& fmt_value, const Value& args) {
  const std::string& f = fmt_value.str();
  std::vector<Value> pos;
  // Python takes any non-tuple, non-str argument with __getitem__ as a
  // mapping: %(key)s looks into it, and arguments left over are no error.
  const bool mapping_like =
      args.is_dict() || args.kind() == Kind::List || args.kind() == Kind::Undefined;
  const Dict* mapping = args.is_dict() ? &args.dict() : nullptr;
  if (args.kind() == Kind::Tuple) {
    pos = args.items();
  } else {
    pos.push_back(args);
  }
  size_t next = 0;
  auto take = [&]() -> const Value& {
    if (next >= pos.size()) lr::fail("not enough arguments for format string");
    return pos[next++];
  };
  std::string out;
  bool used_key = false;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] != '%') {
      out += f[i];
      continue;
    }
    if (++i >= f.size()) lr::fail("incomplete format");
    const Value* v = nullptr;
    if (f[i] == '(') {
      const size_t close = f.find(')', i);
      if (close == std::string::npos || !mapping_like) lr::fail("format requires a mapping");
      if (!mapping) lr::fail("{} indices must be integers or slices, not str", type_name(args));
      v = mapping->find(std::string_view(f).substr(i + 1, close - i - 1));
      if (!v) lr::fail("KeyError: '{}'", f.substr(i + 1, close - i - 1));
      used_key = true;
      i = close + 1;
    }
    Spec p;
    for (; i < f.size() && std::string_view("-+ #0").find(f[i]) != std::string_view::npos; ++i) {
      if (f[i] == '-') p.align = '<';
      if (f[i] == '+' || f[i] == ' ') p.sign = f[i];
      if (f[i] == '#') p.alt = true;
      if (f[i] == '0' && p.align != '<') p.fill.assign(1, '0'), p.align = '=';
    }
    if (p.align == '<') p.fill.assign(1, ' ');
    for (; i < f.size() && std::isdigit(static_cast<unsigned char>(f[i])) && p.width < 1'000'000;
         ++i)
      p.width = p.width * 10 + (f[i] - '0');
    if (i < f.size() && f[i] == '.') {
      p.precision = 0;
      for (++i;
           i < f.size() && std::isdigit(static_cast<unsigned char>(f[i])) && p.precision < 10'000;
           ++i)
        p.precision = p.precision * 10 + (f[i] - '0');
    }
    if (i >= f.size()) lr::fail("incomplete format");
    const char t = f[i];
    if (t == '%') {
      out += '%';
      continue;
    }
    const Value& arg = v ? *v : take();
    Spec q = p;
    if (!q.align) q.align = '>';
    if (t == 's' || t == 'r' || t == 'a') {
      std::string s = t == 's' ? to_str(arg) : repr(arg);
      if (fmt_value.is_markup() && !arg.is_markup()) s = html_escape(s);  // Markup % escapes
      if (p.precision >= 0) s = format_value(Value(s), fmt::format(".{}", p.precision));
      q.fill.assign(1, ' ');
      out += pad(s, "", q, '>');
    } else if (t == 'd' || t == 'i' || t == 'u') {
      if (!arg.is_number())
        lr::fail("%{} format: a real number is required, not {}", t, type_name(arg));
      q.precision = -1;
      q.type = 'd';
      const Value n = arg.is_int() ? arg : Value(static_cast<int64_t>(std::trunc(arg.number())));
      out += format_number(n, q);
    } else if (std::string_view("xXo").find(t) != std::string_view::npos) {
      if (!arg.is_int()) lr::fail("%{} format: an integer is required, not {}", t, type_name(arg));
      q.type = t;
      q.precision = -1;
      out += format_number(arg, q);
    } else if (std::string_view("eEfFgG").find(t) != std::string_view::npos) {
      if (!arg.is_number()) lr::fail("must be real number, not {}", type_name(arg));
      q.type = t;
      out += format_number(Value(arg.number()), q);
    } else {
      lr::fail("unsupported format character '{}'", t);
    }
    check_size(out.size());
  }
  if (!used_key && !mapping_like && next < pos.size())
    lr::fail("not all arguments converted during string formatting");
  return out;
}

}  // namespace lr::jinja
