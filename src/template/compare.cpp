// Python's == and < on template values.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "template/builtins.h"
#include "template/value.h"

namespace lr::jinja {

namespace {

// Exact int == float, as Python compares them.
bool int_float_eq(int64_t i, double f) {
  if (!std::isfinite(f) || std::floor(f) != f) return false;
  if (f < -9.223372036854775808e18 || f >= 9.223372036854775808e18) return false;
  return static_cast<int64_t>(f) == i;
}

int int_float_cmp(int64_t i, double f) {
  if (std::isnan(f)) return 2;  // unordered: every comparison false
  if (int_float_eq(i, f)) return 0;
  const long double li = static_cast<long double>(i);
  const long double lf = static_cast<long double>(f);
  return li < lf ? -1 : 1;
}

bool equal_at(const Value& a, const Value& b, int depth) {
  check_depth(depth);
  if (a.is_number() && b.is_number()) {
    if (a.is_int() && b.is_int()) return a.integer() == b.integer();
    if (a.is_int()) return int_float_eq(a.integer(), b.number());
    if (b.is_int()) return int_float_eq(b.integer(), a.number());
    return a.number() == b.number();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::Undefined:
    case Kind::None:
      return true;
    case Kind::String:
      tick_bytes(std::min(a.str().size(), b.str().size()));
      return a.str() == b.str();
    case Kind::List:
    case Kind::Tuple: {
      if (a.identity() == b.identity()) return true;
      const auto &x = a.items(), &y = b.items();
      if (x.size() != y.size()) return false;
      tick(x.size());
      for (size_t k = 0; k < x.size(); ++k)
        if (!equal_at(x[k], y[k], depth + 1)) return false;
      return true;
    }
    case Kind::Dict: {
      if (a.identity() == b.identity()) return true;
      const Dict &x = a.dict(), &y = b.dict();
      if (x.size() != y.size()) return false;
      tick(x.size());
      for (const auto& [k, v] : x.entries()) {
        const Value* w = y.find(k);
        if (!w || !equal_at(v, *w, depth + 1)) return false;
      }
      return true;
    }
    default:
      return a.identity() == b.identity();
  }
}

int compare_at(const Value& a, const Value& b, std::string_view op, int depth) {
  check_depth(depth);
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_int() && b.is_int()) return a.integer() < b.integer() ? -1 : a.integer() > b.integer();
    if (a.is_int()) return int_float_cmp(a.integer(), b.number());
    if (b.is_int()) {
      const int c = int_float_cmp(b.integer(), a.number());
      return c == 2 ? 2 : -c;
    }
    const double x = a.number(), y = b.number();
    if (std::isnan(x) || std::isnan(y)) return 2;
    return x < y ? -1 : x > y;
  }
  if (a.is_string() && b.is_string()) {
    tick_bytes(std::min(a.str().size(), b.str().size()));
    const int c = a.str().compare(b.str());
    return c < 0 ? -1 : c > 0;
  }
  if (a.is_seq() && a.kind() == b.kind()) {
    const auto &x = a.items(), &y = b.items();
    for (size_t k = 0; k < x.size() && k < y.size(); ++k) {
      if (equal_at(x[k], y[k], depth + 1)) continue;
      return compare_at(x[k], y[k], op, depth + 1);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size();
  }
  lr::fail("'{}' not supported between instances of '{}' and '{}'", op, type_name(a), type_name(b));
}

}  // namespace

bool equal(const Value& a, const Value& b) {
  return equal_at(a, b, 0);
}

int compare(const Value& a, const Value& b, std::string_view op) {
  return compare_at(a, b, op, 0);
}

}  // namespace lr::jinja
