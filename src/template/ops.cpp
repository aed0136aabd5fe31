// Python's operators and jinja2's (sandboxed) attribute and item access.
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "core/error.h"
#include "template/builtins.h"
#include "template/unicode.h"

namespace lr::jinja {

namespace {

[[noreturn]] void unsupported(std::string_view op, const Value& a, const Value& b) {
  lr::fail("unsupported operand type(s) for {}: '{}' and '{}'", op, type_name(a), type_name(b));
}

[[noreturn]] void overflow() {
  lr::fail("integer overflow (Python integers are unbounded; this engine's are 64-bit)");
}
int64_t add_i(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) overflow();
  return r;
}
int64_t sub_i(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) overflow();
  return r;
}
int64_t mul_i(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) overflow();
  return r;
}

// Python's float divmod (Objects/floatobject.c), for // and %.
void float_divmod(double a, double b, double& div, double& mod) {
  if (b == 0) lr::fail("float division by zero");
  mod = std::fmod(a, b);
  double d = (a - mod) / b;
  if (mod != 0) {
    if ((b < 0) != (mod < 0)) {
      mod += b;
      d -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, b);
  }
  if (d != 0) {
    div = std::floor(d);
    if (d - div > 0.5) div += 1.0;
  } else {
    div = std::copysign(0.0, a / b);
  }
}

Value repeat(const Value& seq, int64_t n) {
  if (n < 0) n = 0;
  if (seq.is_string()) {
    const std::string& s = seq.str();
    if (!s.empty() && static_cast<uint64_t>(n) > limits().max_string / s.size())
      check_size(limits().max_string + 1);
    std::string out;
    out.reserve(s.size() * static_cast<size_t>(n));
    for (int64_t k = 0; k < n; ++k) out += s;
    return seq.is_markup() ? Value::markup(std::move(out)) : Value(std::move(out));
  }
  const std::vector<Value>& items = seq.items();
  if (!items.empty() && static_cast<uint64_t>(n) > limits().max_items / items.size())
    check_items(limits().max_items + 1);
  std::vector<Value> out;
  for (int64_t k = 0; k < n; ++k) out.insert(out.end(), items.begin(), items.end());
  tick(out.size());
  return seq.kind() == Kind::List ? Value::list(std::move(out)) : Value::tuple(std::move(out));
}

Value int_pow(int64_t base, int64_t exp) {
  int64_t result = 1;
  while (exp > 0) {
    if (exp & 1) result = mul_i(result, base);
    exp >>= 1;
    if (exp > 0) base = mul_i(base, base);
  }
  return Value(result);
}

Value add(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_int() && b.is_int()) return Value(add_i(a.integer(), b.integer()));
    return Value(a.number() + b.number());
  }
  if (a.is_string() && b.is_string()) {
    check_size(a.str().size() + b.str().size());
    if (a.is_markup() || b.is_markup()) {  // Markup + str escapes the str
      const std::string x = a.is_markup() ? a.str() : html_escape(a.str());
      const std::string y = b.is_markup() ? b.str() : html_escape(b.str());
      return Value::markup(x + y);
    }
    return Value(a.str() + b.str());
  }
  if (a.is_seq() && a.kind() == b.kind()) {
    std::vector<Value> items = a.items();
    items.insert(items.end(), b.items().begin(), b.items().end());
    tick(items.size());
    return a.kind() == Kind::List ? Value::list(std::move(items)) : Value::tuple(std::move(items));
  }
  if (a.is_string() || a.is_seq())
    lr::fail("can only concatenate {} (not \"{}\") to {}", type_name(a), type_name(b),
             type_name(a));
  unsupported("+", a, b);
}

Value arith(std::string_view op, const Value& a, const Value& b) {
  if (!a.is_number() || !b.is_number()) unsupported(op, a, b);
  const bool ints = a.is_int() && b.is_int();
  const int64_t x = a.integer(), y = b.integer();
  const double fx = a.number(), fy = b.number();
  if (op == "-") {
    if (ints) return Value(sub_i(x, y));
    return Value(fx - fy);
  }
  if (op == "*") {
    if (ints) return Value(mul_i(x, y));
    return Value(fx * fy);
  }
  if (op == "/") {
    if (fy == 0) lr::fail("division by zero");
    return Value(fx / fy);
  }
  if (op == "//" || op == "%") {
    if (ints) {
      if (y == 0) lr::fail("integer division or modulo by zero");
      if (x == std::numeric_limits<int64_t>::min() && y == -1) overflow();
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) --q, m += y;
      return Value(op == "//" ? q : m);
    }
    double div, mod;
    float_divmod(fx, fy, div, mod);
    return Value(op == "//" ? div : mod);
  }
  if (op == "**") {
    if (ints && y >= 0) return int_pow(x, y);
    if (fx == 0 && fy < 0) lr::fail("0.0 cannot be raised to a negative power");
    if (fx < 0 && std::floor(fy) != fy) lr::fail("negative number to a fractional power");
    return Value(std::pow(fx, fy));
  }
  LR_ASSERT(false && "unknown binary operator");
  return Value();
}

