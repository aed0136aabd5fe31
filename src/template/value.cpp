#include "template/value.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "template/unicode.h"

namespace lr::jinja {

namespace {

thread_local Limits tl_limits;

int child_depth(const std::vector<Value>& items) {
  int d = 0;
  for (const Value& v : items) d = std::max(d, v.depth());
  if (d + 1 > kMaxValueDepth) lr::fail("value nested more than {} levels deep", kMaxValueDepth);
  return d + 1;
}

std::shared_ptr<Seq> make_seq(std::vector<Value> items, const char* type) {
  check_items(items.size());
  auto s = std::make_shared<Seq>();
  s->depth = child_depth(items);
  s->items = std::move(items);
  s->type = type;
  return s;
}

}  // namespace

void check_depth(int depth) {
  if (depth > kMaxValueDepth) lr::fail("value nested more than {} levels deep", kMaxValueDepth);
}

// ---- Value ----

Value Value::undefined(std::string message) {
  Value v;
  v.p_ = std::make_shared<std::string>(std::move(message));
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::None;
  return v;
}

Value::Value(std::string s) : kind_(Kind::String) {
  check_size(s.size());
  tick(s.size() >> 4);  // building strings is work: a step per 16 bytes
  p_ = std::make_shared<std::string>(std::move(s));
}

Value Value::markup(std::string s) {
  Value v(std::move(s));
  v.markup_ = true;
  return v;
}

Value Value::list(std::vector<Value> items) {
  Value v;
  v.kind_ = Kind::List;
  v.p_ = make_seq(std::move(items), "list");
  return v;
}

Value Value::tuple(std::vector<Value> items) {
  Value v;
  v.kind_ = Kind::Tuple;
  v.p_ = make_seq(std::move(items), "tuple");
  return v;
}

Value Value::iterator(std::vector<Value> items, const char* type) {
  Value v;
  v.kind_ = Kind::Iterator;
  v.p_ = make_seq(std::move(items), type);
  return v;
}

Value Value::view(std::vector<Value> items, const char* type) {
  Value v;
  v.kind_ = Kind::View;
  v.p_ = make_seq(std::move(items), type);
  return v;
}

Value Value::dict(std::shared_ptr<Dict> d) {
  LR_ASSERT(d != nullptr);
  Value v;
  v.kind_ = Kind::Dict;
  v.p_ = std::move(d);
  return v;
}

Value Value::dict(Dict d) {
  return dict(std::make_shared<Dict>(std::move(d)));
}

Value Value::ns(std::shared_ptr<Dict> attributes) {
  LR_ASSERT(attributes != nullptr);
  Value v;
  v.kind_ = Kind::Namespace;
  v.p_ = std::move(attributes);
  return v;
}

Value Value::object(std::shared_ptr<Object> o) {
  LR_ASSERT(o != nullptr);
  Value v;
  v.kind_ = Kind::Object;
  v.p_ = std::move(o);
  return v;
}

const std::string& Value::str() const {
  static const std::string empty;
  if (kind_ == Kind::Undefined && !p_) return empty;
  LR_ASSERT(kind_ == Kind::String || kind_ == Kind::Undefined);
  return *static_cast<const std::string*>(p_.get());
}

Seq& Value::seq() const {
  LR_ASSERT(kind_ == Kind::List || kind_ == Kind::Tuple || kind_ == Kind::Iterator ||
            kind_ == Kind::View);
  return *static_cast<Seq*>(p_.get());
}

Dict& Value::dict() const {
  LR_ASSERT(kind_ == Kind::Dict || kind_ == Kind::Namespace);
  return *static_cast<Dict*>(p_.get());
}

Object& Value::object() const {
  LR_ASSERT(kind_ == Kind::Object);
  return *static_cast<Object*>(p_.get());
}

int Value::depth() const {
  switch (kind_) {
    case Kind::List:
    case Kind::Tuple:
    case Kind::Iterator:
    case Kind::View:
      return seq().depth;
    case Kind::Dict:
      return dict().depth;
    case Kind::Namespace:
      return 1;
    default:
      return 0;
  }
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::Undefined:
    case Kind::None:
      return false;
    case Kind::Bool:
    case Kind::Int:
      return i_ != 0;
    case Kind::Float:
      return f_ != 0;
    case Kind::String:
      return !str().empty();
    case Kind::List:
    case Kind::Tuple:
    case Kind::View:
      return !items().empty();
    case Kind::Dict:
      return !dict().empty();
    case Kind::Iterator:  // a generator is true even when empty
    case Kind::Namespace:
    case Kind::Object:
      return true;
  }
  return false;
}

// ---- Dict ----

