// The OpenAI request parser (server/openai.h): defaults, the forms a field
// may take, and refusals naming the field.
#include <gtest/gtest.h>

#include "server/openai.h"

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
  EXPECT_EQ(r.messages[0].role, "user");
}

TEST(OpenAi, FieldsInTheirForms) {
  const auto r = parse_completion_request(
      Api::Chat,
      R"({"messages": [{"role": "developer", "content": [{"type": "text", "text": "be "}, {"type": "text", "text": "brief"}]},
                       {"role": "user", "content": "hi"}],
          "max_completion_tokens": 7, "stop": "END", "seed": -3, "stream": true,
          "stream_options": {"include_usage": true}, "logprobs": true, "top_logprobs": 3, "temperature": 0})");
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[0].content, "be brief");
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
       "'messages[0].role' is 'bot'; expected system, developer, user or assistant"},
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

}  // namespace
}  // namespace lr::server
