// Tool-call parsing (server/tool_calls.h) against what the real chat templates
// render for tool calls (tests/fixtures/tools/golden.json, made by
// scripts/make_tool_fixtures.py with Python's jinja2), whole and streamed at
// every split; plus the edge cases no template renders.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "server/tool_calls.h"

namespace {

using namespace lr::server::tools;
using nlohmann::json;

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

const std::string kFixtures = std::string(LOWRANK_SOURCE_DIR) + "/tests/fixtures/";

// Every event stream must be well formed: calls announced in order, fragments
// only for announced calls, content and fragments on UTF-8 boundaries.
ParsedOutput reassemble(const std::vector<ToolEvent>& events) {
  ParsedOutput out;
  for (const ToolEvent& e : events) {
    switch (e.kind) {
      case ToolEvent::Kind::Content:
        EXPECT_FALSE(e.text.empty());
        out.content += e.text;
        break;
      case ToolEvent::Kind::CallStart:
        EXPECT_EQ(e.index, static_cast<int>(out.calls.size()));
        out.calls.push_back({e.id, e.name, "", true});
        break;
      case ToolEvent::Kind::Arguments:
        EXPECT_FALSE(e.text.empty());
        EXPECT_EQ(e.index + 1, static_cast<int>(out.calls.size()))
            << "a fragment for an earlier call";
        if (e.index >= 0 && e.index < static_cast<int>(out.calls.size()))
          out.calls[e.index].arguments += e.text;
        break;
    }
  }
  return out;
}

// The text fed in the given pieces, the events reassembled.
ParsedOutput stream(ToolFormat f, std::string_view text, const std::vector<size_t>& cuts,
                    uint64_t seed = 7) {
  IdSource ids(seed);
  ToolStreamParser p(f, ids);
  std::vector<ToolEvent> all;
  size_t at = 0;
  for (size_t cut : cuts) {
    auto ev = p.feed(text.substr(at, cut - at));
    all.insert(all.end(), ev.begin(), ev.end());
    at = cut;
  }
  auto ev = p.feed(text.substr(at));
  all.insert(all.end(), ev.begin(), ev.end());
  ev = p.finish();
  all.insert(all.end(), ev.begin(), ev.end());
  ParsedOutput r = reassemble(all);
  for (size_t i = 0; i < r.calls.size() && i < p.result().calls.size(); ++i)
    r.calls[i].complete = p.result().calls[i].complete;
  return r;
}

ParsedOutput whole(ToolFormat f, std::string_view text, uint64_t seed = 7) {
  IdSource ids(seed);
  return parse_tool_calls(f, text, ids);
}

void expect_same(const ParsedOutput& a, const ParsedOutput& b, const std::string& where) {
  EXPECT_EQ(a.content, b.content) << where;
  ASSERT_EQ(a.calls.size(), b.calls.size()) << where;
  for (size_t i = 0; i < a.calls.size(); ++i) {
    EXPECT_EQ(a.calls[i].id, b.calls[i].id) << where;
    EXPECT_EQ(a.calls[i].name, b.calls[i].name) << where;
    EXPECT_EQ(a.calls[i].arguments, b.calls[i].arguments) << where;
    EXPECT_EQ(a.calls[i].complete, b.calls[i].complete) << where;
  }
}

// Streamed at every single split point, and in random 1..3-byte pieces.
void expect_split_invariant(ToolFormat f, const std::string& text, const std::string& where) {
  const ParsedOutput ref = whole(f, text);
  for (size_t cut = 0; cut <= text.size(); ++cut)
    expect_same(stream(f, text, {cut}), ref, where + " cut " + std::to_string(cut));
  std::mt19937 rng(42);
  for (int rep = 0; rep < 8; ++rep) {
    std::vector<size_t> cuts;
    for (size_t at = 0; (at += 1 + rng() % 3) < text.size();) cuts.push_back(at);
    expect_same(stream(f, text, cuts), ref, where + " random pieces " + std::to_string(rep));
  }
}

// No whitespace outside strings (the model's own escapes, as \u00e9, may stay).
bool compact(std::string_view j) {
  bool in_str = false, esc = false;
  for (char c : j) {
    if (esc) {
      esc = false;
    } else if (in_str) {
      esc = c == '\\', in_str = c != '"';
    } else if (c == '"') {
      in_str = true;
    } else if (c == ' ' || c == '\n' || c == '\t' || c == '\r') {
      return false;
    }
  }
  return true;
}

const char* const kMarkup[] = {"<tool_call>",   "</tool_call>",   "[TOOL_CALLS]", "[ARGS]",
                               "[CALL_ID]",     "<|python_tag|>", "functools[",   "<tool_calls>",
                               "</tool_calls>", "<|tool_call|>"};

TEST(ToolCalls, GoldenTemplates) {
  const json golden = json::parse(read_file(kFixtures + "tools/golden.json"));
  ASSERT_GE(golden["cases"].size(), 90u);
  for (const json& c : golden["cases"]) {
    const std::string where = c["template"].get<std::string>() + "/" + c["case"].get<std::string>();
    SCOPED_TRACE(where);
    const std::string tmpl = read_file(kFixtures + "templates/" + c["template"].get<std::string>());
    const ToolFormat f = detect_tool_format(tmpl);
    ASSERT_EQ(format_name(f), c["format"].get<std::string>());
    const std::string text = c["text"];
    const ParsedOutput r = whole(f, text);
    EXPECT_EQ(r.content, c["content"].get<std::string>());
    ASSERT_EQ(r.calls.size(), c["calls"].size());
    for (size_t i = 0; i < r.calls.size(); ++i) {
      const json& want = c["calls"][i];
      EXPECT_TRUE(r.calls[i].complete);
      EXPECT_EQ(r.calls[i].name, want["name"].get<std::string>());
      const json args = json::parse(r.calls[i].arguments, nullptr, false);
      EXPECT_EQ(args, want["arguments"]) << r.calls[i].arguments;
      EXPECT_TRUE(compact(r.calls[i].arguments)) << r.calls[i].arguments;
      if (want.contains("id")) {
        EXPECT_EQ(r.calls[i].id, want["id"].get<std::string>());
      }
    }
    if (!c["calls"].empty()) {
      for (const char* m : kMarkup) EXPECT_EQ(r.content.find(m), std::string::npos) << m;
    }
    expect_split_invariant(f, text, where);
  }
}

TEST(ToolCalls, DetectsEveryTemplate) {
  const json golden = json::parse(read_file(kFixtures + "tools/golden.json"));
  ASSERT_GE(golden["detect"].size(), 70u);
  for (const auto& [file, fmt] : golden["detect"].items())
    EXPECT_EQ(format_name(detect_tool_format(read_file(kFixtures + "templates/" + file))),
              fmt.get<std::string>())
        << file;
}

TEST(ToolCalls, Ids) {
  IdSource a(1), b(1), c(2);
  const std::string id = a.next();
  ASSERT_EQ(id.size(), 29u);
  EXPECT_EQ(id.substr(0, 5), "call_");
  for (char ch : id.substr(5)) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(ch))) << id;
  EXPECT_EQ(id, b.next());
  EXPECT_NE(id, c.next());
  EXPECT_NE(a.next(), id);
}

