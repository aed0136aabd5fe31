// The OpenAI API's request and response bodies: a request's JSON checked
// and turned into the engine's terms, results and chunks turned into JSON,
// errors as {"error": {"message", "type", "param", "code"}}. No HTTP here
// (server/http_server.cpp), so every rule is unit tested.
#pragma once

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/chat.h"
#include "runtime/engine.h"
#include "server/chat_tools.h"

namespace lr::server {

using nlohmann::json;

// A request refused, with its HTTP status and OpenAI's error fields.
struct ApiError : std::runtime_error {
  int status;
  std::string type, param, code;
  ApiError(int status, const std::string& message, std::string param = "", std::string code = "");
};
// {"error": {"message", "type", "param", "code"}} (param and code null when empty).
json error_body(const ApiError& e);
// The error type OpenAI uses with an HTTP status.
const char* error_type(int status);

enum class Api { Chat, Completions };

// A completion request in the engine's terms.
struct CompletionRequest {
  Api api = Api::Chat;
  nlohmann::ordered_json messages;    // chat: as the template reads them (chat_tools.h)
  ToolRequest tools;                  // chat: tools, tool_choice, parallel_tool_calls
  std::string prompt;                 // completions: the text ...
  std::vector<int32_t> prompt_ids;    // ... or the token ids
  GenParams gen;                      // max_tokens 0: until the context ends
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool logprobs = false;
  bool ignore_eos =
      false;  // llama-server's and vLLM's extension: generate max_tokens whatever the model ends
  int n = 1;  // answers to the prompt (choices), 1..kMaxChoices
};
inline constexpr int kMaxChoices = 16;

// Parses and checks a body of POST /v1/chat/completions or /v1/completions
// (throws ApiError 400 naming the field).
CompletionRequest parse_completion_request(Api api, const std::string& body);
// The JSON of a body, or ApiError 400 ("invalid JSON body: ...").
json parse_json_body(const std::string& body);

// One answer of a response (choices[i]), or what is new of it (a chunk's delta).
struct Choice {
  std::string text;
  std::vector<TokenOut> tokens;  // with logprobs
  Finish finish = Finish::None;
  // Tool calls parsed out of the text (which then holds the rest), or, in a
  // chunk, the tool-call events since the last one.
  std::vector<tools::ToolCall> calls;
  std::vector<tools::ToolEvent> events;
  bool tools = false;  // the request had tools: text and calls are the parse's
};

// Everything a response is built from.
struct Completion {
  Api api = Api::Chat;
  std::string id, model;
  int64_t created = 0;
  std::vector<Choice> choices;
  Usage usage;  // the prompt once, the tokens of every choice
};
// How a token is shown in logprobs: its text, and its bytes.
struct TokenText {
  virtual ~TokenText() = default;
  virtual std::string text(int32_t id) const = 0;
};

// Bodies hold token text as it is; a token may be part of a UTF-8 character,
// so they are written with dump_json (invalid bytes as U+FFFD).
json completion_body(const Completion& c, bool logprobs, const TokenText& tt);
// One streamed chunk of choice `index`: `delta`, its text and tokens since
// the last one; `first` adds the assistant role (chat), delta.finish the finish_reason.
json chunk_body(const Completion& c, int index, const Choice& delta, bool first, bool logprobs,
                const TokenText& tt);
// The usage chunk sent last when stream_options.include_usage is set.
json usage_chunk(const Completion& c);
json usage_json(const Usage& u);
std::string dump_json(const json& j);

}  // namespace lr::server
