// Tools in a chat request (OpenAI's function calling): the tool definitions
// and tool_choice, the conversation as the model's chat template reads it
// (assistant tool calls with their arguments as objects, tool results), and,
// for tool_choice "required" or a named function, the grammar that makes the
// answer a well-formed call in the model's own syntax with arguments valid
// under the function's schema.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "server/tool_calls.h"

namespace lr::server {

enum class ToolChoice { Auto, None, Required, Named };

struct ToolRequest {
  nlohmann::ordered_json tools;  // OpenAI's [{"type": "function", "function": {...}}]; null: none
  ToolChoice choice = ToolChoice::Auto;
  std::string name;  // ToolChoice::Named: the function
  bool parallel = true;
  // Whether the answer is parsed for calls (tools given, tool_choice not none).
  bool active() const { return !tools.is_null() && choice != ToolChoice::None; }
};

// tools, tool_choice and parallel_tool_calls of a request body; throws
// ApiError 400 naming the field (a tool without a name, a named choice that
// is not among the tools, ...).
ToolRequest parse_tools(const nlohmann::ordered_json& body);

// body["messages"] as the template reads them: roles system (developer),
// user, assistant (content or tool_calls, their arguments parsed into
// objects as transformers' templates expect) and tool (content and
// tool_call_id); text parts joined. Throws ApiError 400 naming the message.
nlohmann::ordered_json template_messages(const nlohmann::ordered_json& body);

// The GBNF of an answer that is a call (or, with parallel, one or more) in
// `format`, to one of the tools (or the named one), its arguments valid
// under the function's parameters schema. Throws ApiError 400 for a schema
// the grammar compiler refuses.
std::string tool_call_gbnf(tools::ToolFormat format, const ToolRequest& r);

}  // namespace lr::server