struct Edge {
  const char* name;
  ToolFormat format;
  std::string text;
  std::string content;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments (exact bytes)
  bool complete = true;
};

const std::vector<Edge>& edges() {
  static const std::vector<Edge> e = {
      {"text_before",
       ToolFormat::Hermes,
       "Sure.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>",
       "Sure.",
       {{"f", "{\"a\":1}"}}},
      {"text_after",
       ToolFormat::Hermes,
       "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>\nDone.  ",
       "Done.",
       {{"f", "{}"}}},
      {"text_between",
       ToolFormat::Hermes,
       "A <tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call> B <tool_call>{\"name\": "
       "\"g\", \"arguments\": {}}</tool_call>",
       "A  B",
       {{"f", "{}"}, {"g", "{}"}}},
      {"bad_json_stays_content",
       ToolFormat::Hermes,
       "<tool_call>{\"name\": f, \"arguments\": {}}</tool_call>",
       "<tool_call>{\"name\": f, \"arguments\": {}}</tool_call>",
       {}},
      {"missing_name_stays_content",
       ToolFormat::Hermes,
       "<tool_call>{\"arguments\": {\"a\": 1}}</tool_call>",
       "<tool_call>{\"arguments\": {\"a\": 1}}</tool_call>",
       {}},
      {"not_json_stays_content",
       ToolFormat::Hermes,
       "x <tool_call><function=f></function></tool_call>",
       "x <tool_call><function=f></function></tool_call>",
       {}},
      {"cut_in_header_stays_content",
       ToolFormat::Hermes,
       "Hi <tool_call>{\"name\": \"f\", \"argu",
       "Hi <tool_call>{\"name\": \"f\", \"argu",
       {}},
      {"cut_in_markup_stays_content", ToolFormat::Hermes, "Hi <tool_ca", "Hi <tool_ca", {}},
      {"cut_in_arguments_incomplete",
       ToolFormat::Hermes,
       "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": [1, 2",
       "",
       {{"f", "{\"a\":[1,2"}},
       false},
      {"bad_arguments_incomplete",
       ToolFormat::Hermes,
       "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": tru}}</tool_call> after",
       "after",
       {{"f", "{\"a\":tru"}},
       false},
      {"string_arguments",
       ToolFormat::Hermes,
       "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1, \\\"b\\\": \\\"x "
       "y\\\"}\"}</tool_call>",
       "",
       {{"f", "{\"a\":1,\"b\":\"x y\"}"}}},
      {"keys_reversed",
       ToolFormat::Hermes,
       "<tool_call>{\"arguments\": {\"a\": 1.50}, \"name\": \"f\"}</tool_call>",
       "",
       {{"f", "{\"a\":1.5}"}}},
      {"no_arguments_key",
       ToolFormat::Hermes,
       "<tool_call>{\"name\": \"f\"}</tool_call>",
       "",
       {{"f", "{}"}}},
      {"no_close_tag",
       ToolFormat::Hermes,
       "<tool_call>{\"name\": \"f\", \"arguments\": {\"s\": \"} \\\" {\"}}",
       "",
       {{"f", "{\"s\":\"} \\\" {\"}"}}},
      {"three_calls",
       ToolFormat::Hermes,
       "<tool_call>{\"name\":\"a\",\"arguments\":{}}</"
       "tool_call><tool_call>{\"name\":\"b\",\"arguments\":{\"x\":[]}}</tool_call>\n"
       "<tool_call>{\"name\":\"c\",\"arguments\":{\"y\":null}}</tool_call>",
       "",
       {{"a", "{}"}, {"b", "{\"x\":[]}"}, {"c", "{\"y\":null}"}}},
      {"extra_keys",
       ToolFormat::Hermes,
       "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}, \"id\": \"z\"}</tool_call>",
       "",
       {{"f", "{\"a\":1}"}}},
      {"llama3_one",
       ToolFormat::Llama3,
       "{\"name\": \"f\", \"parameters\": {\"a\": \"b\"}}",
       "",
       {{"f", "{\"a\":\"b\"}"}}},
      {"llama3_python_tag",
       ToolFormat::Llama3,
       "<|python_tag|>{\"type\": \"function\", \"name\": \"f\", \"parameters\": {}}",
       "",
       {{"f", "{}"}}},
      {"llama3_semicolons",
       ToolFormat::Llama3,
       "{\"name\": \"f\", \"parameters\": {}}; {\"name\": \"g\", \"parameters\": {\"x\": "
       "1}}\n{\"name\": \"h\", \"parameters\": {}}",
       "",
       {{"f", "{}"}, {"g", "{\"x\":1}"}, {"h", "{}"}}},
      {"llama3_after_text_line",
       ToolFormat::Llama3,
       "Calling it:\n{\"name\": \"f\", \"parameters\": {}}",
       "Calling it:",
       {{"f", "{}"}}},
      {"llama3_inline_json_is_content",
       ToolFormat::Llama3,
       "Use {\"name\": \"f\", \"parameters\": {}} like so; ok",
       "Use {\"name\": \"f\", \"parameters\": {}} like so; ok",
       {}},
      {"llama3_other_json_is_content",
       ToolFormat::Llama3,
       "{\"answer\": 42}",
       "{\"answer\": 42}",
       {}},
      {"llama3_builtin_is_content",
       ToolFormat::Llama3,
       "<|python_tag|>brave_search.call(query=\"x\")",
       "<|python_tag|>brave_search.call(query=\"x\")",
       {}},
      {"mistral_v11_ids",
       ToolFormat::Mistral,
       "[TOOL_CALLS]f[CALL_ID]abc123XYZ[ARGS]{\"a\": 1}[TOOL_CALLS]g.h[ARGS]{}",
       "",
       {{"f", "{\"a\":1}"}, {"g.h", "{}"}}},
      {"mistral_array",
       ToolFormat::Mistral,
       "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {\"a\": 1}}, {\"name\": \"g\", "
       "\"arguments\": \"{}\"}]",
       "",
       {{"f", "{\"a\":1}"}, {"g", "{}"}}},
      {"mistral_bad_array_is_content",
       ToolFormat::Mistral,
       "[TOOL_CALLS][{\"name\": \"f\"}, 3]",
       "[TOOL_CALLS][{\"name\": \"f\"}, 3]",
       {}},
      {"mistral_no_args_is_content",
       ToolFormat::Mistral,
       "[TOOL_CALLS]f then text",
       "[TOOL_CALLS]f then text",
       {}},
      {"granite",
       ToolFormat::Granite,
       "<|tool_call|>[{\"name\": \"f\", \"arguments\": {\"q\": \"\\u00e9\"}}]",
       "",
       {{"f", "{\"q\":\"\xC3\xA9\"}"}}},
      {"functools",
       ToolFormat::FuncTools,
       "Sure. functools[{\"name\": \"f\", \"arguments\": {}}]",
       "Sure.",
       {{"f", "{}"}}},
      {"apriel_object_is_content",
       ToolFormat::Apriel,
       "<tool_calls>{\"a\": 1}",
       "<tool_calls>{\"a\": 1}",
       {}},
      {"apriel",
       ToolFormat::Apriel,
       "<tool_calls>[{\"name\": \"f\", \"arguments\": {}}]</tool_calls>",
       "",
       {{"f", "{}"}}},
      {"generic_call",
       ToolFormat::Generic,
       " {\"tool_call\": {\"name\": \"f\", \"arguments\": {\"a\": 1}}}",
       "",
       {{"f", "{\"a\":1}"}}},
      {"generic_calls",
       ToolFormat::Generic,
       "{\"tool_calls\": [{\"name\": \"f\", \"arguments\": {}}, {\"name\": \"g\", \"arguments\": "
       "{}}]}",
       "",
       {{"f", "{}"}, {"g", "{}"}}},
      {"generic_response",
       ToolFormat::Generic,
       "{\"response\": \"Hello \\\"there\\\"\"}",
       "Hello \"there\"",
       {}},
      {"generic_plain",
       ToolFormat::Generic,
       "Just text {\"tool_call\": 1}",
       "Just text {\"tool_call\": 1}",
       {}},
      {"generic_other_json", ToolFormat::Generic, "{\"a\": 1}", "{\"a\": 1}", {}},
      {"empty", ToolFormat::Hermes, "", "", {}},
      {"blank", ToolFormat::Hermes, " \n\t ", "", {}},
      {"utf8",
       ToolFormat::Hermes,
       "Caf\xC3\xA9 \xE4\xB8\x96\xF0\x9F\x99\x82<tool_call>{\"name\": \"f\", \"arguments\": "
       "{\"t\": \"\xF0\x9F\x99\x82\"}}</tool_call>",
       "Caf\xC3\xA9 \xE4\xB8\x96\xF0\x9F\x99\x82",
       {{"f", "{\"t\":\"\xF0\x9F\x99\x82\"}"}}},
  };
  return e;
}

