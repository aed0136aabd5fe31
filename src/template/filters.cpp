// jinja2's filters on text and numbers, tojson as transformers defines it,
// and the filter registry.
#include "template/filters.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <unordered_map>

#include "core/error.h"
#include "template/builtins.h"
#include "template/unicode.h"

namespace lr::jinja {

namespace {

// jinja2's soft_str: strings (Markup included) as they are, the rest through str().
Value soft_str(const Value& v) {
  return v.is_string() ? v : Value(to_str(v));
}

Value like(const Value& v, std::string s) {
  return v.is_markup() ? Value::markup(std::move(s)) : Value(std::move(s));
}

std::string name_of(const char* f) {
  return fmt::format("filter '{}'", f);
}

void no_args(const CallArgs& a, const char* f) {
  if (!a.pos.empty() || !a.kw.empty()) lr::fail("{} takes no arguments", name_of(f));
}

Value f_abs(Interp&, const Value& v, const CallArgs& a) {
  no_args(a, "abs");
  if (v.kind() == Kind::Float) return Value(std::fabs(v.number()));
  if (!v.is_int()) lr::fail("bad operand type for abs(): '{}'", type_name(v));
  return negate(v, v.integer() < 0);
}

template <int kCase>  // 0 upper, 1 lower, 2 capitalize
Value f_case(Interp&, const Value& v, const CallArgs& a) {
  no_args(a, kCase == 0 ? "upper" : kCase == 1 ? "lower" : "capitalize");
  const Value s = soft_str(v);
  return like(s, kCase == 0   ? utf8::upper(s.str())
                 : kCase == 1 ? utf8::lower(s.str())
                              : utf8::capitalize(s.str()));
}

// jinja2's title: each piece after [-\s({\[<]+ capitalized.
Value f_title(Interp&, const Value& v, const CallArgs& a) {
  no_args(a, "title");
  const Value s = soft_str(v);
  const std::u32string u = utf8::decode(s.str());
  auto sep = [](char32_t c) {
    return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || utf8::is_space(c);
  };
  std::u32string out;
  for (size_t i = 0; i < u.size();) {
    size_t j = i;
    const bool is_sep = sep(u[i]);
    while (j < u.size() && sep(u[j]) == is_sep) ++j;
    if (is_sep) {
      out += u.substr(i, j - i);
    } else {
      out += utf8::to_upper(u[i]);
      for (size_t k = i + 1; k < j; ++k) out += utf8::to_lower(u[k]);
    }
    i = j;
  }
  return Value(utf8::encode(out));  // "".join(...): a plain str, Markup or not
}

Value f_center(Interp& in, const Value& v, const CallArgs& a) {
  ArgBinder b(name_of("center"), a, {"width"});
  CallArgs m;
  m.pos.push_back(Value(b.get_int(0, 80)));
  const Value s = soft_str(v);
  auto method = bound_method(s, "center");
  LR_ASSERT(method.has_value());
  return method->object().call(in, m);
}

Value f_default(Interp&, const Value& v, const CallArgs& a) {
  ArgBinder b(name_of("default"), a, {"default_value", "boolean"});
  if (v.is_undefined() || (b.get_bool(1, false) && !v.truthy())) return b.get(0, Value(""));
  return v;
}

template <bool kForce>
Value f_escape(Interp&, const Value& v, const CallArgs& a) {
  no_args(a, "escape");
  if (v.is_markup() && !kForce) return v;
  return Value::markup(html_escape(to_str(v)));
}

// Python float(str): surrounding whitespace, sign, underscores between digits, inf/nan.
bool parse_float(std::string_view s, double& out) {
  std::string t = py_strip(s, Value::none(), true, true);
  std::string lower = utf8::lower(t);
  size_t i = 0;
  bool neg = false;
  if (i < lower.size() && (lower[i] == '+' || lower[i] == '-')) neg = lower[i++] == '-';
  const std::string body = lower.substr(i);
  if (body == "inf" || body == "infinity" || body == "nan") {
    out = body == "nan" ? NAN : INFINITY;
    if (neg) out = -out;
    return true;
  }
  std::string clean;
  bool digits = false;
  for (size_t k = 0; k < body.size(); ++k) {
    const char c = body[k];
    if (c == '_') {
      if (k == 0 || k + 1 >= body.size() ||
          !std::isdigit(static_cast<unsigned char>(body[k - 1])) ||
          !std::isdigit(static_cast<unsigned char>(body[k + 1])))
        return false;
      continue;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      digits = true;
    } else if (c != '.' && c != 'e' && c != '+' && c != '-') {
      return false;
    }
    clean += c;
  }
  if (!digits) return false;
  const auto r = std::from_chars(clean.data(), clean.data() + clean.size(), out);
  if (r.ptr != clean.data() + clean.size()) return false;
  if (r.ec == std::errc::result_out_of_range)
    out = clean.find("e-") != std::string::npos ? 0.0 : INFINITY;
  if (neg) out = -out;
  return true;
}

// Python int(str, base).
bool parse_int(std::string_view s, int64_t base, int64_t& out) {
  const std::string t = py_strip(s, Value::none(), true, true);
  size_t i = 0;
  bool neg = false;
  if (i < t.size() && (t[i] == '+' || t[i] == '-')) neg = t[i++] == '-';
  auto prefix = [&](char p) { return i + 1 < t.size() && t[i] == '0' && (t[i + 1] | 32) == p; };
  if (base == 0) {
    base = prefix('x') ? 16 : prefix('o') ? 8 : prefix('b') ? 2 : 10;
    if (base == 10 && t.size() > i + 1 && t[i] == '0' &&
        t.find_first_not_of("0_", i) != std::string::npos)
      return false;  // "012" is not a base-0 literal
  }
  if (base < 2 || base > 36) lr::fail("int() base must be >= 2 and <= 36, or 0");
  if ((base == 16 && prefix('x')) || (base == 8 && prefix('o')) || (base == 2 && prefix('b'))) {
    i += 2;
    if (i < t.size() && t[i] == '_') ++i;
  }
  if (i >= t.size()) return false;
  unsigned __int128 v = 0;
  bool prev_digit = false;
  for (; i < t.size(); ++i) {
    const char c = t[i];
    if (c == '_' && prev_digit && i + 1 < t.size() && t[i + 1] != '_') {
      prev_digit = false;
      continue;
    }
    int d = std::isdigit(static_cast<unsigned char>(c))   ? c - '0'
            : std::isalpha(static_cast<unsigned char>(c)) ? (c | 32) - 'a' + 10
                                                          : 99;
    if (d >= base) return false;
    v = v * static_cast<unsigned>(base) + static_cast<unsigned>(d);
    if (v > (static_cast<unsigned __int128>(1) << 63))
      lr::fail("int: {} is out of the 64-bit range", t);
    prev_digit = true;
  }
  if (!prev_digit) return false;
  if (!neg && v == (static_cast<unsigned __int128>(1) << 63))
    lr::fail("int: {} is out of the 64-bit range", t);
  out = neg ? static_cast<int64_t>(0 - static_cast<uint64_t>(v)) : static_cast<int64_t>(v);
  return true;
}

Value float_to_int(double f) {
  if (std::isinf(f)) lr::fail("cannot convert float infinity to integer");
  if (std::fabs(f) >= 9.223372036854775807e18) lr::fail("int: {} is out of the 64-bit range", f);
  return Value(static_cast<int64_t>(std::trunc(f)));
}

Value f_int(Interp&, const Value& v, const CallArgs& a) {
  ArgBinder b(name_of("int"), a, {"default", "base"});
  const Value def = b.get(0, Value(0));
  defined(v);
  int64_t i;
  double f;
  if (v.is_string()) {
    if (parse_int(v.str(), b.get_int(1, 10), i)) return Value(i);
    if (parse_float(v.str(), f) && !std::isnan(f)) {
      if (std::isinf(f)) return def;
      return float_to_int(f);
    }
    return def;
  }
  if (v.is_int()) return Value(v.integer());
  if (v.kind() == Kind::Float) {
    if (std::isnan(v.number())) return def;
    return float_to_int(v.number());
  }
  return def;
}

Value f_float(Interp&, const Value& v, const CallArgs& a) {
  ArgBinder b(name_of("float"), a, {"default"});
  defined(v);
  if (v.is_number()) return Value(v.number());
  double f;
  if (v.is_string() && parse_float(v.str(), f)) return Value(f);
  return b.get(0, Value(0.0));
}

Value f_format(Interp&, const Value& v, const CallArgs& a) {
  if (!a.pos.empty() && !a.kw.empty())
    lr::fail("can't handle positional and keyword arguments at the same time");
  Value args;
  if (!a.kw.empty()) {
    auto d = std::make_shared<Dict>();
    for (const auto& [k, x] : a.kw) d->set(Value(k), x);
    args = Value::dict(std::move(d));
  } else {
    args = Value::tuple(a.pos);
  }
  const Value s = soft_str(v);
  return like(s, percent_format(s, args));
}

Value f_indent(Interp&, const Value& v, const CallArgs& a) {
  ArgBinder b(name_of("indent"), a, {"width", "first", "blank"});
  const Value w = b.get(0, Value(4));
  std::string indention;
  if (w.is_string()) {
    indention = w.str();
  } else {
    const int64_t n = to_index(w, "indent width");
    check_size(static_cast<size_t>(std::max<int64_t>(n, 0)));
    indention = std::string(static_cast<size_t>(std::max<int64_t>(n, 0)), ' ');
  }
  defined(v);
  if (!v.is_string())  // jinja2 appends "\n" to the value as it is
    lr::fail("unsupported operand type(s) for +=: '{}' and 'str'", type_name(v));
  const Value& s = v;
  const std::vector<std::string> lines = py_splitlines(s.str() + "\n", false);
  std::string rv;
  if (b.get_bool(2, false)) {
    for (size_t k = 0; k < lines.size(); ++k) rv += (k ? "\n" + indention : "") + lines[k];
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t k = 1; k < lines.size(); ++k) {
      rv += "\n";
      if (!lines[k].empty()) rv += indention;
      rv += lines[k];
      check_size(rv.size());
    }
  }
  if (b.get_bool(1, false)) rv = indention + rv;
  return like(s, std::move(rv));
}

Value f_length(Interp&, const Value& v, const CallArgs& a) {
  no_args(a, "length");
  switch (v.kind()) {
    case Kind::Undefined:
      return Value(0);
    case Kind::String:
      return Value(static_cast<int64_t>(utf8::length(v.str())));
    case Kind::List:
    case Kind::Tuple:
    case Kind::View:
      return Value(static_cast<int64_t>(v.items().size()));
    case Kind::Dict:
      return Value(static_cast<int64_t>(v.dict().size()));
    default:
      lr::fail("object of type '{}' has no len()", type_name(v));
  }
}

Value f_replace(Interp&, const Value& v, const CallArgs& a) {
  ArgBinder b(name_of("replace"), a, {"old", "new", "count"});
  const Value count = b.get(2, Value::none());
  return Value(py_replace(to_str(v), to_str(b.get(0)), to_str(b.get(1)),
                          count.is_none() ? -1 : to_index(count, "replace count")));
}

Value f_round(Interp&, const Value& v, const CallArgs& a) {
  ArgBinder b(name_of("round"), a, {"precision", "method"});
  const int64_t precision = b.get_int(0, 0);
  const std::string method = b.get_str(1, "common");
  if (method != "common" && method != "ceil" && method != "floor")
    lr::fail("method must be common, ceil or floor");
  if (!v.is_number()) lr::fail("type {} doesn't define __round__ method", type_name(v));
  if (method == "common") {
    if (v.is_int()) {
      if (precision >= 0) return Value(v.integer());
      lr::fail("round() of an integer to negative precision is not supported");
    }
    const double x = v.number();
    if (!std::isfinite(x) || precision > 300) return Value(x);
    if (precision < 0) lr::fail("round() to negative precision is not supported");
    char buf[400];  // correctly rounded, half to even, as Python's round()
    std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(precision), x);
    return Value(std::strtod(buf, nullptr));
  }
  if (precision < -300 || precision > 300)
    lr::fail("round(): precision {} out of range", precision);
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double r =
      method == "ceil" ? std::ceil(v.number() * scale) : std::floor(v.number() * scale);
  return Value(r / scale);
}

