// The OpenAI request parser (server/openai.h): defaults, the forms a field
// may take, and refusals naming the field.
#include <gtest/gtest.h>

#include "grammar/matcher.h"
#include "server/openai.h"
#include "server/output_format.h"

namespace lr::server {
namespace {

ApiError refusal(Api api, const std::string& body) {
  try {
    parse_completion_request(api, body);
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted: " << body;
  return ApiError(0, "");
}

TEST(OpenAi, DefaultsAreOpenAis) {
  const auto r =
      parse_completion_request(Api::Chat, R"({"messages": [{"role": "user", "content": "hi"}]})");
  EXPECT_EQ(r.gen.sampling.temperature, 1.f);
  EXPECT_EQ(r.gen.sampling.top_p, 1.f);
  EXPECT_EQ(r.gen.sampling.top_k, 0);
  EXPECT_EQ(r.gen.sampling.min_p, 0.f);
  EXPECT_EQ(r.gen.max_tokens, 0);  // until the context ends
  EXPECT_EQ(r.gen.top_logprobs, -1);
  EXPECT_FALSE(r.stream);
  ASSERT_EQ(r.messages.size(), 1u);
  EXPECT_EQ(r.messages[0]["role"], "user");
}

TEST(OpenAi, FieldsInTheirForms) {
  const auto r = parse_completion_request(
      Api::Chat,
      R"({"messages": [{"role": "developer", "content": [{"type": "text", "text": "be "}, {"type": "text", "text": "brief"}]},
                       {"role": "user", "content": "hi"}],
          "max_completion_tokens": 7, "stop": "END", "seed": -3, "stream": true,
          "stream_options": {"include_usage": true}, "logprobs": true, "top_logprobs": 3, "temperature": 0})");
  EXPECT_EQ(r.messages[0]["role"], "system");
  EXPECT_EQ(r.messages[0]["content"], "be brief");
  EXPECT_EQ(r.gen.max_tokens, 7);
  EXPECT_EQ(r.gen.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(r.gen.sampling.seed, uint64_t(-3));
  EXPECT_TRUE(r.stream && r.include_usage && r.logprobs);
  EXPECT_EQ(r.gen.top_logprobs, 3);
  const auto c =
      parse_completion_request(Api::Completions, R"({"prompt": [5, 6, 7], "logprobs": 0})");
  EXPECT_EQ(c.prompt_ids, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(c.gen.top_logprobs, 0);
  EXPECT_TRUE(c.logprobs);
}

TEST(OpenAi, RefusalsNameTheField) {
  struct Case {
    Api api;
    const char* body;
    const char* param;
    const char* message;
  };
  const Case cases[] = {
      {Api::Chat, "{", "", "invalid JSON body"},
      {Api::Chat, R"({"messages": [], "n": 1e999})", "",
       "invalid JSON body"},  // a number beyond double
      {Api::Chat, "[]", "", "the request body must be a JSON object"},
      {Api::Chat, R"({"messages": []})", "messages", "'messages' must not be empty"},
      {Api::Chat, R"({"messages": [{"role": "bot", "content": "x"}]})", "messages[0].role",
       "'messages[0].role' is 'bot'; expected system, developer, user, assistant or tool"},
      {Api::Chat, R"({"messages": [{"role": "user", "content": "x"}], "top_p": 0})", "top_p",
       "'top_p' must be greater than 0"},
      {Api::Chat,
       R"({"messages": [{"role": "user", "content": "x"}], "stop": ["a", "b", "c", "d", "e"]})",
       "stop", "'stop' takes at most 4 sequences"},
      {Api::Chat,
       R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 18446744073709551615})",
       "max_tokens", "'max_tokens' must be between 1 and 2147483647 (got 9223372036854775807)"},
      {Api::Completions, R"({"prompt": ["a", "b"]})", "prompt",
       "'prompt' must be a string or an array of token ids (one prompt per request)"},
      {Api::Completions, R"({"prompt": "x", "logprobs": true})", "logprobs",
       "'logprobs' must be an integer"},
      {Api::Chat, R"({"messages": [{"role": "user", "content": "x"}], "n": 17})", "n",
       "'n' must be between 1 and 16 (got 17)"},
      {Api::Chat, R"({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"a": 1}})",
       "logit_bias", "'logit_bias' key 'a' is not a token id"},
      {Api::Chat, R"({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"5": 101}})",
       "logit_bias", "'logit_bias' of token 5 must be a number in [-100, 100]"},
      {Api::Chat, R"({"messages": [{"role": "user", "content": "x"}], "user": 5})", "user",
       "'user' must be a string"},
      {Api::Chat,
       R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "string", "uniqueItems": true}}}})",
       "response_format.json_schema.schema", "'response_format.json_schema.schema': "},
      {Api::Chat,
       R"({"messages": [{"role": "user", "content": "x"}], "grammar": "root ::= \"x\"", "response_format": {"type": "json_object"}})",
       "response_format", "give one of 'response_format', 'json_schema' and 'grammar'"},
      {Api::Chat, R"({"messages": [{"role": "tool", "content": "42"}]})",
       "messages[0].tool_call_id", "'messages[0].tool_call_id' must be a string"},
      {Api::Chat, R"({"messages": [{"role": "assistant", "tool_calls": [{"id": "c"}]}]})",
       "messages[0].tool_calls[0]", "'messages[0].tool_calls[0]' must be"},
      {Api::Chat,
       R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {}}]})",
       "tools[0].function.name", "'tools[0].function.name' must be a non-empty string"},
      {Api::Chat, R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"})",
       "tool_choice", "'tool_choice' asks for a tool call, but 'tools' is empty"},
      {Api::Chat,
       R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": {"type": "function", "function": {"name": "g"}}})",
       "tool_choice", "'tool_choice' names 'g', which is not in 'tools'"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.body);
    const ApiError e = refusal(c.api, c.body);
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, c.param);
    EXPECT_EQ(std::string(e.what()).rfind(c.message, 0), 0u) << e.what();
    EXPECT_EQ(error_body(e)["error"]["type"], "invalid_request_error");
  }
}