// Python's slice.indices + the walk.
std::vector<int64_t> slice_positions(int64_t len, const Value& start, const Value& stop,
                                     const Value& step) {
  const int64_t st = step.is_none() ? 1 : step.integer();
  if (st == 0) lr::fail("slice step cannot be zero");
  const int64_t lower = st > 0 ? 0 : -1, upper = st > 0 ? len : len - 1;
  auto clamp = [&](const Value& v, int64_t def) {
    if (v.is_none()) return def;
    int64_t i = v.integer();
    if (i < 0) {
      i += len;
      if (i < lower) i = lower;
    } else if (i > upper) {
      i = upper;
    }
    return i;
  };
  const int64_t b = clamp(start, st > 0 ? lower : upper);
  const int64_t e = clamp(stop, st > 0 ? upper : lower);
  std::vector<int64_t> pos;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) pos.push_back(i);
  tick(pos.size());
  return pos;
}

Value missing(const Value& obj, const Value& key) {
  if (key.is_string())
    return Value::undefined(fmt::format("'{}' has no attribute '{}'", type_repr(obj), key.str()));
  return Value::undefined(fmt::format("'{}' has no element {}", type_repr(obj), repr(key)));
}

}  // namespace

void fail_undefined(const Value& undefined) {
  lr::fail("{}", undefined.str().empty() ? "undefined value" : undefined.str());
}

int64_t to_index(const Value& v, std::string_view what) {
  if (!v.is_int()) lr::fail("{} must be an integer, not '{}'", what, type_name(v));
  return v.integer();
}

Value binary_op(std::string_view op, const Value& a, const Value& b) {
  if (op == "~") {
    std::string s = to_str(a);
    append_str(s, b);
    return Value(std::move(s));
  }
  defined(a);
  if (op == "%" && a.is_string()) {  // str % x never touches x's arithmetic
    std::string s = percent_format(a, b);
    return a.is_markup() ? Value::markup(std::move(s)) : Value(std::move(s));
  }
  defined(b);
  if (op == "+") return add(a, b);
  if (op == "*") {
    if ((a.is_string() || a.is_seq()) && b.is_int()) return repeat(a, b.integer());
    if ((b.is_string() || b.is_seq()) && a.is_int()) return repeat(b, a.integer());
  }
  return arith(op, a, b);
}

Value negate(const Value& v, bool minus) {
  defined(v);
  if (v.kind() == Kind::Float) return Value(minus ? -v.number() : v.number());
  if (!v.is_int()) lr::fail("bad operand type for unary {}: '{}'", minus ? '-' : '+', type_name(v));
  if (!minus) return Value(v.integer());
  return Value(sub_i(0, v.integer()));
}

bool contains(const Value& c, const Value& item) {
  switch (c.kind()) {
    case Kind::Undefined:
      return false;
    case Kind::String:
      if (!item.is_string())
        lr::fail("'in <string>' requires string as left operand, not {}", type_name(item));
      tick_search(c.str().size(), item.str().size());
      return c.str().find(item.str()) != std::string::npos;
    case Kind::List:
    case Kind::Tuple:
    case Kind::View:
      tick(c.items().size());
      for (const Value& x : c.items())
        if (equal(x, item)) return true;
      return false;
    case Kind::Iterator: {
      Seq& s = c.seq();
      while (s.pos < s.items.size()) {
        tick();
        if (equal(s.items[s.pos++], item)) return true;
      }
      if (!s.error.empty()) throw lr::Error(s.error);
      return false;
    }
    case Kind::Dict:
      return c.dict().find(item) != nullptr;
    default:
      lr::fail("argument of type '{}' is not iterable", type_name(c));
  }
}

