// The filter table, split between filters.cpp (text and numbers, the
// registry) and filters_seq.cpp (sequences). Internal to the template engine.
#pragma once

#include <string_view>
#include <vector>

#include "template/value.h"

namespace lr::jinja {

using FilterFn = Value (*)(Interp& in, const Value& v, const CallArgs& a);

struct FilterDef {
  std::string_view name;
  FilterFn fn;
};

const std::vector<FilterDef>& sequence_filters();

// jinja2's make_attrgetter: "a.b.0" looked up item by item; lowercased when
// ignore_case; `def` replaces an undefined result when given.
Value get_path(const Value& item, const Value& attribute, bool ignore_case,
               const Value* def = nullptr);

}  // namespace lr::jinja
