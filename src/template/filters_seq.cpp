// jinja2's filters on sequences and mappings.
#include <fmt/format.h>

#include <algorithm>
#include <unordered_set>

#include "core/error.h"
#include "template/builtins.h"
#include "template/filters.h"
#include "template/unicode.h"

namespace lr::jinja {

namespace {

std::string name_of(const char* f) {
  return fmt::format("filter '{}'", f);
}

// A generator filter: jinja2 runs its body only as the result is iterated, so
// an error it meets is raised then (and not at all if nothing iterates it).
template <typename F>
Value generator(F&& body) {
  std::vector<Value> out;
  try {
    body(out);
  } catch (const lr::Error& e) {
    Value v = Value::iterator(std::move(out));
    v.seq().error = e.what();
    return v;
  }
  return Value::iterator(std::move(out));
}

Value lower_if_string(const Value& v) {
  return v.is_string() ? Value(utf8::lower(v.str())) : v;
}

// jinja2's make_multi_attrgetter: "a,b.c" -> [item.a, item.b.c].
Value multi_key(const Value& item, const Value& attribute, bool ignore_case) {
  std::vector<Value> keys;
  if (attribute.is_string()) {
    for (const Value& part : py_split(attribute, Value(","), -1, false))
      keys.push_back(get_path(item, part, ignore_case));
  } else {
    keys.push_back(get_path(item, attribute, ignore_case));
  }
  return Value::list(std::move(keys));
}

// Python's sorted(items, key=..., reverse=...): stable both ways.
void stable_sort(std::vector<Value>& items, const std::vector<Value>& keys, bool reverse) {
  std::vector<size_t> order(items.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  tick(items.size() * 4);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return reverse ? compare(keys[b], keys[a], "<") < 0 : compare(keys[a], keys[b], "<") < 0;
  });
  std::vector<Value> sorted;
  sorted.reserve(items.size());
  for (size_t k : order) sorted.push_back(std::move(items[k]));
  items = std::move(sorted);
}

Value f_batch(Interp&, const Value& v, const CallArgs& a) {
  ArgBinder b(name_of("batch"), a, {"linecount", "fill_with"});
  const int64_t n = b.get_int(0, 0);
  if (n <= 0) lr::fail("batch: linecount must be positive");
  const Value fill = b.get(1, Value::none());
  return generator([&](std::vector<Value>& out) {
    std::vector<Value> tmp;
    for (const Value& item : iterate(v)) {
      if (static_cast<int64_t>(tmp.size()) == n)
        out.push_back(Value::list(std::move(tmp))), tmp = {};
      tmp.push_back(item);
    }
    if (!tmp.empty()) {
      if (!fill.is_none())
        while (static_cast<int64_t>(tmp.size()) < n) tmp.push_back(fill);
      out.push_back(Value::list(std::move(tmp)));
    }
  });
}

Value f_slice(Interp&, const Value& v, const CallArgs& a) {
  ArgBinder b(name_of("slice"), a, {"slices", "fill_with"});
  const int64_t slices = b.get_int(0, 0);
  if (slices <= 0 || slices > 1'000'000) lr::fail("slice: slices must be in [1, 1000000]");
  const Value fill = b.get(1, Value::none());
  return generator([&](std::vector<Value>& out) {
    const std::vector<Value> seq = iterate(v);
    const auto length = static_cast<int64_t>(seq.size());
    const int64_t per = length / slices, extra = length % slices;
    int64_t offset = 0;
    for (int64_t k = 0; k < slices; ++k) {
      tick();
      const int64_t start = offset + k * per;
      if (k < extra) ++offset;
      const int64_t end = offset + (k + 1) * per;
      std::vector<Value> tmp(seq.begin() + start, seq.begin() + end);
      if (!fill.is_none() && k >= extra) tmp.push_back(fill);
      out.push_back(Value::list(std::move(tmp)));
    }
  });
}

Value f_dictsort(Interp&, const Value& v, const CallArgs& a) {
  ArgBinder b(name_of("dictsort"), a, {"case_sensitive", "by", "reverse"});
  const bool case_sensitive = b.get_bool(0, false);
  const std::string by = b.get_str(1, "key");
  if (by != "key" && by != "value") lr::fail("You can only sort by either \"key\" or \"value\"");
  if (!v.is_dict()) lr::fail("'{}' object has no attribute 'items'", type_name(v));
  std::vector<Value> items, keys;
  for (const auto& [k, x] : v.dict().entries()) {
    items.push_back(Value::tuple({k, x}));
    const Value& key = by == "key" ? k : x;
    keys.push_back(case_sensitive ? key : lower_if_string(key));
  }
  stable_sort(items, keys, b.get_bool(2, false));
  return Value::list(std::move(items));
}

Value f_first(Interp&, const Value& v, const CallArgs& a) {
  ArgBinder b(name_of("first"), a, {});
  if (v.kind() == Kind::Iterator) {
    Seq& s = v.seq();
    if (s.pos < s.items.size()) return s.items[s.pos++];
    if (!s.error.empty()) throw lr::Error(s.error);
  } else {
    const std::vector<Value> items = iterate(v);
    if (!items.empty()) return items.front();
  }
  return Value::undefined("No first item, sequence was empty.");
}

Value f_last(Interp&, const Value& v, const CallArgs& a) {
  ArgBinder b(name_of("last"), a, {});
  if (v.kind() == Kind::Iterator) lr::fail("'{}' object is not reversible", type_name(v));
  const std::vector<Value> items = iterate(v);
  if (!items.empty()) return items.back();
  return Value::undefined("No last item, sequence was empty.");
}

Value f_items(Interp&, const Value& v, const CallArgs& a) {
  ArgBinder b(name_of("items"), a, {});
  return generator([&](std::vector<Value>& out) {
    if (v.is_undefined()) return;
    if (!v.is_dict()) lr::fail("Can only get item pairs from a mapping.");
    for (const auto& [k, x] : v.dict().entries()) out.push_back(Value::tuple({k, x}));
  });
}

Value f_join(Interp&, const Value& v, const CallArgs& a) {
  ArgBinder b(name_of("join"), a, {"d", "attribute"});
  const std::string sep = to_str(b.get(0, Value("")));
  const Value attribute = b.get(1, Value::none());
  std::string out;
  bool first = true;
  for (const Value& item : iterate(v)) {
    if (!first) out += sep;
    first = false;
    append_str(out, attribute.is_none() ? item : get_path(item, attribute, false));
  }
  return Value(std::move(out));
}

Value f_list(Interp&, const Value& v, const CallArgs& a) {
  ArgBinder b(name_of("list"), a, {});
  return Value::list(iterate(v));
}

Value f_map(Interp& in, const Value& v, const CallArgs& a) {
  return generator([&](std::vector<Value>& out) {
    if (!v.truthy()) return;
    const bool by_attribute =
        a.pos.empty() && std::any_of(a.kw.begin(), a.kw.end(),
                                     [](const auto& kv) { return kv.first == "attribute"; });
    if (by_attribute) {
      ArgBinder b(name_of("map"), a, {"attribute", "default"});
      const Value def = b.get(1, Value::none());
      for (const Value& item : iterate(v))
        out.push_back(get_path(item, b.get(0), false, def.is_none() ? nullptr : &def));
      return;
    }
    if (a.pos.empty()) lr::fail("map requires a filter argument");
    if (!a.pos[0].is_string()) lr::fail("map: the filter name must be a string");
    const std::string filter = a.pos[0].str();
    CallArgs rest;
    rest.pos.assign(a.pos.begin() + 1, a.pos.end());
    rest.kw = a.kw;
    for (const Value& item : iterate(v)) out.push_back(call_filter(in, filter, item, rest));
  });
}

template <bool kMax>
Value f_minmax(Interp&, const Value& v, const CallArgs& a) {
  ArgBinder b(name_of(kMax ? "max" : "min"), a, {"case_sensitive", "attribute"});
  const std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  const bool ignore_case = !b.get_bool(0, false);
  const Value attribute = b.get(1, Value::none());
  size_t best = 0;
  Value best_key = get_path(items[0], attribute, ignore_case);
  for (size_t k = 1; k < items.size(); ++k) {
    Value key = get_path(items[k], attribute, ignore_case);
    const int c = compare(key, best_key, kMax ? ">" : "<");
    if (c != 2 && (kMax ? c > 0 : c < 0)) best = k, best_key = std::move(key);
  }
  return items[best];
}

// select / reject / selectattr / rejectattr.
template <bool kSelect, bool kAttr>
void select_into(Interp& in, const Value& v, const CallArgs& a, std::vector<Value>& out) {
  if (!v.truthy()) return;
  size_t off = 0;
  Value attribute;
  if (kAttr) {
    if (a.pos.empty()) lr::fail("Missing parameter for attribute name");
    attribute = a.pos[0];
    off = 1;
  }
  const bool has_test = a.pos.size() > off;
  std::string test;
  if (has_test) {
    if (!a.pos[off].is_string()) lr::fail("the test name must be a string");
    test = a.pos[off].str();
  }
  CallArgs rest;
  if (has_test) rest.pos.assign(a.pos.begin() + static_cast<std::ptrdiff_t>(off) + 1, a.pos.end());
  rest.kw = a.kw;
  for (const Value& item : iterate(v)) {
    const Value x = kAttr ? get_path(item, attribute, false) : item;
    const bool r = has_test ? call_test(in, test, x, rest) : x.truthy();
    if (r == kSelect) out.push_back(item);
  }
}

template <bool kSelect, bool kAttr>
Value f_select(Interp& in, const Value& v, const CallArgs& a) {
  return generator([&](std::vector<Value>& out) { select_into<kSelect, kAttr>(in, v, a, out); });
}

Value f_reverse(Interp&, const Value& v, const CallArgs& a) {
  ArgBinder b(name_of("reverse"), a, {});
  if (v.is_string()) {
    std::u32string s = utf8::decode(v.str());
    std::reverse(s.begin(), s.end());
    return v.is_markup() ? Value::markup(utf8::encode(s)) : Value(utf8::encode(s));
  }
  const char* type = v.kind() == Kind::List       ? "list_reverseiterator"
                     : v.kind() == Kind::Dict     ? "dict_reversekeyiterator"
                     : v.kind() == Kind::Iterator ? nullptr
                                                  : "reversed";
  if (!v.is_seq() && !v.is_dict() && !v.is_undefined() && v.kind() != Kind::Iterator &&
      v.kind() != Kind::View)
    lr::fail("argument must be iterable");
  std::vector<Value> items = iterate(v);
  std::reverse(items.begin(), items.end());
  if (!type) return Value::list(std::move(items));  // a generator: reversed into a list
  return Value::iterator(std::move(items), type);
}

Value f_sort(Interp&, const Value& v, const CallArgs& a) {
  ArgBinder b(name_of("sort"), a, {"reverse", "case_sensitive", "attribute"});
  std::vector<Value> items = iterate(v);
  const bool ignore_case = !b.get_bool(1, false);
  const Value attribute = b.get(2, Value::none());
  std::vector<Value> keys;
  for (const Value& item : items) keys.push_back(multi_key(item, attribute, ignore_case));
  stable_sort(items, keys, b.get_bool(0, false));
  return Value::list(std::move(items));
}

Value f_sum(Interp&, const Value& v, const CallArgs& a) {
  ArgBinder b(name_of("sum"), a, {"attribute", "start"});
  Value total = b.get(1, Value(0));
  if (total.is_string()) lr::fail("sum() can't sum strings [use ''.join(seq) instead]");
  const Value attribute = b.get(0, Value::none());
  for (const Value& item : iterate(v))
    total = binary_op("+", total, attribute.is_none() ? item : get_path(item, attribute, false));
  return total;
}

Value f_unique(Interp&, const Value& v, const CallArgs& a) {
  ArgBinder b(name_of("unique"), a, {"case_sensitive", "attribute"});
  const bool ignore_case = !b.get_bool(0, false);
  const Value attribute = b.get(1, Value::none());
  return generator([&](std::vector<Value>& out) {
    std::unordered_set<std::string> seen;
    for (const Value& item : iterate(v)) {
      if (seen.insert(hash_key(get_path(item, attribute, ignore_case))).second) out.push_back(item);
    }
  });
}

}  // namespace

