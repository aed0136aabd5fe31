// JSON Schema -> GBNF, for OpenAI's response_format json_schema, and the
// fixed grammar of response_format json_object.
//
// Conventions of the generated grammar (as llama.cpp's converter):
//  * whitespace: none before the value; after every token, optionally one
//    space, or one or two newlines and up to 20 spaces/tabs;
//  * object properties in schema order (pass an ordered_json or the text to
//    keep it; a plain nlohmann::json sorts keys); any listed property may be
//    omitted unless required; additional properties (allowed unless
//    additionalProperties is false, as the spec says) come after them;
//  * strings are written with JSON escapes or raw UTF-8; for pattern and
//    format strings only the raw/short-escape form json.dumps(...,
//    ensure_ascii=False) writes;
//  * oneOf is matched as anyOf (exclusivity is not checked); a missing type
//    is inferred from the keywords present (properties -> object, ...).
// Supported: type (and type arrays), properties, required,
// additionalProperties, items, prefixItems, minItems, maxItems, enum, const,
// minLength, maxLength, pattern (regex subset: literals, classes, ., \d \w \s,
// * + ? {m,n}, groups, |), format date / time / date-time / uuid, anyOf,
// oneOf, $ref to #, #/$defs/... or #/definitions/... (recursion included),
// minimum, maximum, exclusiveMinimum, exclusiveMaximum (schema_numeric.cpp).
// Numeric bounds are exact on the decimal value of the text, for integer and
// number, integral or fractional bounds alike; -0 counts as 0. A bounded
// number has no exponent form (as llama.cpp); an integer is written without
// fraction or exponent (bounded or not), though jsonschema also accepts 1.0.
// jsonschema compares doubles: a text with more than ~15 significant digits
// that rounds onto a bound can get its verdict from the rounding, not from its
// decimal value (e.g. 100.00000000000000001 <= 100 there, not here). Bounds
// on an integer round inward (minimum 1.5 -> 2, exclusiveMaximum 5 -> 4); an
// empty range is an "unsatisfiable schema" error naming the keywords.
// Descriptive keywords (title, description, examples, default, $schema,
// $id, $comment, deprecated, readOnly, writeOnly) are ignored. Every other
// keyword changes the language and is refused with an lr::Error naming it.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace lr::grammar {

// Limits on a schema, each refused with an lr::Error naming it (the
// grammar's own limits, grammar.h, bound the rest).
inline constexpr int kMaxSchemaDepth = 256;
inline constexpr size_t kMaxEnumValues = 4096;

std::string schema_to_gbnf(const nlohmann::ordered_json& schema);
std::string schema_to_gbnf(const nlohmann::json& schema);
std::string schema_to_gbnf(std::string_view schema_text);  // keeps property order
// Any JSON object (response_format json_object), same whitespace convention.
std::string json_object_gbnf();

// A regex (JSON Schema pattern) as a GBNF expression over the JSON-escaped
// string contents. Unanchored ends match any prefix/suffix, as the spec's
// search semantics. Refuses what is outside the subset (schema_regex.cpp).
std::string pattern_to_gbnf(std::string_view pattern);

// Escapes text as the body of a GBNF string literal.
std::string gbnf_literal(std::string_view text);

}  // namespace lr::grammar
