// The tool-call state machine of tool_calls.h. Bytes wait in `buf` until the
// mode at its front can decide about them; every decision looks only at the
// bytes themselves (never at where a piece ended), which is what makes the
// result independent of how the text was split.
#include "server/tool_calls.h"

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "server/json_scan.h"

namespace lr::server::tools {

namespace {

using nlohmann::json;

using namespace scan;

// Matches the fixed part of a call's markup at the front of a buffer. Once it
// fails or runs out of bytes every later step is a no-op, so a header reads
// as a straight sequence. Headers longer than kMaxHeader bytes are refused:
// the limit is a position, not a buffer size, so the decision cannot depend
// on how the text was split.
class Matcher {
 public:
  enum class R { Ok, More, Bad };
  static constexpr size_t kMaxHeader = 1024;

  Matcher(std::string_view s, size_t pos) : s_(s), i(pos) {}

  bool ok() const { return r == R::Ok; }
  // Whether a byte other than `c` comes next (false too when none does yet).
  bool next_not(char c) {
    const char got = peek();
    return ok() && got != c;
  }
  // The byte at the cursor (0 when there is none: r says why).
  char peek() {
    if (!ok()) return 0;
    if (i >= s_.size() || i >= kMaxHeader) {
      r = s_.size() > kMaxHeader ? R::Bad : R::More;
      return 0;
    }
    return s_[i];
  }
  void ws() {
    while (ok() && is_ws(peek())) ++i;
  }
  void lit(std::string_view t) {
    if (ok() && !try_lit(t) && ok()) r = R::Bad;
  }
  // Consumes `t` if it comes next; false (consuming nothing) if something else does.
  bool try_lit(std::string_view t) {
    for (size_t k = 0; k < t.size(); ++k) {
      i += k;
      const char c = peek();
      i -= k;
      if (!ok() || c != t[k]) return false;
    }
    i += t.size();
    return true;
  }
  // One or more bytes that `pred` accepts, at most `max`; ended by any other byte.
  std::string word(bool (*pred)(char), size_t max) {
    const size_t from = i;
    while (ok() && pred(peek())) ++i;
    if (ok() && (i == from || i - from > max)) r = R::Bad;
    return ok() ? std::string(s_.substr(from, i - from)) : std::string();
  }
  // A JSON string without escapes (a function name).
  std::string str() {
    lit("\"");
    const size_t from = i;
    for (char c; (c = peek()) != '"' && ok(); ++i)
      if (c == '\\' || static_cast<unsigned char>(c) < 0x20) r = R::Bad;
    if (ok() && i == from) r = R::Bad;
    std::string out = ok() ? std::string(s_.substr(from, i - from)) : std::string();
    lit("\"");
    return out;
  }

  R r = R::Ok;

 private:
  std::string_view s_;