// The forms of the new fields: n, logit_bias, a schema's grammar, the
// messages of a tool round trip as the template reads them (the call's
// arguments as an object), and tools.
TEST(OpenAi, StructuredOutputsToolsAndChoices) {
  const auto r = parse_completion_request(Api::Chat, R"({"messages": [
      {"role": "user", "content": "weather?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "21 C"}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}],
    "tool_choice": "auto", "parallel_tool_calls": false, "n": 3, "logit_bias": {"7": -100, "9": 2.5},
    "response_format": {"type": "json_object"}})");
  EXPECT_EQ(r.n, 3);
  EXPECT_EQ(r.gen.sampling.logit_bias,
            (std::vector<std::pair<int32_t, float>>{{7, -100.f}, {9, 2.5f}}));
  ASSERT_TRUE(r.gen.grammar);
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_TRUE(r.messages[1]["content"].is_null());
  EXPECT_EQ(r.messages[1]["tool_calls"][0]["function"]["arguments"]["city"], "Paris");
  EXPECT_EQ(r.messages[2]["tool_call_id"], "call_1");
  EXPECT_TRUE(r.tools.active());
  EXPECT_FALSE(r.tools.parallel);
  EXPECT_EQ(r.tools.tools[0]["function"]["name"], "get_weather");
}

// The grammar of a required call accepts the calls the parser reads back,
// in each family's syntax, and nothing else.
TEST(OpenAi, ToolCallGrammarPerFormat) {
  const auto r =
      parse_completion_request(Api::Chat, R"({"messages": [{"role": "user", "content": "x"}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
      "properties": {"n": {"type": "integer"}}, "required": ["n"], "additionalProperties": false}}}],
    "tool_choice": "required"})");
  struct Case {
    tools::ToolFormat format;
    const char* call;
  };
  const Case cases[] = {
      {tools::ToolFormat::Hermes, R"(<tool_call>
{"name": "f", "arguments": {"n": 4}}
</tool_call>)"},
      {tools::ToolFormat::Llama3, R"({"name": "f", "parameters": {"n": 4}})"},
      {tools::ToolFormat::Mistral, R"([TOOL_CALLS][{"name": "f", "arguments": {"n": 4}}])"},
      {tools::ToolFormat::Generic, R"({"tool_call": {"name": "f", "arguments": {"n": 4}}})"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.call);
    grammar::Matcher m(compile_grammar(tool_call_gbnf(c.format, r.tools), "tools"));
    EXPECT_TRUE(m.accept_bytes(c.call) && m.can_end());
    tools::IdSource ids(1);
    const tools::ParsedOutput o = tools::parse_tool_calls(c.format, c.call, ids);
    ASSERT_EQ(o.calls.size(), 1u);
    EXPECT_EQ(o.calls[0].name, "f");
    EXPECT_EQ(o.calls[0].arguments, "{\"n\":4}");
    grammar::Matcher wrong(compile_grammar(tool_call_gbnf(c.format, r.tools), "tools"));
    EXPECT_FALSE(
        wrong.accept_bytes(std::string(c.call).replace(std::string(c.call).find("4"), 1, "\"x\"")));
  }
}

// Usage: cached prompt tokens, and with speculative decoding the drafted
// tokens taken and rejected under OpenAI's names for predicted outputs.
TEST(OpenAi, UsageCountsDraftedTokens) {
  Usage u;
  u.prompt_tokens = 12;
  u.completion_tokens = 30;
  u.cached_tokens = 4;
  EXPECT_EQ(
      dump_json(usage_json(u)),
      R"({"completion_tokens":30,"prompt_tokens":12,"prompt_tokens_details":{"cached_tokens":4},"total_tokens":42})");
  u.drafted = 25;
  u.draft_taken = 18;
  const json j = usage_json(u);
  EXPECT_EQ(j["completion_tokens_details"]["accepted_prediction_tokens"], 18);
  EXPECT_EQ(j["completion_tokens_details"]["rejected_prediction_tokens"], 7);
}

}  // namespace
}  // namespace lr::server
