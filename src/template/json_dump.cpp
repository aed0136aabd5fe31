// The tojson filter as transformers defines it: Python's json.dumps, byte for byte.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "template/builtins.h"
#include "template/unicode.h"

namespace lr::jinja {

namespace {

void append_json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  tick_chars(s.size());
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      ++i;
      switch (b) {
        case '"':
          out += "\\\"";
          break;
        case '\\':
          out += "\\\\";
          break;
        case '\n':
          out += "\\n";
          break;
        case '\r':
          out += "\\r";
          break;
        case '\t':
          out += "\\t";
          break;
        case '\b':
          out += "\\b";
          break;
        case '\f':
          out += "\\f";
          break;
        default:
          if (b < 0x20 || (ensure_ascii && b == 0x7F)) {
            out += fmt::format("\\u{:04x}", b);
          } else {
            out += static_cast<char>(b);
          }
      }
      continue;
    }
    const size_t start = i;
    const char32_t c = utf8::next(s, i);
    if (!ensure_ascii) {
      out.append(s.substr(start, i - start));
    } else if (c >= 0x10000) {
      const char32_t v = c - 0x10000;
      out += fmt::format("\\u{:04x}\\u{:04x}", static_cast<unsigned>(0xD800 + (v >> 10)),
                         static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
    } else {
      out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
    }
  }
  out += '"';
}

std::string json_float(double f) {
  if (std::isnan(f)) return "NaN";
  if (std::isinf(f)) return f > 0 ? "Infinity" : "-Infinity";
  return float_repr(f);
}

class Dumper {
 public:
  Dumper(const JsonOptions& o, std::string& out) : o_(o), out_(out) {}

  void dump(const Value& v, int level) {
    if (level > kMaxValueDepth) lr::fail("tojson: value nested too deeply");
    check_size(out_.size());
    tick();
    switch (v.kind()) {
      case Kind::None:
        out_ += "null";
        return;
      case Kind::Bool:
        out_ += v.boolean() ? "true" : "false";
        return;
      case Kind::Int:
        out_ += std::to_string(v.integer());
        return;
      case Kind::Float:
        out_ += json_float(v.number());
        return;
      case Kind::String:
        append_json_string(out_, v.str(), o_.ensure_ascii);
        return;
      case Kind::List:
        if (std::string_view(v.seq().type) == "range")
          lr::fail("Object of type range is not JSON serializable");
        dump_list(v.items(), level);
        return;
      case Kind::Tuple:
        dump_list(v.items(), level);
        return;
      case Kind::Dict:
        dump_dict(v.dict(), level);
        return;
      default:
        lr::fail("Object of type {} is not JSON serializable", type_name(v));
    }
  }

 private:
  void newline(int level) {
    if (!o_.indent) return;
    out_ += '\n';
    for (int k = 0; k < level; ++k) out_ += *o_.indent;
  }

  void dump_list(const std::vector<Value>& items, int level) {
    if (items.empty()) {
      out_ += "[]";
      return;
    }
    out_ += '[';
    for (size_t k = 0; k < items.size(); ++k) {
      if (k) out_ += o_.item_separator;
      newline(level + 1);
      dump(items[k], level + 1);
    }
    newline(level);
    out_ += ']';
  }

  std::string key_text(const Value& k) {
    switch (k.kind()) {
      case Kind::String:
        return k.str();
      case Kind::None:
        return "null";
      case Kind::Bool:
        return k.boolean() ? "true" : "false";
      case Kind::Int:
        return std::to_string(k.integer());
      case Kind::Float:
        return json_float(k.number());
      default:
        lr::fail("keys must be str, int, float, bool or None, not {}", type_name(k));
    }
  }

  void dump_dict(const Dict& d, int level) {
    if (d.empty()) {
      out_ += "{}";
      return;
    }
    std::vector<const std::pair<Value, Value>*> entries;
    for (const auto& e : d.entries()) entries.push_back(&e);
    if (o_.sort_keys) {
      std::stable_sort(entries.begin(), entries.end(), [](const auto* a, const auto* b) {
        return compare(a->first, b->first, "<") < 0;
      });
    }
    out_ += '{';
    bool first = true;
    for (const auto* e : entries) {
      if (!first) out_ += o_.item_separator;
      first = false;
      newline(level + 1);
      append_json_string(out_, key_text(e->first), o_.ensure_ascii);
      out_ += o_.key_separator;
      dump(e->second, level + 1);
    }
    newline(level);
    out_ += '}';
  }

  const JsonOptions& o_;
  std::string& out_;
};

}  // namespace

std::string to_json(const Value& v, const JsonOptions& options) {
  std::string out;
  Dumper(options, out).dump(v, 0);
  check_size(out.size());
  return out;
}

}  // namespace lr::jinja
