// jinja2's tests: `x is defined`, `x is string`, `x is divisibleby 3`, ...
#include <fmt/format.h>

#include <unordered_map>

#include "core/error.h"
#include "template/builtins.h"
#include "template/unicode.h"

namespace lr::jinja {

namespace {

using TestFn = bool (*)(const Value& v, const ArgBinder& b);

bool t_defined(const Value& v, const ArgBinder&) {
  return !v.is_undefined();
}
bool t_undefined(const Value& v, const ArgBinder&) {
  return v.is_undefined();
}
bool t_none(const Value& v, const ArgBinder&) {
  return v.is_none();
}
bool t_boolean(const Value& v, const ArgBinder&) {
  return v.kind() == Kind::Bool;
}
bool t_true(const Value& v, const ArgBinder&) {
  return v.kind() == Kind::Bool && v.boolean();
}
bool t_false(const Value& v, const ArgBinder&) {
  return v.kind() == Kind::Bool && !v.boolean();
}
bool t_integer(const Value& v, const ArgBinder&) {
  return v.kind() == Kind::Int;
}
bool t_float(const Value& v, const ArgBinder&) {
  return v.kind() == Kind::Float;
}
bool t_number(const Value& v, const ArgBinder&) {
  return v.is_number();
}
bool t_string(const Value& v, const ArgBinder&) {
  return v.is_string();
}
bool t_mapping(const Value& v, const ArgBinder&) {
  return v.is_dict();
}
bool t_escaped(const Value& v, const ArgBinder&) {
  return v.is_markup();
}

bool t_sequence(const Value& v, const ArgBinder&) {  // has len() and []
  switch (v.kind()) {
    case Kind::Undefined:
    case Kind::String:
    case Kind::List:
    case Kind::Tuple:
    case Kind::Dict:
      return true;
    default:
      return false;
  }
}

bool t_iterable(const Value& v, const ArgBinder&) {
  switch (v.kind()) {
    case Kind::Undefined:
    case Kind::String:
    case Kind::List:
    case Kind::Tuple:
    case Kind::Iterator:
    case Kind::View:
    case Kind::Dict:
      return true;
    case Kind::Object:
      return v.object().type_name() == "LoopContext";
    default:
      return false;
  }
}

bool t_callable(const Value& v, const ArgBinder&) {
  if (v.is_undefined()) return true;  // jinja2's Undefined has __call__
  return v.kind() == Kind::Object && v.object().callable();
}

bool t_lower(const Value& v, const ArgBinder&) {
  const std::string s = to_str(v);
  tick_chars(s.size());
  bool cased = false;
  for (size_t i = 0; i < s.size();) {
    const char32_t c = utf8::next(s, i);
    if (utf8::is_upper(c)) return false;
    cased = cased || utf8::is_lower(c);
  }
  return cased;
}

bool t_upper(const Value& v, const ArgBinder&) {
  const std::string s = to_str(v);
  tick_chars(s.size());
  bool cased = false;
  for (size_t i = 0; i < s.size();) {
    const char32_t c = utf8::next(s, i);
    if (utf8::is_lower(c)) return false;
    cased = cased || utf8::is_upper(c);
  }
  return cased;
}

bool is_remainder(const Value& v, const Value& by, int64_t want) {
  return equal(binary_op("%", v, by), Value(want));
}
bool t_odd(const Value& v, const ArgBinder&) {
  return is_remainder(v, Value(2), 1);
}
bool t_even(const Value& v, const ArgBinder&) {
  return is_remainder(v, Value(2), 0);
}
bool t_divisibleby(const Value& v, const ArgBinder& b) {
  return is_remainder(v, b.get(0), 0);
}

bool t_sameas(const Value& v, const ArgBinder& b) {
  const Value& o = b.get(0);
  if (v.kind() != o.kind()) return false;
  switch (v.kind()) {
    case Kind::None:
    case Kind::Undefined:
      return true;
    case Kind::Bool:
      return v.boolean() == o.boolean();
    case Kind::Int:  // CPython caches the small ints
      return v.integer() == o.integer() && v.integer() >= -5 && v.integer() <= 256;
    case Kind::Float:
      return false;
    default:
      return v.identity() == o.identity();
  }
}

bool t_in(const Value& v, const ArgBinder& b) {
  return contains(b.get(0), v);
}

template <int kOp>  // 0 ==, 1 !=, 2 <, 3 <=, 4 >, 5 >=
bool t_cmp(const Value& v, const ArgBinder& b) {
  static const char* const ops[] = {"==", "!=", "<", "<=", ">", ">="};
  return compare_op(ops[kOp], v, b.get(0));
}

bool t_filter(const Value& v, const ArgBinder&) {
  return v.is_string() && is_filter(v.str());
}
bool t_test(const Value& v, const ArgBinder&);

struct TestDef {
  TestFn fn;
  int nargs;  // arguments after the value
};

const std::unordered_map<std::string_view, TestDef>& registry() {
  static const auto* table = new std::unordered_map<std::string_view, TestDef>{
      {"odd", {t_odd, 0}},
      {"even", {t_even, 0}},
      {"divisibleby", {t_divisibleby, 1}},
      {"defined", {t_defined, 0}},
      {"undefined", {t_undefined, 0}},
      {"filter", {t_filter, 0}},
      {"test", {t_test, 0}},
      {"none", {t_none, 0}},
      {"boolean", {t_boolean, 0}},
      {"false", {t_false, 0}},
      {"true", {t_true, 0}},
      {"integer", {t_integer, 0}},
      {"float", {t_float, 0}},
      {"lower", {t_lower, 0}},
      {"upper", {t_upper, 0}},
      {"string", {t_string, 0}},
      {"mapping", {t_mapping, 0}},
      {"number", {t_number, 0}},
      {"sequence", {t_sequence, 0}},
      {"iterable", {t_iterable, 0}},
      {"callable", {t_callable, 0}},
      {"sameas", {t_sameas, 1}},
      {"escaped", {t_escaped, 0}},
      {"in", {t_in, 1}},
      {"==", {t_cmp<0>, 1}},
      {"eq", {t_cmp<0>, 1}},
      {"equalto", {t_cmp<0>, 1}},
      {"!=", {t_cmp<1>, 1}},
      {"ne", {t_cmp<1>, 1}},
      {"<", {t_cmp<2>, 1}},
      {"lt", {t_cmp<2>, 1}},
      {"lessthan", {t_cmp<2>, 1}},
      {"<=", {t_cmp<3>, 1}},
      {"le", {t_cmp<3>, 1}},
      {">", {t_cmp<4>, 1}},
      {"gt", {t_cmp<4>, 1}},
      {"greaterthan", {t_cmp<4>, 1}},
      {">=", {t_cmp<5>, 1}},
      {"ge", {t_cmp<5>, 1}},
  };
  return *table;
}

bool t_test(const Value& v, const ArgBinder&) {
  return v.is_string() && is_test(v.str());
}

}  // namespace

bool is_test(std::string_view name) {
  return registry().count(name) > 0;
}

// This engine has every jinja2 test.
bool is_jinja2_test(std::string_view name) {
  return is_test(name);
}

bool call_test(Interp&, std::string_view name, const Value& v, const CallArgs& args) {
  auto it = registry().find(name);
  if (it == registry().end()) lr::fail("unknown test '{}'", name);
  const std::string what = fmt::format("test '{}'", name);
  static constexpr const char* kOne[] = {"other"};
  const ArgBinder b =
      it->second.nargs == 0 ? ArgBinder(what, args, {}) : ArgBinder(what, args, {kOne[0]});
  if (it->second.nargs == 1 && !b.has(0))
    lr::fail("{} missing 1 required positional argument", what);
  return it->second.fn(v, b);
}

}  // namespace lr::jinja