 public:
  size_t i;
};

// `{"name": "...", "arguments": ` (or "parameters", optionally after
// "type": "function"), the cursor left on the value's first byte.
std::string object_header(Matcher& m) {
  m.lit("{");
  m.ws();
  if (m.try_lit("\"type\"")) {
    m.ws(), m.lit(":"), m.ws(), m.lit("\"function\""), m.ws(), m.lit(","), m.ws();
  }
  m.lit("\"name\""), m.ws(), m.lit(":"), m.ws();
  std::string name = m.str();
  m.ws(), m.lit(","), m.ws();
  if (!m.try_lit("\"arguments\"")) m.lit("\"parameters\"");
  m.ws(), m.lit(":"), m.ws(), m.peek();
  return name;
}

std::string dump_compact(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// A parsed call object: "name" and "arguments" (or "parameters"; an object, or
// a string holding one; absent means no arguments), "id" if the model wrote one.
std::optional<ToolCall> call_from_json(const json& j) {
  if (!j.is_object()) return std::nullopt;
  auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get<std::string>().empty())
    return std::nullopt;
  json args = json::object();
  auto a = j.find("arguments");
  if (a == j.end()) a = j.find("parameters");
  if (a != j.end()) args = a->is_string() ? json::parse(a->get<std::string>(), nullptr, false) : *a;
  if (!args.is_object()) return std::nullopt;
  ToolCall call{"", name->get<std::string>(), dump_compact(args), true};
  auto id = j.find("id");
  if (id != j.end() && id->is_string() && id->get<std::string>().size() <= 64)
    call.id = id->get<std::string>();
  return call;
}

// What a JSON value held whole (not streamed) stands for.
enum class Region { Object, Array, Generic };

bool decode_region(Region region, std::string_view text, std::vector<ToolCall>& calls,
                   std::string& content) {
  const json j = json::parse(text, nullptr, false);
  auto add = [&](const json& v) {
    auto c = call_from_json(v);
    if (c) calls.push_back(std::move(*c));
    return c.has_value();
  };
  auto add_all = [&](const json& arr) {
    if (!arr.is_array()) return false;
    for (const json& v : arr)
      if (!add(v)) return false;
    return true;
  };
  switch (region) {
    case Region::Object:
      return add(j);
    case Region::Array:
      return !j.empty() && add_all(j);
    case Region::Generic:
      if (!j.is_object() || j.size() != 1) return false;
      if (j.contains("tool_call")) return add(j["tool_call"]);
      if (j.contains("tool_calls")) return add_all(j["tool_calls"]);
      if (j.contains("response")) {
        content = j["response"].is_string() ? j["response"].get<std::string>()
                                            : dump_compact(j["response"]);
        return true;
      }
      return false;
  }
  return false;
}

// Where calls begin in a format's text, and what closes them.
struct Syntax {
  std::vector<std::string_view> triggers;  // markers that open a call anywhere in the text
  bool brace_at_line_start = false;        // Llama 3: a '{' that starts a line or the output
  bool brace_at_output_start = false;      // Generic: a '{' that starts the output
  std::string_view close;                  // the marker after a call ("" none)
  std::string_view resync;  // after a malformed streamed call: drop up to here ("" all)
};

const Syntax& syntax_of(ToolFormat f) {
  static const Syntax kSyntax[] = {
      {{}, false, true, "", ""},                                           // Generic
      {{"<tool_call>"}, false, false, "</tool_call>", "</tool_call>"},     // Hermes
      {{"<|python_tag|>"}, true, false, "", ""},                           // Llama3
      {{"[TOOL_CALLS]"}, false, false, "", "[TOOL_CALLS]"},                // Mistral
      {{"<|tool_call|>"}, false, false, "", ""},                           // Granite
      {{"functools["}, false, false, "", ""},                              // FuncTools
      {{"<tool_calls>"}, false, false, "</tool_calls>", "</tool_calls>"},  // Apriel
  };
  return kSyntax[static_cast<int>(f)];
}

}  // namespace

std::string_view format_name(ToolFormat f) {
  static constexpr std::string_view kNames[] = {"generic", "hermes",    "llama3", "mistral",
                                                "granite", "functools", "apriel"};
  return kNames[static_cast<int>(f)];
}

ToolFormat detect_tool_format(std::string_view src) {
  auto has = [&](std::string_view m) { return src.find(m) != std::string_view::npos; };
  if (has("[TOOL_CALLS]")) return ToolFormat::Mistral;
  if (has("<|tool_call|>")) return ToolFormat::Granite;
  if (has("<tool_calls>[")) return ToolFormat::Apriel;
  if (has("functools[")) return ToolFormat::FuncTools;
  // Several families wrap other syntaxes in <tool_call> (Qwen3-Coder's
  // <function=...>, GLM's <arg_key>, MiniMax's <invoke>): only JSON is Hermes.
  const bool xml_args = has("<function=") || has("<arg_key>") || has("<invoke");
  if (has("<tool_call>") && !xml_args) return ToolFormat::Hermes;
  if ((has("<|python_tag|>") || has("ipython")) && has("\"parameters\"") && !xml_args)
    return ToolFormat::Llama3;
  return ToolFormat::Generic;
}

std::string IdSource::next() {
  static constexpr char kAlnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::string id = "call_";
  for (int k = 0; k < 24; ++k) id += kAlnum[rng_() % (sizeof(kAlnum) - 1)];
  return id;
}

struct ToolStreamParser::Impl {
  enum class Mode { Text, Header, Args, Tail, Close, Buffered, Skip };

