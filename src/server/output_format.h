// What a request asks of an answer's form: OpenAI's response_format
// (json_object, json_schema), llama-server's json_schema and grammar
// fields, as the grammar the answer must be a sentence of; and the messages
// as the chat template reads them (tool calls and tool results included).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>

#include "grammar/grammar.h"

namespace lr::server {

// The grammar of a request body's response_format {"type": "text" |
// "json_object" | "json_schema", ...}, or of its llama-server fields
// "json_schema" (a schema) and "grammar" (GBNF); null for free text. Throws
// ApiError 400 naming the field and what is wrong: an unsupported keyword, a
// limit, an unsatisfiable schema, a malformed grammar.
std::shared_ptr<const grammar::Grammar> output_grammar(const nlohmann::ordered_json& body);

// The grammar of a JSON schema (compiled and checked), for tool arguments
// and response_format alike; `param` names the field in errors.
std::string schema_gbnf(const nlohmann::ordered_json& schema, const std::string& param);
std::shared_ptr<const grammar::Grammar> compile_grammar(const std::string& gbnf,
                                                        const std::string& param);

}  // namespace lr::server
