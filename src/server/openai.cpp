#include "server/openai.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>

#include "server/output_format.h"

namespace lr::server {

ApiError::ApiError(int status_, const std::string& message, std::string param_, std::string code_)
    : std::runtime_error(message),
      status(status_),
      type(error_type(status_)),
      param(std::move(param_)),
      code(std::move(code_)) {}

const char* error_type(int status) {
  switch (status) {
    case 401:
      return "authentication_error";
    case 404:
      return "not_found_error";
    case 503:
      return "unavailable_error";
    default:
      return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

json error_body(const ApiError& e) {
  json err = {{"message", e.what()}, {"type", e.type}, {"param", nullptr}, {"code", nullptr}};
  if (!e.param.empty()) err["param"] = e.param;
  if (!e.code.empty()) err["code"] = e.code;
  return {{"error", err}};
}

json parse_json_body(const std::string& body) {
  try {
    json j = json::parse(body);
    if (!j.is_object()) throw ApiError(400, "the request body must be a JSON object");
    return j;
  } catch (const json::exception& e) {  // a syntax error, or a number out of range
                                        // (fuzz/corpus/openai/number_overflow)
    throw ApiError(400, fmt::format("invalid JSON body: {}", e.what()));
  }
}

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw ApiError(400, message, param);
}

// j[key] as a number in [lo, hi] (absent or null: `def`).
double number(const json& j, const char* key, double lo, double hi, double def) {
  if (!j.contains(key) || j[key].is_null()) return def;
  const json& v = j[key];
  if (!v.is_number()) bad(key, fmt::format("'{}' must be a number", key));
  const double x = v.get<double>();
  if (!(x >= lo && x <= hi))
    bad(key, fmt::format("'{}' must be between {} and {} (got {})", key, lo, hi, x));
  return x;
}

int64_t integer(const json& j, const char* key, int64_t lo, int64_t hi, int64_t def) {
  if (!j.contains(key) || j[key].is_null()) return def;
  const json& v = j[key];
  if (!v.is_number_integer()) bad(key, fmt::format("'{}' must be an integer", key));
  const int64_t x =
      v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())
          ? std::numeric_limits<int64_t>::max()
          : v.get<int64_t>();
  if (x < lo || x > hi)
    bad(key, fmt::format("'{}' must be between {} and {} (got {})", key, lo, hi, x));
  return x;
}

bool boolean(const json& j, const char* key, bool def) {
  if (!j.contains(key) || j[key].is_null()) return def;
  if (!j[key].is_boolean()) bad(key, fmt::format("'{}' must be true or false", key));
  return j[key].get<bool>();
}

std::vector<std::string> stops(const json& j) {
  if (!j.contains("stop") || j["stop"].is_null()) return {};
  const json& s = j["stop"];
  std::vector<std::string> out;
  if (s.is_string()) {
    out.push_back(s.get<std::string>());
  } else if (s.is_array()) {
    if (s.size() > 4) bad("stop", "'stop' takes at most 4 sequences");
    for (const json& x : s) {
      if (!x.is_string()) bad("stop", "'stop' must be a string or an array of strings");
      out.push_back(x.get<std::string>());
    }
  } else {
    bad("stop", "'stop' must be a string or an array of strings");
  }
  for (const std::string& x : out)
    if (x.empty()) bad("stop", "'stop' sequences must not be empty");
  return out;
}

// OpenAI's logit_bias: {"<token id>": bias in [-100, 100]} (ids checked
// against the vocabulary when the request is run).
std::vector<std::pair<int32_t, float>> logit_bias(const json& j) {
  std::vector<std::pair<int32_t, float>> out;
  if (!j.contains("logit_bias") || j["logit_bias"].is_null()) return out;
  const json& b = j["logit_bias"];
  if (!b.is_object()) bad("logit_bias", "'logit_bias' must be an object of token id: bias");
  if (b.size() > 1024) bad("logit_bias", "'logit_bias' takes at most 1024 tokens");
  for (const auto& [key, v] : b.items()) {
    int64_t id = -1;
    const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
    if (ec != std::errc() || end != key.data() + key.size() || id < 0 || id > INT32_MAX)
      bad("logit_bias", fmt::format("'logit_bias' key '{}' is not a token id", key));
    if (!v.is_number() || !(v.get<double>() >= -100 && v.get<double>() <= 100))
      bad("logit_bias",
          fmt::format("'logit_bias' of token {} must be a number in [-100, 100]", key));
    out.emplace_back(int32_t(id), v.get<float>());
  }
  return out;
}

}  // namespace

