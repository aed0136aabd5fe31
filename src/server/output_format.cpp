#include "server/output_format.h"

#include <fmt/format.h>

#include "core/error.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "server/openai.h"

namespace lr::server {

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw ApiError(400, message, param);
}

}  // namespace

std::shared_ptr<const grammar::Grammar> compile_grammar(const std::string& gbnf,
                                                        const std::string& param) {
  std::shared_ptr<const grammar::Grammar> g;
  try {
    g = grammar::Grammar::parse_shared(gbnf);
    grammar::Matcher m(g);  // a start state past the limits is refused here, not in a step
    if (m.dead() && !m.can_end()) bad(param, fmt::format("'{}' matches no text at all", param));
  } catch (const Error& e) {
    bad(param, fmt::format("'{}': {}", param, e.what()));
  }
  return g;
}

std::string schema_gbnf(const nlohmann::ordered_json& schema, const std::string& param) {
  if (!schema.is_object() && !schema.is_boolean())
    bad(param, fmt::format("'{}' must be a JSON schema (an object)", param));
  try {
    return grammar::schema_to_gbnf(schema);
  } catch (const Error& e) {
    bad(param, fmt::format("'{}': {}", param, e.what()));
  }
}

std::shared_ptr<const grammar::Grammar> output_grammar(const nlohmann::ordered_json& body) {
  int given = 0;
  std::shared_ptr<const grammar::Grammar> g;
  if (body.contains("grammar") && !body["grammar"].is_null()) {
    if (!body["grammar"].is_string()) bad("grammar", "'grammar' must be a string (GBNF)");
    g = compile_grammar(body["grammar"].get<std::string>(), "grammar");
    ++given;
  }
  if (body.contains("json_schema") && !body["json_schema"].is_null()) {  // llama-server's field
    g = compile_grammar(schema_gbnf(body["json_schema"], "json_schema"), "json_schema");
    ++given;
  }
  if (body.contains("response_format") && !body["response_format"].is_null()) {
    const auto& rf = body["response_format"];
    if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string())
      bad("response_format", "'response_format' must be an object with a string 'type'");
    const std::string type = rf["type"].get<std::string>();
    if (type == "json_object") {
      g = rf.contains("schema") && !rf["schema"].is_null()  // llama-server's form
              ? compile_grammar(schema_gbnf(rf["schema"], "response_format.schema"),
                                "response_format.schema")
              : compile_grammar(grammar::json_object_gbnf(), "response_format");
      ++given;
    } else if (type == "json_schema") {
      if (!rf.contains("json_schema") || !rf["json_schema"].is_object())
        bad("response_format.json_schema",
            "'response_format.json_schema' must be an object with 'name' and 'schema'");
      const auto& js = rf["json_schema"];
      if (js.contains("strict") && !js["strict"].is_null() && !js["strict"].is_boolean())
        bad("response_format.json_schema.strict", "'strict' must be true or false");
      if (!js.contains("schema") || js["schema"].is_null())
        bad("response_format.json_schema.schema",
            "'response_format.json_schema.schema' is required");
      g = compile_grammar(schema_gbnf(js["schema"], "response_format.json_schema.schema"),
                          "response_format.json_schema.schema");
      ++given;
    } else if (type != "text") {
      bad("response_format.type",
          fmt::format("'response_format.type' is '{}'; expected text, json_object or json_schema",
                      type));
    }
  }
  if (given > 1)
    bad("response_format",
        "give one of 'response_format', 'json_schema' and 'grammar', not several");
  return g;
}

}  // namespace lr::server