  Impl(ToolFormat f, IdSource& i) : fmt(f), ids(i), syn(syntax_of(f)) {}

  ToolFormat fmt;
  IdSource& ids;
  Syntax syn;
  Mode mode = Mode::Text;
  std::string buf;      // undecided bytes; the current mode starts at buf[0]
  size_t trig_len = 0;  // the trigger at buf's front (Header, Buffered): text if rejected
  size_t value_pos = 0, scanned = 0;  // Buffered: the value's start in buf, bytes scanned so far
  Region region = Region::Object;
  JsonScan scan;
  // Where a '{' can open a call (Llama 3, Generic), and a ';' between calls.
  bool line_start = true, output_start = true, after_call = false;
  bool started = false;  // content: a non-blank byte was sent (leading blanks are trimmed)
  std::string hold;      // content held back: trailing blanks, an incomplete UTF-8 character
  std::string arg_hold;  // arguments held back: an incomplete UTF-8 character
  std::vector<ToolEvent> out;
  ParsedOutput res;

  // ---- what leaves the parser
  void content(std::string_view s) {
    // Once sent, `hold` keeps only blanks and an incomplete character: more
    // blanks change nothing (and must not cost a rescan of a long run).
    if (started && utf8_complete_len(hold) == hold.size() &&
        std::all_of(s.begin(), s.end(), is_ws)) {
      hold += s;
      return;
    }
    hold += s;
    if (!started) {
      size_t k = 0;
      while (k < hold.size() && is_ws(hold[k])) ++k;
      hold.erase(0, k);
      if (hold.empty()) return;
      started = true;
    }
    size_t m = utf8_complete_len(hold);
    while (m > 0 && is_ws(hold[m - 1])) --m;  // trailing blanks wait: they may end the content
    if (m > 0) send_content(hold.substr(0, m)), hold.erase(0, m);
  }
  void send_content(std::string text) {
    res.content += text;
    out.push_back({ToolEvent::Kind::Content, std::move(text), -1, "", ""});
  }
  void start_call(std::string id, std::string name) {
    if (id.empty()) id = ids.next();
    const int index = static_cast<int>(res.calls.size());
    res.calls.push_back({id, name, "", true});
    out.push_back({ToolEvent::Kind::CallStart, "", index, std::move(id), std::move(name)});
  }
  void send_args(std::string_view frag, bool flush) {
    arg_hold += frag;
    const size_t n = flush ? arg_hold.size() : utf8_complete_len(arg_hold);
    if (n == 0) return;
    res.calls.back().arguments += arg_hold.substr(0, n);
    out.push_back({ToolEvent::Kind::Arguments, arg_hold.substr(0, n),
                   static_cast<int>(res.calls.size()) - 1, "", ""});
    arg_hold.erase(0, n);
  }

  // A text byte: whether it is content (Llama 3's ';' between calls is not),
  // and the state that says where a '{' may open a call.
  bool note(char c) {
    if (fmt == ToolFormat::Llama3 && c == ';' && after_call)
      return line_start = true, after_call = false;
    if (c == '\n') {
      line_start = true;
    } else if (!is_ws(c)) {
      line_start = output_start = after_call = false;
    }
    return true;
  }
  void text_bytes(std::string_view s) {
    std::string plain;
    for (char c : s)
      if (note(c)) plain += c;
    content(plain);
  }