const Value* Dict::find(const Value& key) const {
  auto it = index_.find(hash_key(key));
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

const Value* Dict::find(std::string_view key) const {
  std::string k = "s";
  k += key;
  auto it = index_.find(k);
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

void Dict::set(const Value& key, Value value) {
  depth = std::max(depth, value.depth() + 1);
  check_depth(depth);
  auto [it, added] = index_.emplace(hash_key(key), entries_.size());
  if (added) {
    check_items(entries_.size() + 1);
    entries_.emplace_back(key, std::move(value));
  } else {
    entries_[it->second].second = std::move(value);
  }
}

void Dict::clear() {
  entries_.clear();
  index_.clear();
}

// ---- Object ----

std::string Object::repr() const {
  lr::fail("cannot print a {} object (Python prints its memory address)", type_name());
}

Value Object::attr(const std::string& name) const {
  return Value::undefined(fmt::format("'{} object' has no attribute '{}'", type_name(), name));
}

Value Object::call(Interp&, CallArgs) {
  lr::fail("'{}' object is not callable", type_name());
}

// ---- limits ----

Limits& limits() {
  return tl_limits;
}

void check_size(size_t bytes) {
  if (bytes > tl_limits.max_string)
    lr::fail("string longer than the limit of {} bytes", tl_limits.max_string);
}

void check_items(size_t n) {
  if (n > tl_limits.max_items) lr::fail("more than the limit of {} items", tl_limits.max_items);
}

void tick(uint64_t n) {
  tl_limits.steps += n;
  if (tl_limits.steps > tl_limits.max_steps)
    lr::fail("render took more than the limit of {} steps", tl_limits.max_steps);
}

// ---- Python semantics ----

std::string hash_key(const Value& v) {
  switch (v.kind()) {
    case Kind::Undefined:
      return "U";
    case Kind::None:
      return "N";
    case Kind::Bool:
    case Kind::Int:
      return std::string(1, 'i').append(std::to_string(v.integer()));
    case Kind::Float: {
      const double f = v.number();
      if (std::isfinite(f) && std::floor(f) == f && std::fabs(f) < 9.2e18)
        return std::string(1, 'i').append(std::to_string(static_cast<int64_t>(f)));
      return std::string(1, 'f').append(float_repr(f));
    }
    case Kind::String:
      tick_bytes(v.str().size());
      return "s" + v.str();
    case Kind::Tuple: {
      std::string k = "t";
      for (const Value& x : v.items()) {
        const std::string h = hash_key(x);
        k += std::to_string(h.size()) + ":" + h;
      }
      return k;
    }
    case Kind::Namespace:
    case Kind::Object:
    case Kind::Iterator:
      return fmt::format("p{}", v.identity());
    default:
      lr::fail("unhashable type: '{}'", type_name(v));
  }
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Kind::Undefined:
      return "Undefined";
    case Kind::None:
      return "NoneType";
    case Kind::Bool:
      return "bool";
    case Kind::Int:
      return "int";
    case Kind::Float:
      return "float";
    case Kind::String:
      return v.is_markup() ? "Markup" : "str";
    case Kind::List:
    case Kind::Tuple:
    case Kind::Iterator:
    case Kind::View:
      return v.seq().type;
    case Kind::Dict:
      return "dict";
    case Kind::Namespace:
      return "Namespace";
    case Kind::Object:
      return v.object().type_name();
  }
  return "object";
}

std::string type_repr(const Value& v) {
  if (v.is_none()) return "None";
  return type_name(v) + " object";
}

namespace {

Value from_json_at(const nlohmann::ordered_json& j, int depth) {
  check_depth(depth);
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::none();
    case nlohmann::ordered_json::value_t::boolean:
      return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        lr::fail("integer {} in the context is out of the 64-bit range", u);
      return Value(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& x : j) items.push_back(from_json_at(x, depth + 1));
      return Value::list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      auto d = std::make_shared<Dict>();
      for (const auto& [k, x] : j.items()) d->set(Value(k), from_json_at(x, depth + 1));
      return Value::dict(std::move(d));
    }
    default:
      lr::fail("unsupported JSON value in the context (binary data)");
  }
}

}  // namespace

Value from_json(const nlohmann::ordered_json& j) {
  return from_json_at(j, 0);
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case Kind::Undefined:
      return {};
    case Kind::List:
    case Kind::Tuple:
    case Kind::View:
      tick(v.items().size());
      return v.items();
    case Kind::Iterator: {
      Seq& s = v.seq();
      std::vector<Value> rest(s.items.begin() + static_cast<std::ptrdiff_t>(s.pos), s.items.end());
      s.pos = s.items.size();
      tick(rest.size());
      if (!s.error.empty()) throw lr::Error(s.error);
      return rest;
    }
    case Kind::String: {
      std::vector<Value> chars;
      const std::string& s = v.str();
      for (size_t i = 0; i < s.size();) {
        std::string c;
        utf8::append(c, utf8::next(s, i));
        chars.emplace_back(std::move(c));  // Markup iterates as plain str too
      }
      tick(chars.size());
      return chars;
    }
    case Kind::Dict: {
      std::vector<Value> keys;
      for (const auto& kv : v.dict().entries()) keys.push_back(kv.first);
      tick(keys.size());
      return keys;
    }
    default:
      lr::fail("'{}' object is not iterable", type_name(v));
  }
}

}  // namespace lr::jinja