Value f_safe(Interp&, const Value& v, const CallArgs& a) {
  no_args(a, "safe");
  return Value::markup(to_str(v));
}

Value f_string(Interp&, const Value& v, const CallArgs& a) {
  no_args(a, "string");
  return soft_str(v);
}

Value f_trim(Interp&, const Value& v, const CallArgs& a) {
  ArgBinder b(name_of("trim"), a, {"chars"});
  const Value s = soft_str(v);
  Value chars = b.get(0, Value::none());
  if (s.is_markup() && chars.is_string()) chars = Value(html_escape(chars.str()));
  return like(s, py_strip(s.str(), chars, true, true));
}

Value f_truncate(Interp&, const Value& v, const CallArgs& a) {
  ArgBinder b(name_of("truncate"), a, {"length", "killwords", "end", "leeway"});
  const int64_t length = b.get_int(0, 255);
  const std::string end = b.get_str(2, "...");
  const int64_t leeway = b.has(3) && !b.get(3).is_none() ? b.get_int(3, 5) : 5;
  const auto end_len = static_cast<int64_t>(utf8::length(end));
  if (length < end_len) lr::fail("expected length >= {}, got {}", end_len, length);
  if (leeway < 0) lr::fail("expected leeway >= 0, got {}", leeway);
  if (v.is_undefined()) return v;  // len() 0: short enough
  if (!v.is_string()) {            // jinja2 measures and slices the value as it is
    const int64_t n = v.is_seq()    ? static_cast<int64_t>(v.items().size())
                      : v.is_dict() ? static_cast<int64_t>(v.dict().size())
                                    : -1;
    if (n < 0) lr::fail("object of type '{}' has no len()", type_name(v));
    if (n <= length + leeway) return v;
    lr::fail("can only concatenate {} (not \"str\") to {}", type_name(v), type_name(v));
  }
  const std::u32string s = utf8::decode(v.str());
  if (static_cast<int64_t>(s.size()) <= length + leeway) return v;
  const std::u32string head = s.substr(0, static_cast<size_t>(length - end_len));
  // Markup stays Markup, and escapes the end it is joined with.
  const std::string tail = v.is_markup() ? html_escape(end) : end;
  if (b.get_bool(1, false)) return like(v, utf8::encode(head) + tail);
  const size_t space = head.rfind(U' ');
  return like(v, utf8::encode(space == std::u32string::npos ? head : head.substr(0, space)) + tail);
}