Value get_path(const Value& item, const Value& attribute, bool ignore_case, const Value* def) {
  Value x = item;
  if (attribute.is_string()) {
    for (const Value& part : py_split(attribute, Value("."), -1, false)) {
      const std::string& p = part.str();
      const bool digits = !p.empty() && std::all_of(p.begin(), p.end(),
                                                    [](char c) { return c >= '0' && c <= '9'; });
      x = get_item(x, digits && p.size() < 18 ? Value(static_cast<int64_t>(std::stoll(p))) : part);
      if (def && x.is_undefined()) x = *def;
    }
  } else if (!attribute.is_none()) {
    x = get_item(x, attribute);
    if (def && x.is_undefined()) x = *def;
  }
  return ignore_case ? lower_if_string(x) : x;
}

const std::vector<FilterDef>& sequence_filters() {
  static const std::vector<FilterDef> filters = {
      {"batch", f_batch},
      {"dictsort", f_dictsort},
      {"first", f_first},
      {"items", f_items},
      {"join", f_join},
      {"last", f_last},
      {"list", f_list},
      {"map", f_map},
      {"max", f_minmax<true>},
      {"min", f_minmax<false>},
      {"reject", f_select<false, false>},
      {"rejectattr", f_select<false, true>},
      {"reverse", f_reverse},
      {"select", f_select<true, false>},
      {"selectattr", f_select<true, true>},
      {"slice", f_slice},
      {"sort", f_sort},
      {"sum", f_sum},
      {"unique", f_unique},
  };
  return filters;
}

}  // namespace lr::jinja
