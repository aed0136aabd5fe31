// Internal helpers shared by the JSON Schema converter's files.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace lr::grammar {

// GBNF for one character of a JSON string body whose decoded code point is in
// `ranges` (sorted, disjoint): raw where JSON allows, else its escape.
std::string json_chars_gbnf(const std::vector<std::pair<uint32_t, uint32_t>>& ranges);

// Adds a helper rule with the given body, named after `hint`; returns its name.
using AddRule = std::function<std::string(const std::string& hint, std::string body)>;

// Whether s has minimum / maximum / exclusiveMinimum / exclusiveMaximum.
bool has_numeric_bounds(const nlohmann::ordered_json& s);

// A GBNF expression (no trailing whitespace) for exactly the JSON integers
// (integer = true) or numbers whose decimal value satisfies s's bounds;
// numbers without an exponent (schema_numeric.cpp). Throws lr::Error naming
// the keywords when no value does, or for a bound that is not a number.
std::string bounded_numeric_gbnf(const nlohmann::ordered_json& s, bool integer, const AddRule& add,
                                 const std::string& hint, const std::string& path);

// Whether a JSON number satisfies s's bounds (for enum / const).
bool numeric_in_bounds(const nlohmann::ordered_json& s, const nlohmann::ordered_json& value,
                       const std::string& path);

}  // namespace lr::grammar