Value f_wordcount(Interp&, const Value& v, const CallArgs& a) {
  no_args(a, "wordcount");
  const std::string s = to_str(v);
  tick_chars(s.size());
  int64_t n = 0;
  bool in_word = false;
  for (size_t i = 0; i < s.size();) {
    const bool w = utf8::is_word(utf8::next(s, i));
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value(n);
}

Value f_tojson(Interp&, const Value& v, const CallArgs& a) {
  ArgBinder b(name_of("tojson"), a, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonOptions o;
  o.ensure_ascii = b.get_bool(0, false);
  o.sort_keys = b.get_bool(3, false);
  const Value indent = b.get(1, Value::none());
  if (indent.is_string()) {
    o.indent = indent.str();
  } else if (!indent.is_none()) {
    const int64_t n = to_index(indent, "tojson indent");
    o.indent = std::string(static_cast<size_t>(std::clamp<int64_t>(n, 0, 1 << 16)), ' ');
  }
  if (o.indent) o.item_separator.assign(1, ',');
  const Value seps = b.get(2, Value::none());
  if (!seps.is_none()) {
    if (!seps.is_seq() || seps.items().size() != 2 || !seps.items()[0].is_string() ||
        !seps.items()[1].is_string())
      lr::fail("tojson: separators must be a pair of strings");
    o.item_separator = seps.items()[0].str();
    o.key_separator = seps.items()[1].str();
  }
  return Value(to_json(v, o));
}

Value f_attr(Interp&, const Value& v, const CallArgs& a) {
  ArgBinder b(name_of("attr"), a, {"name"});
  const std::string name = b.get_str(0, "");
  if (v.kind() == Kind::Namespace || v.kind() == Kind::Object || v.is_undefined())
    return get_attr(v, name);
  if (auto m = bound_method(v, name)) return *m;
  return Value::undefined(fmt::format("'{}' has no attribute '{}'", type_repr(v), name));
}

const std::vector<FilterDef> kTextFilters = {
    {"abs", f_abs},
    {"attr", f_attr},
    {"capitalize", f_case<2>},
    {"center", f_center},
    {"d", f_default},
    {"default", f_default},
    {"e", f_escape<false>},
    {"escape", f_escape<false>},
    {"float", f_float},
    {"forceescape", f_escape<true>},
    {"format", f_format},
    {"indent", f_indent},
    {"int", f_int},
    {"count", f_length},
    {"length", f_length},
    {"lower", f_case<1>},
    {"replace", f_replace},
    {"round", f_round},
    {"safe", f_safe},
    {"string", f_string},
    {"title", f_title},
    {"trim", f_trim},
    {"truncate", f_truncate},
    {"upper", f_case<0>},
    {"wordcount", f_wordcount},
    {"tojson", f_tojson},
};

// All of jinja2's filters, implemented here or not.
constexpr std::string_view kJinja2Filters[] = {
    "abs",       "attr",       "batch",       "capitalize", "center",  "count",
    "d",         "default",    "dictsort",    "e",          "escape",  "filesizeformat",
    "first",     "float",      "forceescape", "format",     "groupby", "indent",
    "int",       "join",       "last",        "length",     "list",    "lower",
    "items",     "map",        "min",         "max",        "pprint",  "random",
    "reject",    "rejectattr", "replace",     "reverse",    "round",   "safe",
    "select",    "selectattr", "slice",       "sort",       "string",  "striptags",
    "sum",       "title",      "trim",        "truncate",   "unique",  "upper",
    "urlencode", "urlize",     "wordcount",   "wordwrap",   "xmlattr", "tojson",
};

const std::unordered_map<std::string_view, FilterFn>& registry() {
  static const auto* table = [] {
    auto* t = new std::unordered_map<std::string_view, FilterFn>();
    for (const FilterDef& f : kTextFilters) t->emplace(f.name, f.fn);
    for (const FilterDef& f : sequence_filters()) t->emplace(f.name, f.fn);
    return t;
  }();
  return *table;
}

}  // namespace

bool is_filter(std::string_view name) {
  return registry().count(name) > 0;
}

bool is_jinja2_filter(std::string_view name) {
  for (std::string_view f : kJinja2Filters)
    if (f == name) return true;
  return false;
}

Value call_filter(Interp& in, std::string_view name, const Value& input, const CallArgs& args) {
  auto it = registry().find(name);
  if (it == registry().end()) {
    lr::fail("{} filter '{}'", is_jinja2_filter(name) ? "unsupported" : "unknown", name);
  }
  return it->second(in, input, args);
}

}  // namespace lr::jinja
