#include "server/chat_tools.h"

#include <fmt/format.h>

#include "server/openai.h"
#include "server/output_format.h"

namespace lr::server {

namespace {

using ojson = nlohmann::ordered_json;

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw ApiError(400, message, param);
}

std::string text_of(const ojson& c, const std::string& param) {
  if (c.is_string()) return c.get<std::string>();
  if (c.is_array()) {
    std::string out;
    for (const ojson& part : c) {
      if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
          !part["text"].is_string())
        bad(param,
            fmt::format("'{}' parts must be {{\"type\": \"text\", \"text\": string}}", param));
      out += part["text"].get<std::string>();
    }
    return out;
  }
  bad(param, fmt::format("'{}' must be a string or an array of text parts", param));
}

// An assistant message's tool_calls, arguments as objects where they parse.
ojson calls_of(const ojson& calls, const std::string& at) {
  if (!calls.is_array()) bad(at, fmt::format("'{}' must be an array", at));
  ojson out = ojson::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    const std::string here = fmt::format("{}[{}]", at, i);
    const ojson& c = calls[i];
    if (!c.is_object() || !c.contains("function") || !c["function"].is_object() ||
        !c["function"].contains("name") || !c["function"]["name"].is_string())
      bad(here, fmt::format("'{}' must be {{\"type\": \"function\", \"id\", \"function\": "
                            "{{\"name\", \"arguments\"}}}}",
                            here));
    ojson f = c["function"];
    if (f.contains("arguments") && f["arguments"].is_string()) {
      ojson parsed = ojson::parse(f["arguments"].get<std::string>(), nullptr, false);
      if (!parsed.is_discarded() && parsed.is_object()) f["arguments"] = std::move(parsed);
    }
    ojson call = {{"type", "function"}, {"function", f}};
    if (c.contains("id") && c["id"].is_string()) call["id"] = c["id"];
    out.push_back(std::move(call));
  }
  return out;
}

}  // namespace

ojson template_messages(const ojson& body) {
  if (!body.contains("messages")) bad("messages", "'messages' is required");
  const ojson& m = body["messages"];
  if (!m.is_array()) bad("messages", "'messages' must be an array");
  if (m.empty()) bad("messages", "'messages' must not be empty");
  ojson out = ojson::array();
  for (size_t i = 0; i < m.size(); ++i) {
    const std::string at = fmt::format("messages[{}]", i);
    if (!m[i].is_object()) bad(at, fmt::format("'{}' must be an object", at));
    if (!m[i].contains("role") || !m[i]["role"].is_string())
      bad(at + ".role", fmt::format("'{}.role' must be a string", at));
    std::string role = m[i]["role"].get<std::string>();
    if (role == "developer") role = "system";  // OpenAI's newer name for it
    if (role != "system" && role != "user" && role != "assistant" && role != "tool")
      bad(at + ".role", fmt::format("'{}.role' is '{}'; expected system, developer, user, "
                                    "assistant or tool",
                                    at, role));
    ojson msg = {{"role", role}};
    const bool calls =
        role == "assistant" && m[i].contains("tool_calls") && !m[i]["tool_calls"].is_null();
    const bool has_content = m[i].contains("content") && !m[i]["content"].is_null();
    if (!has_content && !calls) bad(at + ".content", fmt::format("'{}.content' is required", at));
    msg["content"] =
        has_content ? ojson(text_of(m[i]["content"], at + ".content")) : ojson(nullptr);
    if (calls) msg["tool_calls"] = calls_of(m[i]["tool_calls"], at + ".tool_calls");
    if (role == "tool") {
      if (!m[i].contains("tool_call_id") || !m[i]["tool_call_id"].is_string())
        bad(at + ".tool_call_id", fmt::format("'{}.tool_call_id' must be a string", at));
      msg["tool_call_id"] = m[i]["tool_call_id"];
    }
    if (m[i].contains("name") && m[i]["name"].is_string()) msg["name"] = m[i]["name"];
    out.push_back(std::move(msg));
  }
  return out;
}