bool compare_op(std::string_view op, const Value& a, const Value& b) {
  if (op == "==") return equal(a, b);
  if (op == "!=") return !equal(a, b);
  if (op == "in") return contains(b, a);
  if (op == "notin") return !contains(b, a);
  const int c = compare(a, b, op);
  if (c == 2) return false;  // NaN: unordered
  if (op == "<") return c < 0;
  if (op == "<=") return c <= 0;
  if (op == ">") return c > 0;
  if (op == ">=") return c >= 0;
  LR_ASSERT(false && "unknown comparison");
  return false;
}

Value get_attr(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Kind::Undefined:
      fail_undefined(obj);
    case Kind::Namespace:
      if (const Value* v = obj.dict().find(name)) return *v;
      return Value::undefined(fmt::format("'Namespace object' has no attribute '{}'", name));
    case Kind::Object:
      return obj.object().attr(name);
    default:
      break;
  }
  if (name.empty() || name[0] != '_') {
    if (auto m = bound_method(obj, name)) return *m;
  }
  if (obj.is_number()) {  // Python's numbers have these; this engine does not
    static const char* const kNumberAttrs[] = {
        "real",      "imag",     "numerator",  "denominator",      "conjugate", "bit_length",
        "bit_count", "to_bytes", "is_integer", "as_integer_ratio", "hex",       "fromhex"};
    for (const char* a : kNumberAttrs)
      if (name == a) lr::fail("unsupported attribute '{}' of {}", name, type_name(obj));
  }
  if (obj.is_dict()) {
    if (const Value* v = obj.dict().find(name)) return *v;
  }
  return missing(obj, Value(name));
}

Value get_item(const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case Kind::Undefined:
      fail_undefined(obj);
    case Kind::Dict: {
      if (key.kind() != Kind::List && key.kind() != Kind::Dict && key.kind() != Kind::View)
        if (const Value* v = obj.dict().find(key)) return *v;
      break;
    }
    case Kind::List:
    case Kind::Tuple:
      if (key.is_int()) {
        const auto n = static_cast<int64_t>(obj.items().size());
        int64_t i = key.integer();
        if (i < 0) i += n;
        if (i >= 0 && i < n) return obj.items()[static_cast<size_t>(i)];
      }
      break;
    case Kind::String:
      if (key.is_int()) {
        const std::string& str = obj.str();
        const bool ascii = utf8::is_ascii(str);
        const std::u32string s = ascii ? std::u32string() : utf8::decode(str);
        const auto n = static_cast<int64_t>(ascii ? str.size() : s.size());
        int64_t i = key.integer();
        if (i < 0) i += n;
        if (i >= 0 && i < n) {
          std::string c;
          if (ascii) {
            c = str[static_cast<size_t>(i)];
          } else {
            utf8::append(c, s[static_cast<size_t>(i)]);
          }
          return obj.is_markup() ? Value::markup(std::move(c)) : Value(std::move(c));
        }
      }
      break;
    default:
      break;
  }
  if (key.is_string()) {  // jinja2 falls back to the attribute
    if (obj.kind() == Kind::Namespace || obj.kind() == Kind::Object)
      return get_attr(obj, key.str());
    if (key.str().empty() || key.str()[0] != '_')
      if (auto m = bound_method(obj, key.str())) return *m;
  }
  return missing(obj, key);
}

// jinja2 compiles slices to Python's obj[a:b:c] directly (no getitem fallback):
// what Python cannot slice raises.
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  defined(obj);
  const bool sliceable = obj.is_string() || obj.is_seq();
  if (obj.is_dict()) lr::fail("unhashable type: 'slice'");
  if (!sliceable) lr::fail("'{}' object is not subscriptable", type_name(obj));
  for (const Value* v : {&start, &stop, &step}) {
    defined(*v);
    if (!v->is_none() && !v->is_int())
      lr::fail("slice indices must be integers or None or have an __index__ method");
  }
  if (obj.is_string()) {
    const std::u32string s = utf8::decode(obj.str());
    std::u32string out;
    for (int64_t i : slice_positions(static_cast<int64_t>(s.size()), start, stop, step))
      out += s[static_cast<size_t>(i)];
    std::string r = utf8::encode(out);
    return obj.is_markup() ? Value::markup(std::move(r)) : Value(std::move(r));
  }
  const std::vector<Value>& items = obj.items();
  std::vector<Value> out;
  for (int64_t i : slice_positions(static_cast<int64_t>(items.size()), start, stop, step))
    out.push_back(items[static_cast<size_t>(i)]);
  return obj.kind() == Kind::List ? Value::list(std::move(out)) : Value::tuple(std::move(out));
}

}  // namespace lr::jinja