CompletionRequest parse_completion_request(Api api, const std::string& body) {
  const json j = parse_json_body(body);
  CompletionRequest r;
  r.api = api;
  const nlohmann::ordered_json oj = nlohmann::ordered_json::parse(body);  // in the client's order
  if (api == Api::Chat) {
    r.messages = template_messages(oj);
    r.tools = parse_tools(oj);
  } else {
    if (!j.contains("prompt")) bad("prompt", "'prompt' is required");
    const json& p = j["prompt"];
    if (p.is_string()) {
      r.prompt = p.get<std::string>();
      if (r.prompt.empty()) bad("prompt", "'prompt' must not be empty");
    } else if (p.is_array() && !p.empty() && p[0].is_number_integer()) {
      for (const json& t : p) {
        if (!t.is_number_integer()) bad("prompt", "'prompt' token arrays must hold integers");
        r.prompt_ids.push_back(int32_t(
            std::clamp<int64_t>(t.get<int64_t>(), -1, std::numeric_limits<int32_t>::max())));
      }
    } else if (p.is_array() && p.size() == 1 && p[0].is_string()) {
      r.prompt = p[0].get<std::string>();
    } else {
      bad("prompt", "'prompt' must be a string or an array of token ids (one prompt per request)");
    }
  }
  r.n = int(integer(j, "n", 1, kMaxChoices, 1));
  r.gen.grammar = output_grammar(oj);
  if (j.contains("user") && !j["user"].is_null() && !j["user"].is_string())
    bad("user", "'user' must be a string");  // accepted, as OpenAI's: an end user's id
  SamplerParams& s = r.gen.sampling;
  // OpenAI's defaults: temperature 1, top_p 1; top_k and min_p (llama.cpp's and vLLM's extensions)
  // off.
  s.temperature = float(number(j, "temperature", 0, 2, 1.0));
  s.top_p = float(number(j, "top_p", 0, 1, 1.0));
  if (s.top_p <= 0) bad("top_p", "'top_p' must be greater than 0");
  s.top_k = int(integer(j, "top_k", -1, std::numeric_limits<int32_t>::max(), 0));
  s.min_p = float(number(j, "min_p", 0, 1, 0.0));
  if (s.min_p >= 1) bad("min_p", "'min_p' must be less than 1");
  s.presence_penalty = float(number(j, "presence_penalty", -2, 2, 0));
  s.frequency_penalty = float(number(j, "frequency_penalty", -2, 2, 0));
  s.repeat_penalty = 1.f;
  s.logit_bias = logit_bias(j);
  s.seed = uint64_t(integer(j, "seed", std::numeric_limits<int64_t>::min(),
                            std::numeric_limits<int64_t>::max(), 0));
  const char* max_key = j.contains("max_completion_tokens") && !j["max_completion_tokens"].is_null()
                            ? "max_completion_tokens"
                            : "max_tokens";
  r.gen.max_tokens = int(integer(j, max_key, 1, std::numeric_limits<int32_t>::max(), 0));
  r.gen.stop = stops(j);
  r.stream = boolean(j, "stream", false);
  r.ignore_eos = boolean(j, "ignore_eos", false);
  if (j.contains("stream_options") && !j["stream_options"].is_null()) {
    const json& so = j["stream_options"];
    if (!so.is_object()) bad("stream_options", "'stream_options' must be an object");
    if (!r.stream) bad("stream_options", "'stream_options' is only allowed with 'stream': true");
    r.include_usage = boolean(so, "include_usage", false);
  }
  if (api == Api::Chat) {
    r.logprobs = boolean(j, "logprobs", false);
    const int64_t top = integer(j, "top_logprobs", 0, 20, 0);
    if (j.contains("top_logprobs") && !j["top_logprobs"].is_null() && !r.logprobs)
      bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    r.gen.top_logprobs = r.logprobs ? int(top) : -1;
  } else {  // the legacy API: logprobs is the number of alternatives, 0..5
    const int64_t n = integer(j, "logprobs", 0, 5, -1);
    r.logprobs = n >= 0;
    r.gen.top_logprobs = int(n);
  }
  return r;
}