  // ---- the modes; each returns whether it changed mode (run again) or needs more bytes
  enum class Trig { None, Partial, Full };
  Trig trigger_at(size_t i, size_t& len) const {
    if (buf[i] == '{' &&
        ((syn.brace_at_line_start && line_start) || (syn.brace_at_output_start && output_start)))
      return len = 1, Trig::Full;
    Trig t = Trig::None;
    for (std::string_view m : syn.triggers) {
      const size_t n = std::min(m.size(), buf.size() - i);
      if (buf.compare(i, n, m.substr(0, n)) != 0) continue;
      if (n == m.size()) return len = n, Trig::Full;
      t = Trig::Partial;
    }
    return t;
  }
  bool text(bool at_end) {
    size_t i = 0, len = 0;
    Trig t = Trig::None;
    std::string plain;
    for (; i < buf.size(); ++i) {
      t = trigger_at(i, len);
      if (t == Trig::Full || (t == Trig::Partial && !at_end)) break;
      if (note(buf[i])) plain += buf[i];
    }
    content(plain);
    buf.erase(0, i);
    if (t != Trig::Full || buf.empty()) return false;
    trig_len = len, mode = Mode::Header;
    return true;
  }
  // The trigger was not a call after all: it is text, and scanning goes on after it.
  bool reject() {
    const std::string trig = buf.substr(0, trig_len);
    buf.erase(0, trig_len);
    mode = Mode::Text;
    text_bytes(trig);
    return true;
  }
  bool header(bool at_end) {
    Matcher m(buf, fmt == ToolFormat::Generic || buf[0] == '{' ? 0 : trig_len);
    std::string name, id;
    switch (fmt) {
      case ToolFormat::Hermes:
      case ToolFormat::Llama3: {
        m.ws();
        const size_t obj = m.i;
        if (m.peek() != '{') break;
        name = object_header(m);
        // Hermes' tag already says "a call": other key orders, string arguments are held whole.
        if (fmt == ToolFormat::Hermes && (m.r == Matcher::R::Bad || m.next_not('{')))
          return hold_value(Region::Object, obj);
        break;
      }
      case ToolFormat::Mistral: {
        const size_t after = m.i;
        m.ws();
        if (m.peek() == '[') return hold_value(Region::Array, m.i);
        if (m.r == Matcher::R::More) break;
        m = Matcher(buf, after);
        name = m.word(is_name_char, 128);
        if (m.try_lit("[CALL_ID]")) id = m.word(is_id_char, 64);
        m.lit("[ARGS]");
        break;
      }
      case ToolFormat::Granite:
      case ToolFormat::Apriel:
      case ToolFormat::FuncTools:
        if (fmt == ToolFormat::FuncTools) --m.i;  // the trigger ends with the array's '['
        m.ws();
        if (m.peek() == '[') return hold_value(Region::Array, m.i);
        if (m.ok()) m.r = Matcher::R::Bad;  // these carry arrays only
        break;
      case ToolFormat::Generic:
        return hold_value(Region::Generic, 0);
    }
    if (m.next_not('{')) m.r = Matcher::R::Bad;
    if (m.r == Matcher::R::More) return at_end ? reject() : false;
    if (m.r == Matcher::R::Bad) return reject();
    start_call(id, name);
    buf.erase(0, m.i);
    scan = JsonScan();
    mode = Mode::Args;
    return true;
  }
  bool args(bool at_end) {
    size_t i = 0;
    JsonScan::R r = JsonScan::R::More;
    std::string frag;
    while (i < buf.size() && r == JsonScan::R::More) {
      r = scan.push(buf[i++]);
      if (r != JsonScan::R::Bad && scan.kept()) frag += buf[i - 1];
    }
    buf.erase(0, i);
    send_args(frag, r != JsonScan::R::More || at_end);
    if (r == JsonScan::R::Done) {
      if (fmt == ToolFormat::Mistral) return end_call();
      scan.start_in_object();  // Hermes, Llama 3: the rest of the call object
      mode = Mode::Tail;
      return true;
    }
    if (r == JsonScan::R::Bad || at_end) {
      res.calls.back().complete = false;
      mode = Mode::Skip;
      return true;
    }
    return false;
  }
  bool tail(bool at_end) {
    size_t i = 0;
    JsonScan::R r = JsonScan::R::More;
    while (i < buf.size() && r == JsonScan::R::More) r = scan.push(buf[i++]);
    buf.erase(0, i);
    if (r == JsonScan::R::Done) return end_call();
    if (r == JsonScan::R::Bad)
      return mode = Mode::Skip, true;  // the arguments were whole: the call stands
    if (at_end) buf.clear();
    return false;
  }
  bool end_call() {
    line_start = after_call = true, output_start = false;
    mode = syn.close.empty() ? Mode::Text : Mode::Close;
    return true;
  }
  // Optional blanks and the closing marker; anything else is text again.
  bool close(bool at_end) {
    size_t i = 0;
    while (i < buf.size() && is_ws(buf[i])) ++i;
    const size_t n = std::min(syn.close.size(), buf.size() - i);
    if (buf.compare(i, n, syn.close.substr(0, n)) != 0) return mode = Mode::Text, true;
    if (n == syn.close.size()) {
      buf.erase(0, i + n);
      return mode = Mode::Text, true;
    }
    if (at_end) buf.clear();  // a cut-off closing marker is still markup
    return false;
  }
  // After a malformed streamed call: its remaining markup is dropped up to the resync marker.
  bool skip(bool at_end) {
    const size_t at = syn.resync.empty() ? std::string::npos : buf.find(syn.resync);
    if (at != std::string::npos) {
      const bool keep =
          !syn.triggers.empty() && syn.resync == syn.triggers.front();  // a new call: scan it
      buf.erase(0, keep ? at : at + syn.resync.size());
      end_call();
      return mode = Mode::Text, true;
    }
    const size_t keep =
        at_end ? 0 : std::min(buf.size(), syn.resync.empty() ? 0 : syn.resync.size() - 1);
    buf.erase(0, buf.size() - keep);
    return false;
  }
  // A call held whole: its JSON value is scanned to its end, then parsed.
  bool hold_value(Region r, size_t pos) {
    region = r, value_pos = pos, scanned = 0, scan = JsonScan();
    return mode = Mode::Buffered, true;
  }
  bool buffered(bool at_end) {
    JsonScan::R r = JsonScan::R::More;
    while (value_pos + scanned < buf.size() && r == JsonScan::R::More)
      r = scan.push(buf[value_pos + scanned++]);
    if (r == JsonScan::R::Bad || (r == JsonScan::R::More && at_end)) return reject();
    if (r == JsonScan::R::More) return false;
    std::vector<ToolCall> calls;
    std::string text;
    if (!decode_region(region, std::string_view(buf).substr(value_pos, scanned), calls, text))
      return reject();
    buf.erase(0, value_pos + scanned);
    for (ToolCall& c : calls) {
      start_call(c.id, c.name);
      send_args(c.arguments, true);
    }
    if (region == Region::Generic) {  // {"response": ...}: the text is the content
      mode = Mode::Text, output_start = false;
      text_bytes(text);
      return true;
    }
    return end_call();
  }

