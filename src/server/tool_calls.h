// Tool calls in a model's output: each model family writes its calls as text
// in its own syntax (Hermes' <tool_call>{...}</tool_call>, Llama 3's bare
// {"name", "parameters"}, Mistral's [TOOL_CALLS]...), which the server turns
// into OpenAI's message.tool_calls / delta.tool_calls. No HTTP, no engine:
// text in, content and calls out, so every syntax is unit tested against the
// real chat templates' renders (tests/fixtures/tools).
//
// One state machine does both the whole-text parse and the streamed one
// (parse_tool_calls feeds it the text in one piece), so the two agree by
// construction; the tests check that the split points do not matter.
//
// Streaming: a call is announced (CallStart) as soon as its header is
// decided - the name, and the first byte of an arguments object - and its
// arguments then stream as they arrive, with the whitespace outside strings
// dropped (so the concatenated fragments are compact JSON). Where the syntax
// gives the name only after the arguments, carries an id after them, or
// writes the arguments as a JSON string, the call is held until it is
// complete and then sent as one fragment: the JSON-array syntaxes (Mistral
// Nemo's [TOOL_CALLS][...], Granite, functools, Apriel), Generic, and any
// Hermes call whose keys come in another order.
//
// Failures: text that is not a well-formed call stays content (the markup
// included), decided before anything of the call was sent. A call already
// announced cannot be taken back: if its arguments are cut off (max_tokens)
// or turn out malformed, it stays a call with complete = false and the
// arguments sent so far (not valid JSON), as OpenAI returns a call cut off
// by finish_reason "length"; the rest of its markup is dropped.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace lr::server::tools {

enum class ToolFormat {
  // llama-server's generic JSON, the whole output: {"tool_call": {"name", "arguments"}},
  // {"tool_calls": [...]} or {"response": "..."}.
  Generic,
  // <tool_call>{"name", "arguments"}</tool_call>: Qwen2.5/3, QwQ, Hermes 2/3, Granite 4, MiMo.
  Hermes,
  // {"name", "parameters"} starting the output or a line, or after <|python_tag|>;
  // several split by ';' or newlines: Llama 3.1/3.2/3.3.
  Llama3,
  // [TOOL_CALLS][{"name", "arguments", "id"}, ...] (Nemo) and
  // [TOOL_CALLS]name[CALL_ID]id[ARGS]{...} / [TOOL_CALLS]name[ARGS]{...} (Small 3.2, Devstral).
  Mistral,
  Granite,    // Granite 3.x: <|tool_call|>[{"name", "arguments"}, ...]
  FuncTools,  // firefunction v2: functools[{"name", "arguments"}, ...]
  Apriel,     // Apriel 1.5/1.6: <tool_calls>[{"name", "arguments"}, ...]</tool_calls>
};
std::string_view format_name(ToolFormat f);  // "generic", "hermes", "llama3", ...

// The syntax a model writes its calls in, from its Jinja chat template's source
// (the markers the template renders or describes); Generic when none matches.
ToolFormat detect_tool_format(std::string_view chat_template_source);

// Call ids: "call_" and 24 random alphanumerics, from a seeded generator so
// tests are deterministic (the server seeds it from std::random_device).
class IdSource {
 public:
  explicit IdSource(uint64_t seed) : rng_(seed) {}
  std::string next();

 private:
  std::mt19937_64 rng_;
};

struct ToolCall {
  std::string id, name;
  std::string arguments;  // compact JSON text of an object
  bool complete = true;   // false: cut off or malformed after it was announced
};
struct ParsedOutput {
  std::string content;  // the text that is not a call, trimmed at both ends
  std::vector<ToolCall> calls;
};

// The whole generated text at once.
ParsedOutput parse_tool_calls(ToolFormat format, std::string_view text, IdSource& ids);

struct ToolEvent {
  enum class Kind { Content, CallStart, Arguments };
  Kind kind = Kind::Content;
  std::string text;      // Content: text; Arguments: a fragment of call `index`'s arguments
  int index = -1;        // CallStart, Arguments: the call's index in the output
  std::string id, name;  // CallStart
};

// The generated text piece by piece (any byte split, even inside a marker or a
// UTF-8 character). Text that could still become call markup is held back
// until decided, so no byte of a call's markup ever reaches Content; Content
// and Arguments end on UTF-8 character boundaries except at finish().
class ToolStreamParser {
 public:
  ToolStreamParser(ToolFormat format, IdSource& ids);
  ~ToolStreamParser();
  ToolStreamParser(ToolStreamParser&&) noexcept;
  ToolStreamParser& operator=(ToolStreamParser&&) noexcept;

  std::vector<ToolEvent> feed(std::string_view piece);
  std::vector<ToolEvent> finish();  // the end of the output: whatever was held
  // Everything so far (after finish(): the same as parse_tool_calls).
  const ParsedOutput& result() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lr::server::tools
