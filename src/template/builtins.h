// What the evaluator calls into: jinja2's filters, tests and globals, Python's
// operators and attribute access, the str/dict/list methods, json.dumps.
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "template/value.h"

namespace lr::jinja {

// Binds a call's arguments to a Python-style signature: positionals in order,
// then keywords by name. `what` names the callee in messages ("filter 'join'").
class ArgBinder {
 public:
  ArgBinder(std::string what, const CallArgs& args, std::initializer_list<const char*> names,
            bool extra_positional = false);
  bool has(size_t k) const { return given_[k]; }
  const Value& get(size_t k) const;  // Undefined when not given
  Value get(size_t k, Value def) const { return given_[k] ? values_[k] : def; }
  int64_t get_int(size_t k, int64_t def) const;
  std::string get_str(size_t k, std::string def) const;
  bool get_bool(size_t k, bool def) const { return given_[k] ? values_[k].truthy() : def; }
  const std::vector<Value>& extra() const { return extra_; }  // positionals past the names
  const std::string& what() const { return what_; }

 private:
  std::string what_;
  std::vector<const char*> names_;
  std::vector<Value> values_;
  std::vector<bool> given_;
  std::vector<Value> extra_;
};

// ---- filters (filters.cpp) and tests (jinja_tests.cpp) ----
bool is_filter(std::string_view name);         // implemented here
bool is_jinja2_filter(std::string_view name);  // one of jinja2's (implemented or not)
Value call_filter(Interp& in, std::string_view name, const Value& input, const CallArgs& args);
bool is_test(std::string_view name);
bool is_jinja2_test(std::string_view name);
bool call_test(Interp& in, std::string_view name, const Value& v, const CallArgs& args);

// ---- operators and access (ops.cpp) ----
Value binary_op(std::string_view op, const Value& a, const Value& b);
Value negate(const Value& v, bool minus);
bool contains(const Value& container, const Value& item);  // Python `item in container`
bool compare_op(std::string_view op, const Value& a, const Value& b);
Value get_attr(const Value& obj, const std::string& name);  // jinja2's sandboxed getattr
Value get_item(const Value& obj, const Value& key);         // jinja2's sandboxed getitem
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
int64_t to_index(const Value& v, std::string_view what);  // an int (bools count), or fails
[[noreturn]] void fail_undefined(const Value& undefined);
// Fails (with the undefined's own message) when v is Undefined.
inline const Value& defined(const Value& v) {
  if (v.is_undefined()) fail_undefined(v);
  return v;
}

// ---- methods (methods.cpp) ----
// The bound method obj.name, or nullopt when Python's type has no such method.
std::optional<Value> bound_method(const Value& obj, const std::string& name);
// The strip/split helpers shared with the filters.
std::string py_strip(std::string_view s, const Value& chars, bool left, bool right);
std::vector<Value> py_split(const Value& s, const Value& sep, int64_t maxsplit, bool from_right);
std::vector<std::string> py_splitlines(std::string_view s, bool keepends);
std::string py_replace(std::string_view s, std::string_view old, std::string_view repl,
                       int64_t count);

// ---- string formatting (format.cpp) ----
std::string str_format(const Value& fmt, const CallArgs& args);   // str.format
std::string percent_format(const Value& fmt, const Value& args);  // str % args

// ---- globals (globals.cpp) ----
Value global(std::string_view name);  // Undefined when jinja2 has no such global
// Clears every namespace created by this thread's render (breaks reference cycles).
void clear_namespaces();

// ---- json (json_dump.cpp) ----
struct JsonOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};
std::string to_json(const Value& v, const JsonOptions& options);

}  // namespace lr::jinja