ToolRequest parse_tools(const ojson& body) {
  ToolRequest r;
  if (body.contains("tools") && !body["tools"].is_null()) {
    const ojson& t = body["tools"];
    if (!t.is_array()) bad("tools", "'tools' must be an array");
    if (t.size() > 128) bad("tools", "'tools' takes at most 128 functions");
    for (size_t i = 0; i < t.size(); ++i) {
      const std::string at = fmt::format("tools[{}]", i);
      if (!t[i].is_object() || t[i].value("type", "function") != "function" ||
          !t[i].contains("function") || !t[i]["function"].is_object())
        bad(at, fmt::format("'{}' must be {{\"type\": \"function\", \"function\": {{...}}}}", at));
      const ojson& f = t[i]["function"];
      if (!f.contains("name") || !f["name"].is_string() || f["name"].get<std::string>().empty())
        bad(at + ".function.name",
            fmt::format("'{}.function.name' must be a non-empty string", at));
      if (f.contains("parameters") && !f["parameters"].is_null() && !f["parameters"].is_object())
        bad(at + ".function.parameters",
            fmt::format("'{}.function.parameters' must be a JSON schema object", at));
    }
    if (!t.empty()) r.tools = t;
  }
  if (body.contains("tool_choice") && !body["tool_choice"].is_null()) {
    const ojson& c = body["tool_choice"];
    if (c.is_string()) {
      const std::string s = c.get<std::string>();
      if (s == "auto")
        r.choice = ToolChoice::Auto;
      else if (s == "none")
        r.choice = ToolChoice::None;
      else if (s == "required")
        r.choice = ToolChoice::Required;
      else
        bad("tool_choice", fmt::format("'tool_choice' is '{}'; expected auto, none, required "
                                       "or {{\"type\": \"function\", \"function\": {{\"name\"}}}}",
                                       s));
    } else if (c.is_object() && c.contains("function") && c["function"].is_object() &&
               c["function"].contains("name") && c["function"]["name"].is_string()) {
      r.choice = ToolChoice::Named;
      r.name = c["function"]["name"].get<std::string>();
    } else {
      bad("tool_choice",
          "'tool_choice' must be auto, none, required or {\"type\": \"function\", "
          "\"function\": {\"name\": ...}}");
    }
  }
  if (body.contains("parallel_tool_calls") && !body["parallel_tool_calls"].is_null()) {
    if (!body["parallel_tool_calls"].is_boolean())
      bad("parallel_tool_calls", "'parallel_tool_calls' must be true or false");
    r.parallel = body["parallel_tool_calls"].get<bool>();
  }
  if ((r.choice == ToolChoice::Required || r.choice == ToolChoice::Named) && r.tools.is_null())
    bad("tool_choice", "'tool_choice' asks for a tool call, but 'tools' is empty");
  if (r.choice == ToolChoice::Named) {
    bool found = false;
    for (const ojson& t : r.tools) found |= t["function"]["name"] == r.name;
    if (!found)
      bad("tool_choice", fmt::format("'tool_choice' names '{}', which is not in 'tools'", r.name));
  }
  return r;
}

std::string tool_call_gbnf(tools::ToolFormat format, const ToolRequest& r) {
  using tools::ToolFormat;
  // One call's JSON: {"name": <a tool's name>, "arguments" (Llama 3: "parameters"): <its schema>}.
  const char* args = format == ToolFormat::Llama3 ? "parameters" : "arguments";
  ojson any = ojson::array();
  for (const ojson& t : r.tools) {
    const ojson& f = t["function"];
    if (r.choice == ToolChoice::Named && f["name"] != r.name) continue;
    ojson params = f.contains("parameters") && f["parameters"].is_object()
                       ? f["parameters"]
                       : ojson{{"type", "object"}};
    any.push_back({{"type", "object"},
                   {"properties", {{"name", {{"const", f["name"]}}}, {args, params}}},
                   {"required", {"name", args}},
                   {"additionalProperties", false}});
  }
  const ojson call = any.size() == 1 ? any[0] : ojson{{"anyOf", any}};
  std::string g = schema_gbnf(call, "tools");
  // The schema's root becomes one rule of the call's syntax.
  const size_t at = g.rfind("root ::=", 0) == 0 ? 0 : g.find("\nroot ::=");
  if (at == std::string::npos) bad("tools", "the tools' schemas gave no grammar");
  g.replace(at == 0 ? 0 : at + 1, 4, "tool-call");
  const std::string more = r.parallel ? "*" : "";
  switch (format) {
    case ToolFormat::Hermes:
      return g +
             "\nroot ::= \"<tool_call>\\n\" tool-call \"\\n</tool_call>\" (\"\\n<tool_call>\\n\" "
             "tool-call \"\\n</tool_call>\")" +
             more + "\n";
    case ToolFormat::Llama3:
      return g + "\nroot ::= tool-call (\"; \" tool-call)" + more + "\n";
    case ToolFormat::Mistral:
      return g + "\nroot ::= \"[TOOL_CALLS][\" tool-call (\", \" tool-call)" + more + " \"]\"\n";
    case ToolFormat::Granite:
      return g + "\nroot ::= \"<|tool_call|>[\" tool-call (\", \" tool-call)" + more + " \"]\"\n";
    case ToolFormat::FuncTools:
      return g + "\nroot ::= \"functools[\" tool-call (\", \" tool-call)" + more + " \"]\"\n";
    case ToolFormat::Apriel:
      return g + "\nroot ::= \"<tool_calls>[\" tool-call (\", \" tool-call)" + more +
             " \"]</tool_calls>\"\n";
    case ToolFormat::Generic:
      break;
  }
  return g + "\nroot ::= \"{\\\"tool_call\\\": \" tool-call \"}\"\n";
}

}  // namespace lr::server
