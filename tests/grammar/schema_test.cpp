// JSON Schema -> GBNF against Python's jsonschema (Draft 2020-12): every
// text it calls valid is a sentence of the schema's grammar, every other one
// is not (tests/fixtures/grammar/schemas.json).
#include <gtest/gtest.h>

#include "core/error.h"
#include "fixture_util.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"

namespace lr::grammar {
namespace {

bool sentence(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  Matcher m(g);
  return m.accept_bytes(text) && m.can_end();
}

TEST(JsonSchema, AgreesWithJsonschema) {
  auto all = nlohmann::ordered_json::parse(test::read_fixture("schemas.json"));
  ASSERT_GE(all.size(), 25u);
  size_t valid = 0, invalid = 0;
  for (const auto& s : all) {
    std::string gbnf = schema_to_gbnf(s["schema"]);
    auto g = Grammar::parse_shared(gbnf);
    for (const auto& c : s["cases"]) {
      std::string text = c["text"];
      bool want = c["valid"];
      EXPECT_EQ(sentence(g, text), want) << s["name"] << ": " << text << "\n" << gbnf;
      (want ? valid : invalid)++;
    }
  }
  EXPECT_GT(valid, 200u);
  EXPECT_GT(invalid, 500u);
}

TEST(JsonSchema, JsonObject) {
  auto g = Grammar::parse_shared(json_object_gbnf());
  EXPECT_TRUE(sentence(g, R"({"a": [1, {"b": null}], "c": "\u00e9"})"));
  EXPECT_TRUE(sentence(g, "{}"));
  EXPECT_FALSE(sentence(g, "[]"));
  EXPECT_FALSE(sentence(g, " {}"));
  EXPECT_FALSE(sentence(g, R"({"a" 1})"));
}

std::string error_of(const std::string& schema) {
  try {
    schema_to_gbnf(std::string_view(schema));
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(JsonSchema, RefusesWhatItCannotExpress) {
  EXPECT_NE(
      error_of(R"({"type": "integer", "multipleOf": 2})").find("unsupported keyword 'multipleOf'"),
      std::string::npos);
  EXPECT_NE(
      error_of(R"({"type": "integer", "minimum": 1.5, "exclusiveMaximum": 2})")
          .find("unsatisfiable schema: no integer satisfies 'minimum' and 'exclusiveMaximum'"),
      std::string::npos);
  EXPECT_NE(error_of(R"({"type": "number", "exclusiveMinimum": 1, "maximum": 1})")
                .find("unsatisfiable schema"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type": "number", "exclusiveMinimum": true})")
                .find("'exclusiveMinimum' must be a number"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"allOf": [{}]})").find("unsupported keyword 'allOf'"), std::string::npos);
  EXPECT_NE(error_of(R"({"type": "object", "patternProperties": {}})").find("'patternProperties'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type": "array", "uniqueItems": true})").find("'uniqueItems'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type": "string", "format": "email"})").find("'format' value 'email'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type": "string", "pattern": "^(?=a)b$"})").find("lookaround"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type": "string", "pattern": "^(a)\\1$"})").find("back-references"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"$ref": "https://x/y"})").find("$ref 'https://x/y' is not supported"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"$ref": "#/$defs/none"})").find("points to nothing"), std::string::npos);
  EXPECT_NE(error_of(R"({"type": "array", "maxItems": 100000})").find("repetition limit"),
            std::string::npos);
  EXPECT_NE(error_of("false").find("admits no value"), std::string::npos);
  EXPECT_NE(error_of("{").find("not valid JSON"), std::string::npos);
  EXPECT_NE(
      error_of(R"({"type": "object", "properties": {"a": {"type": "string", "format": "x"}}})")
          .find("at #/properties/a"),
      std::string::npos);
}

TEST(JsonSchema, SelfReferenceIsLeftRecursion) {
  // {"$ref": "#"} means "any value that is itself": no character is ever
  // matched first, so the grammar parser refuses it instead of hanging.
  std::string gbnf = schema_to_gbnf(std::string_view(R"({"$ref": "#"})"));
  try {
    Grammar::parse(gbnf);
    FAIL() << "expected a left-recursion error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("left recursion"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lr::grammar