  bool step(bool at_end) {
    switch (mode) {
      // clang-format off
      case Mode::Text: return text(at_end);
      case Mode::Header: return header(at_end);
      case Mode::Args: return args(at_end);
      case Mode::Tail: return tail(at_end);
      case Mode::Close: return close(at_end);
      case Mode::Buffered: return buffered(at_end);
      case Mode::Skip: return skip(at_end);
        // clang-format on
    }
    return false;
  }
  void run(bool at_end) {
    while (step(at_end)) {
    }
  }
};

ToolStreamParser::ToolStreamParser(ToolFormat format, IdSource& ids)
    : impl_(std::make_unique<Impl>(format, ids)) {}
ToolStreamParser::~ToolStreamParser() = default;
ToolStreamParser::ToolStreamParser(ToolStreamParser&&) noexcept = default;
ToolStreamParser& ToolStreamParser::operator=(ToolStreamParser&&) noexcept = default;

std::vector<ToolEvent> ToolStreamParser::feed(std::string_view piece) {
  impl_->buf += piece;
  impl_->run(false);
  return std::exchange(impl_->out, {});
}

std::vector<ToolEvent> ToolStreamParser::finish() {
  Impl& s = *impl_;
  s.run(true);
  if (!s.res.calls.empty() && !s.arg_hold.empty()) s.send_args("", true);
  while (!s.hold.empty() && is_ws(s.hold.back()))
    s.hold.pop_back();  // the content's trailing blanks
  if (!s.hold.empty()) s.send_content(std::exchange(s.hold, {}));
  return std::exchange(s.out, {});
}

const ParsedOutput& ToolStreamParser::result() const {
  return impl_->res;
}

ParsedOutput parse_tool_calls(ToolFormat format, std::string_view text, IdSource& ids) {
  ToolStreamParser p(format, ids);
  p.feed(text);
  p.finish();
  return p.result();
}

}  // namespace lr::server::tools
