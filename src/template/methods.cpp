// The methods of str, dict, list and tuple as the immutable sandbox allows them.
#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "template/builtins.h"
#include "template/unicode.h"

namespace lr::jinja {

namespace {

using MethodFn = Value (*)(const Value& self, const CallArgs& a);

class BoundMethod : public Object {
 public:
  BoundMethod(Value self, std::string name, MethodFn fn)
      : self_(std::move(self)), name_(std::move(name)), fn_(fn) {}
  std::string type_name() const override { return "builtin_function_or_method"; }
  bool callable() const override { return true; }
  Value call(Interp&, CallArgs args) override {
    if (!fn_) lr::fail("unsupported method {}.{}()", jinja::type_name(self_), name_);
    return fn_(self_, args);
  }

 private:
  Value self_;
  std::string name_;
  MethodFn fn_;  // null: a Python method this engine does not implement
};

std::string what(const Value& self, const char* name) {
  return fmt::format("{}.{}()", type_name(self), name);
}

void no_kwargs(const Value& self, const CallArgs& a, const char* name) {
  if (!a.kw.empty()) lr::fail("{} takes no keyword arguments", what(self, name));
}

const std::string& str_arg(const Value& v, const std::string& where) {
  if (!v.is_string()) lr::fail("{}: expected a string, got '{}'", where, type_name(v));
  return v.str();
}

Value wrap(const Value& self, std::string s) {
  return self.is_markup() ? Value::markup(std::move(s)) : Value(std::move(s));
}

// Markup's methods escape their string arguments (markupsafe's escaping wrapper).
Value esc(const Value& self, const Value& arg) {
  if (self.is_markup() && arg.is_string() && !arg.is_markup())
    return Value::markup(html_escape(arg.str()));
  return arg;
}

// s[start:end] in code points, as the find/count/startswith methods take them.
std::u32string window(const Value& self, const ArgBinder& b, size_t first) {
  std::u32string s = utf8::decode(self.str());
  const auto n = static_cast<int64_t>(s.size());
  auto norm = [&](size_t k, int64_t def) {
    if (!b.has(k) || b.get(k).is_none()) return def;
    int64_t i = to_index(b.get(k), "slice index");
    if (i < 0) i = std::max<int64_t>(0, i + n);
    return std::min(i, n);
  };
  const int64_t start = norm(first, 0), end = norm(first + 1, n);
  return start >= end ? std::u32string() : s.substr(start, end - start);
}

template <bool kStart>
Value m_starts(const Value& self, const CallArgs& a) {
  no_kwargs(self, a, kStart ? "startswith" : "endswith");
  ArgBinder b(what(self, kStart ? "startswith" : "endswith"), a, {"prefix", "start", "end"});
  const std::u32string s = window(self, b, 1);
  std::vector<Value> options;
  if (b.get(0).is_string()) {
    options.push_back(b.get(0));
  } else if (b.get(0).kind() == Kind::Tuple) {
    options = b.get(0).items();
  } else {
    lr::fail("{} first arg must be str or a tuple of str, not {}", b.what(), type_name(b.get(0)));
  }
  for (const Value& o : options) {
    const std::u32string p = utf8::decode(str_arg(o, b.what()));
    if (p.size() > s.size()) continue;
    if (kStart ? s.compare(0, p.size(), p) == 0 : s.compare(s.size() - p.size(), p.size(), p) == 0)
      return Value(true);
  }
  return Value(false);
}

template <bool kLeft, bool kRight>
Value m_strip(const Value& self, const CallArgs& a) {
  no_kwargs(self, a, "strip");
  ArgBinder b(what(self, "strip"), a, {"chars"});
  const Value chars = esc(self, b.get(0, Value::none()));
  return wrap(self, py_strip(self.str(), chars, kLeft, kRight));
}

template <bool kRight>
Value m_split(const Value& self, const CallArgs& a) {
  ArgBinder b(what(self, kRight ? "rsplit" : "split"), a, {"sep", "maxsplit"});
  return Value::list(py_split(self, b.get(0, Value::none()), b.get_int(1, -1), kRight));
}

Value m_splitlines(const Value& self, const CallArgs& a) {
  ArgBinder b(what(self, "splitlines"), a, {"keepends"});
  std::vector<Value> out;
  for (std::string& line : py_splitlines(self.str(), b.get_bool(0, false)))
    out.push_back(wrap(self, std::move(line)));
  return Value::list(std::move(out));
}

template <int kCase>  // 0 upper, 1 lower, 2 title, 3 capitalize, 4 swapcase, 5 casefold
Value m_case(const Value& self, const CallArgs& a) {
  if (!a.pos.empty() || !a.kw.empty()) lr::fail("{} takes no arguments", what(self, "upper"));
  const std::string& s = self.str();
  switch (kCase) {
    case 0:
      return wrap(self, utf8::upper(s));
    case 1:
      return wrap(self, utf8::lower(s));
    case 2:
      return wrap(self, utf8::title(s));
    case 3:
      return wrap(self, utf8::capitalize(s));
    case 4: {
      std::string out;
      for (size_t i = 0; i < s.size();) {
        const char32_t c = utf8::next(s, i);
        utf8::append(out, utf8::is_upper(c) ? utf8::to_lower(c) : utf8::to_upper(c));
      }
      return wrap(self, std::move(out));
    }
    default: {
      std::string out = utf8::lower(s), r;
      for (size_t i = 0; i < out.size();) {
        const char32_t c = utf8::next(out, i);
        if (c == 0xDF) {
          r += "ss";
        } else {
          utf8::append(r, c);
        }
      }
      return wrap(self, std::move(r));
    }
  }
}

Value m_replace(const Value& self, const CallArgs& a) {
  no_kwargs(self, a, "replace");
  ArgBinder b(what(self, "replace"), a, {"old", "new", "count"});
  const std::string& old = str_arg(esc(self, b.get(0)), b.what());
  const std::string& repl = str_arg(esc(self, b.get(1)), b.what());
  return wrap(self, py_replace(self.str(), old, repl, b.get_int(2, -1)));
}

template <int kOp>  // 0 find, 1 rfind, 2 index, 3 rindex, 4 count
Value m_find(const Value& self, const CallArgs& a) {
  static const char* const names[] = {"find", "rfind", "index", "rindex", "count"};
  no_kwargs(self, a, names[kOp]);
  ArgBinder b(what(self, names[kOp]), a, {"sub", "start", "end"});
  const std::u32string sub = utf8::decode(str_arg(b.get(0), b.what()));
  const std::u32string s = window(self, b, 1);
  tick_search(self.str().size(), sub.size() * 4);
  int64_t offset = 0;
  if (b.has(1) && !b.get(1).is_none()) {
    const auto n = static_cast<int64_t>(utf8::length(self.str()));
    offset = to_index(b.get(1), "slice index");
    offset = offset < 0 ? std::max<int64_t>(0, offset + n) : std::min(offset, n);
  }
  if (kOp == 4) {
    if (sub.empty()) return Value(static_cast<int64_t>(s.size()) + 1);
    int64_t n = 0;
    for (size_t p = s.find(sub); p != std::u32string::npos; p = s.find(sub, p + sub.size())) ++n;
    return Value(n);
  }
  const size_t p = kOp == 0 || kOp == 2 ? s.find(sub) : s.rfind(sub);
  if (p == std::u32string::npos) {
    if (kOp >= 2) lr::fail("substring not found");
    return Value(-1);
  }
  return Value(static_cast<int64_t>(p) + offset);
}

Value m_join(const Value& self, const CallArgs& a) {
  no_kwargs(self, a, "join");
  ArgBinder b(what(self, "join"), a, {"iterable"});
  std::string out;
  size_t k = 0;
  for (const Value& item : iterate(defined(b.get(0)))) {
    if (!item.is_string())
      lr::fail("sequence item {}: expected str instance, {} found", k, type_name(item));
    if (k++) out += self.str();
    out += self.is_markup() && !item.is_markup() ? html_escape(item.str()) : item.str();
    check_size(out.size());
  }
  return wrap(self, std::move(out));
}

Value m_format(const Value& self, const CallArgs& a) {
  return wrap(self, str_format(self, a));
}

template <bool (*kPred)(char32_t)>
Value m_is(const Value& self, const CallArgs& a) {
  no_kwargs(self, a, "is...");
  const std::string& s = self.str();
  tick_chars(s.size());
  if (s.empty()) return Value(false);
  for (size_t i = 0; i < s.size();)
    if (!kPred(utf8::next(s, i))) return Value(false);
  return Value(true);
}
bool is_alnum(char32_t c) {
  return utf8::is_alpha(c) || utf8::is_digit(c);
}
bool is_ascii(char32_t c) {
  return c < 0x80;
}

template <bool kUpper>
Value m_iscase(const Value& self, const CallArgs&) {
  bool cased = false;
  const std::string& s = self.str();
  tick_chars(s.size());
  for (size_t i = 0; i < s.size();) {
    const char32_t c = utf8::next(s, i);
    if (kUpper ? utf8::is_lower(c) : utf8::is_upper(c)) return Value(false);
    cased = cased || (kUpper ? utf8::is_upper(c) : utf8::is_lower(c));
  }
  return Value(cased);
}

// isascii / isprintable: true for the empty string too.
template <bool (*kPred)(char32_t)>
Value m_is_all(const Value& self, const CallArgs& a) {
  if (self.str().empty()) return Value(true);
  return m_is<kPred>(self, a);
}

template <int kAlign>  // 0 center, 1 ljust, 2 rjust
Value m_justify(const Value& self, const CallArgs& a) {
  static const char* const names[] = {"center", "ljust", "rjust"};
  no_kwargs(self, a, names[kAlign]);
  ArgBinder b(what(self, names[kAlign]), a, {"width", "fillchar"});
  const int64_t width = b.get_int(0, 0);
  const std::string fill = b.get_str(1, " ");
  if (utf8::length(fill) != 1) lr::fail("The fill character must be exactly one character long");
  const auto len = static_cast<int64_t>(utf8::length(self.str()));
  const int64_t marg = width - len;
  if (marg <= 0) return self;
  check_size(self.str().size() + fill.size() * static_cast<size_t>(marg));
  int64_t left = kAlign == 0 ? marg / 2 + (marg & width & 1) : kAlign == 1 ? 0 : marg;
  std::string out;
  for (int64_t k = 0; k < left; ++k) out += fill;
  out += self.str();
  for (int64_t k = left; k < marg; ++k) out += fill;
  return wrap(self, std::move(out));
}

Value m_zfill(const Value& self, const CallArgs& a) {
  no_kwargs(self, a, "zfill");
  ArgBinder b(what(self, "zfill"), a, {"width"});
  const std::string& s = self.str();
  const int64_t fill = b.get_int(0, 0) - static_cast<int64_t>(utf8::length(s));
  if (fill <= 0) return self;
  check_size(s.size() + static_cast<size_t>(fill));
  const size_t sign = !s.empty() && (s[0] == '+' || s[0] == '-') ? 1 : 0;
  return wrap(self,
              s.substr(0, sign) + std::string(static_cast<size_t>(fill), '0') + s.substr(sign));
}

template <bool kPrefix>
Value m_remove(const Value& self, const CallArgs& a) {
  no_kwargs(self, a, kPrefix ? "removeprefix" : "removesuffix");
  ArgBinder b(what(self, kPrefix ? "removeprefix" : "removesuffix"), a, {"affix"});
  const std::string& s = self.str();
  const std::string& x = str_arg(esc(self, b.get(0)), b.what());
  if (x.size() > s.size()) return self;
  if (kPrefix && s.compare(0, x.size(), x) == 0) return wrap(self, s.substr(x.size()));
  if (!kPrefix && s.compare(s.size() - x.size(), x.size(), x) == 0)
    return wrap(self, s.substr(0, s.size() - x.size()));
  return self;
}

template <bool kRight>
Value m_partition(const Value& self, const CallArgs& a) {
  no_kwargs(self, a, "partition");
  ArgBinder b(what(self, kRight ? "rpartition" : "partition"), a, {"sep"});
  const std::string& s = self.str();
  const std::string& sep = str_arg(esc(self, b.get(0)), b.what());
  if (sep.empty()) lr::fail("empty separator");
  tick_search(s.size(), sep.size());
  const size_t p = kRight ? s.rfind(sep) : s.find(sep);
  if (p == std::string::npos) {
    return kRight ? Value::tuple({wrap(self, ""), wrap(self, ""), self})
                  : Value::tuple({self, wrap(self, ""), wrap(self, "")});
  }
  return Value::tuple(
      {wrap(self, s.substr(0, p)), wrap(self, sep), wrap(self, s.substr(p + sep.size()))});
}

// ---- dict ----

Value m_get(const Value& self, const CallArgs& a) {
  no_kwargs(self, a, "get");
  ArgBinder b(what(self, "get"), a, {"key", "default"});
  if (!b.has(0)) lr::fail("dict.get() takes at least 1 argument (0 given)");
  const Value* v = self.dict().find(b.get(0));
  return v ? *v : b.get(1, Value::none());
}

template <int kWhat>  // 0 items, 1 keys, 2 values
Value m_view(const Value& self, const CallArgs& a) {
  if (!a.pos.empty() || !a.kw.empty()) lr::fail("{} takes no arguments", what(self, "items"));
  std::vector<Value> out;
  for (const auto& [k, v] : self.dict().entries())
    out.push_back(kWhat == 0 ? Value::tuple({k, v}) : kWhat == 1 ? k : v);
  return Value::view(std::move(out), kWhat == 0   ? "dict_items"
                                     : kWhat == 1 ? "dict_keys"
                                                  : "dict_values");
}

Value m_copy(const Value& self, const CallArgs&) {
  if (self.is_dict()) return Value::dict(self.dict());
  return Value::list(self.items());
}

// ---- list / tuple ----

Value m_count(const Value& self, const CallArgs& a) {
  no_kwargs(self, a, "count");
  ArgBinder b(what(self, "count"), a, {"value"});
  int64_t n = 0;
  for (const Value& x : self.items()) n += equal(x, b.get(0)) ? 1 : 0;
  return Value(n);
}

Value m_index(const Value& self, const CallArgs& a) {
  no_kwargs(self, a, "index");
  ArgBinder b(what(self, "index"), a, {"value"});
  const auto& items = self.items();
  for (size_t k = 0; k < items.size(); ++k)
    if (equal(items[k], b.get(0))) return Value(static_cast<int64_t>(k));
  lr::fail("{} is not in {}", repr(b.get(0)), type_name(self));
}

using Table = std::unordered_map<std::string_view, MethodFn>;

const Table kStr = {
    {"strip", m_strip<true, true>},
    {"lstrip", m_strip<true, false>},
    {"rstrip", m_strip<false, true>},
    {"split", m_split<false>},
    {"rsplit", m_split<true>},
    {"splitlines", m_splitlines},
    {"startswith", m_starts<true>},
    {"endswith", m_starts<false>},
    {"upper", m_case<0>},
    {"lower", m_case<1>},
    {"title", m_case<2>},
    {"capitalize", m_case<3>},
    {"swapcase", m_case<4>},
    {"casefold", m_case<5>},
    {"replace", m_replace},
    {"find", m_find<0>},
    {"rfind", m_find<1>},
    {"index", m_find<2>},
    {"rindex", m_find<3>},
    {"count", m_find<4>},
    {"join", m_join},
    {"format", m_format},
    {"isdigit", m_is<utf8::is_digit>},
    {"isdecimal", m_is<utf8::is_digit>},
    {"isnumeric", m_is<utf8::is_digit>},
    {"isalpha", m_is<utf8::is_alpha>},
    {"isalnum", m_is<is_alnum>},
    {"isspace", m_is<utf8::is_space>},
    {"isprintable", m_is_all<utf8::is_printable>},
    {"isascii", m_is_all<is_ascii>},
    {"islower", m_iscase<false>},
    {"isupper", m_iscase<true>},
    {"center", m_justify<0>},
    {"ljust", m_justify<1>},
    {"rjust", m_justify<2>},
    {"zfill", m_zfill},
    {"removeprefix", m_remove<true>},
    {"removesuffix", m_remove<false>},
    {"partition", m_partition<false>},
    {"rpartition", m_partition<true>},
    // Python has these; calling one fails naming it.
    {"encode", nullptr},
    {"expandtabs", nullptr},
    {"format_map", nullptr},
    {"maketrans", nullptr},
    {"translate", nullptr},
    {"istitle", nullptr},
    {"isidentifier", nullptr},
};
const Table kDict = {{"get", m_get},        {"items", m_view<0>}, {"keys", m_view<1>},
                     {"values", m_view<2>}, {"copy", m_copy},     {"fromkeys", nullptr}};
const Table kList = {{"count", m_count}, {"index", m_index}, {"copy", m_copy}};
const Table kTuple = {{"count", m_count}, {"index", m_index}};
const std::unordered_set<std::string_view> kUnsafeDict = {"clear", "pop", "popitem", "setdefault",
                                                          "update"};
const std::unordered_set<std::string_view> kUnsafeList = {"append", "clear",  "extend",  "insert",
                                                          "pop",    "remove", "reverse", "sort"};

}  // namespace

std::optional<Value> bound_method(const Value& obj, const std::string& name) {
  const Table* table = nullptr;
  const std::unordered_set<std::string_view>* unsafe = nullptr;
  switch (obj.kind()) {
    case Kind::String:
      table = &kStr;
      break;
    case Kind::Dict:
      table = &kDict, unsafe = &kUnsafeDict;
      break;
    case Kind::List:
      table = &kList, unsafe = &kUnsafeList;
      break;
    case Kind::Tuple:
      table = &kTuple;
      break;
    default:
      return std::nullopt;
  }
  if (unsafe && unsafe->count(name)) {  // the immutable sandbox: a SecurityError when called
    return Value::undefined(
        fmt::format("access to attribute '{}' of '{}' object is unsafe.", name, type_name(obj)));
  }
  auto it = table->find(name);
  if (it == table->end()) return std::nullopt;
  return Value::object(std::make_shared<BoundMethod>(obj, name, it->second));
}

}  // namespace lr::jinja
