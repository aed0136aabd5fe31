// The template engine's value: a Python object as jinja2 sees one.
//
// Scalars (None, bool, int, float, str) are held by value; containers by
// shared pointer, as Python holds them by reference. Lists and dicts are
// never mutated once built (the immutable sandbox forbids it); namespaces are
// the one mutable object. Iterators (what map/select/reverse return) are
// consumed by iterating them, as Python generators are.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace lr::jinja {

class Dict;
class Object;
class Interp;
class Value;

enum class Kind : uint8_t {
  Undefined,  // jinja2's default Undefined; carries the message using it raises
  None,
  Bool,
  Int,
  Float,
  String,  // also markupsafe.Markup (the `safe` / `escape` filters), flagged
  List,
  Tuple,
  Iterator,  // a one-shot iterable: generator, list_reverseiterator
  View,      // dict_items / dict_keys / dict_values
  Dict,
  Namespace,  // jinja2's namespace(): a mutable attribute bag
  Object,     // macros, bound methods, builtins, the loop variable
};

// The items of a List, Tuple, Iterator or View.
struct Seq {
  std::vector<Value> items;
  size_t pos = 0;                // Iterator: items before pos are consumed
  const char* type = "list";     // the Python type name ("generator", "dict_items", ...)
  int depth = 1;                 // nesting depth of containers inside (bounded)
  int64_t range[3] = {0, 0, 1};  // type "range" (a List): start, stop, step, for its repr
  // Iterator: what stopped the generator after `items` (raised when it gets there).
  std::string error;
};

class Value {
 public:
  Value() = default;  // Undefined, no message
  static Value undefined(std::string message);
  static Value none();
  Value(bool b) : kind_(Kind::Bool), i_(b) {}  // NOLINT: implicit, as Python literals
  Value(int64_t i) : kind_(Kind::Int), i_(i) {}
  Value(int i) : kind_(Kind::Int), i_(i) {}
  Value(double f) : kind_(Kind::Float), f_(f) {}
  Value(std::string s);
  Value(std::string_view s) : Value(std::string(s)) {}
  Value(const char* s) : Value(std::string(s)) {}
  static Value markup(std::string s);
  static Value list(std::vector<Value> items);
  static Value tuple(std::vector<Value> items);
  static Value iterator(std::vector<Value> items, const char* type = "generator");
  static Value view(std::vector<Value> items, const char* type);
  static Value dict(std::shared_ptr<Dict> d);
  static Value dict(Dict d);
  static Value ns(std::shared_ptr<Dict> attributes);
  static Value object(std::shared_ptr<Object> o);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_markup() const { return kind_ == Kind::String && markup_; }
  bool is_int() const { return kind_ == Kind::Int || kind_ == Kind::Bool; }  // bool is an int
  bool is_number() const { return is_int() || kind_ == Kind::Float; }
  bool is_seq() const { return kind_ == Kind::List || kind_ == Kind::Tuple; }
  bool is_dict() const { return kind_ == Kind::Dict; }

  bool boolean() const { return i_ != 0; }
  int64_t integer() const { return i_; }                                    // Int, Bool
  double number() const { return kind_ == Kind::Float ? f_ : double(i_); }  // any number
  const std::string& str() const;  // String; Undefined: its message
  Seq& seq() const;                // List, Tuple, Iterator, View
  const std::vector<Value>& items() const { return seq().items; }
  Dict& dict() const;  // Dict, Namespace
  Object& object() const;
  const void* identity() const { return p_.get(); }
  int depth() const;  // nesting depth (0 for scalars)

  bool truthy() const;

 private:
  Kind kind_ = Kind::Undefined;
  bool markup_ = false;
  union {
    int64_t i_ = 0;
    double f_;
  };
  std::shared_ptr<void> p_;
};

// A dict keeping insertion order, keyed by hashable values (Python's rules:
// 1, 1.0 and True are one key).
class Dict {
 public:
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  const Value* find(const std::string& key) const { return find(std::string_view(key)); }
  const Value* find(const char* key) const { return find(std::string_view(key)); }
  void set(const Value& key, Value value);
  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  const std::vector<std::pair<Value, Value>>& entries() const { return entries_; }
  void clear();
  int depth = 1;

 private:
  std::vector<std::pair<Value, Value>> entries_;
  std::unordered_map<std::string, size_t> index_;
};

struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};

// Anything callable or with attributes of its own.
class Object {
 public:
  virtual ~Object() = default;
  virtual std::string type_name() const = 0;
  virtual std::string repr() const;  // default: refuses (Python would print an address)
  virtual Value attr(const std::string& name) const;  // Undefined when none
  virtual bool callable() const { return false; }
  virtual Value call(Interp& in, CallArgs args);
};

// Bounds on one render, so that no template can run away (thread-local: the
// render in progress sets them).
struct Limits {
  size_t max_string = size_t{64} << 20;  // bytes in any one string, the output included
  size_t max_items = size_t{1} << 22;    // items in any one list
  uint64_t max_steps = 10'000'000;       // statements, iterations, items, string bytes / 16
  uint64_t steps = 0;
};
Limits& limits();
void check_size(size_t bytes);  // fails when a string of `bytes` would break the limit
void check_items(size_t n);
void tick(uint64_t n = 1);
// Work on long strings counts too: a step per KiB processed.
inline void tick_bytes(size_t bytes) {
  if (bytes >= 1024) tick(bytes >> 10);
}
// Character by character work: a step per 16 bytes.
inline void tick_chars(size_t bytes) {
  tick(bytes >> 4);
}
// Searching for a needle: up to haystack x needle compares.
inline void tick_search(size_t haystack, size_t needle) {
  tick((haystack >> 4) * (1 + (needle >> 8)));
}
constexpr int kMaxValueDepth = 200;  // containers nested deeper than this are refused
void check_depth(int depth);         // fails past kMaxValueDepth

std::string hash_key(const Value& v);   // throws for unhashable values
std::string type_name(const Value& v);  // Python's type(v).__name__
std::string type_repr(const Value& v);  // jinja2's object_type_repr: "dict object", "None"

std::string to_str(const Value& v);  // Python str(v)
void append_str(std::string& out, const Value& v);
std::string repr(const Value& v);  // Python repr(v)
std::string str_repr(std::string_view s);
std::string float_repr(double f);
std::string html_escape(std::string_view s);  // markupsafe.escape

bool equal(const Value& a, const Value& b);
// Python's a < b etc.: <0, 0 or >0; throws for values Python cannot order.
int compare(const Value& a, const Value& b, std::string_view op);

Value from_json(const nlohmann::ordered_json& j);

// The items of an iterable (consuming an Iterator); throws for non-iterables.
std::vector<Value> iterate(const Value& v);

}  // namespace lr::jinja