TEST(ToolCalls, EdgeCases) {
  for (const Edge& e : edges()) {
    SCOPED_TRACE(e.name);
    const ParsedOutput r = whole(e.format, e.text);
    EXPECT_EQ(r.content, e.content);
    ASSERT_EQ(r.calls.size(), e.calls.size());
    for (size_t i = 0; i < r.calls.size(); ++i) {
      EXPECT_EQ(r.calls[i].name, e.calls[i].first);
      EXPECT_EQ(r.calls[i].arguments, e.calls[i].second);
      EXPECT_EQ(r.calls[i].complete, i + 1 < r.calls.size() || e.complete);
    }
    expect_split_invariant(e.format, e.text, e.name);
  }
}

TEST(ToolCalls, StreamsArgumentsAsTheyArrive) {
  IdSource ids(3);
  ToolStreamParser p(ToolFormat::Hermes, ids);
  auto ev = p.feed("Let me look. <tool_");
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].text, "Let me look.");  // the blank and the possible marker wait
  ev = p.feed("call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Pa");
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].kind, ToolEvent::Kind::CallStart);
  EXPECT_EQ(ev[0].name, "get_weather");
  EXPECT_EQ(ev[0].index, 0);
  EXPECT_EQ(ev[0].id.substr(0, 5), "call_");
  EXPECT_EQ(ev[1].kind, ToolEvent::Kind::Arguments);
  EXPECT_EQ(ev[1].text, "{\"city\":\"Pa");
  ev = p.feed("ris\"}}\n</tool_call>");
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].text, "ris\"}");
  EXPECT_TRUE(p.finish().empty());
}