std::string dump_json(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

json usage_json(const Usage& u) {
  json j = {{"prompt_tokens", u.prompt_tokens},
            {"completion_tokens", u.completion_tokens},
            {"total_tokens", u.prompt_tokens + u.completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
  // Speculative decoding: drafted tokens taken and rejected, under
  // OpenAI's names for predicted outputs.
  if (u.drafted > 0)
    j["completion_tokens_details"] = {{"accepted_prediction_tokens", u.draft_taken},
                                      {"rejected_prediction_tokens", u.drafted - u.draft_taken}};
  return j;
}

namespace {

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(int(c));
  return b;
}

json chat_logprobs(const std::vector<TokenOut>& tokens, const TokenText& tt) {
  json content = json::array();
  for (const TokenOut& t : tokens) {
    const std::string text = tt.text(t.id);
    json top = json::array();
    for (const TokenLogprob& a : t.top) {
      const std::string at = tt.text(a.id);
      top.push_back({{"token", at}, {"logprob", a.logprob}, {"bytes", bytes_of(at)}});
    }
    content.push_back({{"token", text},
                       {"logprob", t.logprob},
                       {"bytes", bytes_of(text)},
                       {"top_logprobs", top}});
  }
  return {{"content", content}};
}

json legacy_logprobs(const std::vector<TokenOut>& tokens, const TokenText& tt) {
  json toks = json::array(), lps = json::array(), tops = json::array(), offs = json::array();
  size_t off = 0;
  for (const TokenOut& t : tokens) {
    const std::string text = tt.text(t.id);
    toks.push_back(text);
    lps.push_back(t.logprob);
    json top = json::object();
    for (const TokenLogprob& a : t.top) top[tt.text(a.id)] = a.logprob;
    tops.push_back(top);
    offs.push_back(off);
    off += text.size();
  }
  return {{"tokens", toks}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offs}};
}

json tool_calls_json(const std::vector<tools::ToolCall>& calls) {
  json out = json::array();
  for (const tools::ToolCall& c : calls)
    out.push_back({{"id", c.id},
                   {"type", "function"},
                   {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  return out;
}

// OpenAI's streamed calls: the first delta of a call has its index, id, type
// and name (arguments ""), the later ones argument fragments under the index.
json tool_deltas(const std::vector<tools::ToolEvent>& events) {
  json out = json::array();
  for (const tools::ToolEvent& e : events) {
    if (e.kind == tools::ToolEvent::Kind::CallStart)
      out.push_back({{"index", e.index},
                     {"id", e.id},
                     {"type", "function"},
                     {"function", {{"name", e.name}, {"arguments", ""}}}});
    else if (e.kind == tools::ToolEvent::Kind::Arguments && !out.empty() &&
             out.back()["index"] == e.index)  // one entry per call and chunk
      out.back()["function"]["arguments"] =
          out.back()["function"]["arguments"].get<std::string>() + e.text;
    else if (e.kind == tools::ToolEvent::Kind::Arguments)
      out.push_back({{"index", e.index}, {"function", {{"arguments", e.text}}}});
  }
  return out;
}

json finish_json(Finish f) {
  return f == Finish::None ? json(nullptr) : json(finish_name(f));
}

}  // namespace

json completion_body(const Completion& c, bool logprobs, const TokenText& tt) {
  json choices = json::array();
  for (size_t i = 0; i < c.choices.size(); ++i) {
    const Choice& ch = c.choices[i];
    json choice = {{"index", i}, {"finish_reason", finish_json(ch.finish)}, {"logprobs", nullptr}};
    if (c.api == Api::Chat) {
      choice["message"] = {{"role", "assistant"}, {"content", ch.text}};
      if (!ch.calls.empty()) {
        if (ch.text.empty()) choice["message"]["content"] = nullptr;
        choice["message"]["tool_calls"] = tool_calls_json(ch.calls);
        if (ch.finish == Finish::Stop) choice["finish_reason"] = "tool_calls";
      }
      if (logprobs) choice["logprobs"] = chat_logprobs(ch.tokens, tt);
    } else {
      choice["text"] = ch.text;
      if (logprobs) choice["logprobs"] = legacy_logprobs(ch.tokens, tt);
    }
    choices.push_back(std::move(choice));
  }
  return {{"id", c.id},
          {"object", c.api == Api::Chat ? "chat.completion" : "text_completion"},
          {"created", c.created},
          {"model", c.model},
          {"choices", choices},
          {"usage", usage_json(c.usage)}};
}

json chunk_body(const Completion& c, int index, const Choice& d, bool first, bool logprobs,
                const TokenText& tt) {
  json choice = {{"index", index}, {"finish_reason", finish_json(d.finish)}, {"logprobs", nullptr}};
  if (c.api == Api::Chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!d.text.empty() || (first && d.finish == Finish::None)) delta["content"] = d.text;
    if (!d.events.empty()) delta["tool_calls"] = tool_deltas(d.events);
    if (d.tools && !d.calls.empty() && d.finish == Finish::Stop)
      choice["finish_reason"] = "tool_calls";
    choice["delta"] = delta;
    if (logprobs && !d.tokens.empty()) choice["logprobs"] = chat_logprobs(d.tokens, tt);
  } else {
    choice["text"] = d.text;
    if (logprobs && !d.tokens.empty()) choice["logprobs"] = legacy_logprobs(d.tokens, tt);
  }
  return {{"id", c.id},
          {"object", c.api == Api::Chat ? "chat.completion.chunk" : "text_completion"},
          {"created", c.created},
          {"model", c.model},
          {"choices", json::array({choice})},
          {"usage", nullptr}};
}

json usage_chunk(const Completion& c) {
  return {{"id", c.id},
          {"object", c.api == Api::Chat ? "chat.completion.chunk" : "text_completion"},
          {"created", c.created},
          {"model", c.model},
          {"choices", json::array()},
          {"usage", usage_json(c.usage)}};
}

}  // namespace lr::server