TEST(ToolCalls, ContentNeverSplitsACharacter) {
  const std::string text =
      "\xC3\xA9\xE4\xB8\x96\xF0\x9F\x99\x82 x <tool_call>{\"name\": \"f\", \"arguments\": {\"t\": "
      "\"\xE4\xB8\x96\"}}";
  IdSource ids(1);
  ToolStreamParser p(ToolFormat::Hermes, ids);
  for (char c : text)
    for (const ToolEvent& e : p.feed(std::string(1, c)))
      if (!e.text.empty()) {
        const auto last = static_cast<unsigned char>(e.text.back());
        EXPECT_TRUE(last < 0x80 || (last & 0xC0) == 0x80) << "ends on a lead byte";
        const auto first = static_cast<unsigned char>(e.text.front());
        EXPECT_NE(first & 0xC0, 0x80) << "starts with a continuation byte";
      }
}

TEST(ToolCalls, AnyBytesAnyFormat) {
  // No input makes it throw, and splitting never changes the result.
  std::mt19937 rng(5);
  const std::string alphabet =
      "{}[]\":,; \n\\abn0123456789-.etrufl<>|_/TOOLCALSRGIDpyhontg\xC3\xA9";
  const std::vector<std::string> words = {
      "<tool_call>",      "</tool_call>",   "[TOOL_CALLS]",
      "[ARGS]",           "[CALL_ID]",      "{\"name\": \"f\", \"arguments\": ",
      "\"parameters\": ", "<|python_tag|>", "functools[",
      "<tool_calls>",     "<|tool_call|>",  "{\"tool_call\": "};
  for (int rep = 0; rep < 300; ++rep) {
    std::string text;
    const int n = rng() % 40;
    for (int k = 0; k < n; ++k)
      text += rng() % 3 ? std::string(1, alphabet[rng() % alphabet.size()])
                        : words[rng() % words.size()];
    for (ToolFormat f :
         {ToolFormat::Generic, ToolFormat::Hermes, ToolFormat::Llama3, ToolFormat::Mistral,
          ToolFormat::Granite, ToolFormat::FuncTools, ToolFormat::Apriel}) {
      const ParsedOutput ref = whole(f, text);
      std::vector<size_t> cuts;
      for (size_t at = 0; (at += 1 + rng() % 4) < text.size();) cuts.push_back(at);
      expect_same(stream(f, text, cuts), ref, std::string(format_name(f)) + ": " + text);
    }
  }
}

}  // namespace
