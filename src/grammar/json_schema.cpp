// JSON Schema -> GBNF: one rule per schema node, primitives shared.
#include "grammar/json_schema.h"

#include <fmt/format.h>

#include <cctype>
#include <map>
#include <set>
#include <vector>

#include "core/error.h"
#include "grammar/gbnf_compiler.h"
#include "grammar/grammar.h"
#include "grammar/schema_internal.h"

namespace lr::grammar {
namespace {

using Json = nlohmann::ordered_json;

const std::map<std::string, std::string>& primitives() {
  static const std::map<std::string, std::string> p = {
      {"space", R"(| " " | "\n"{1,2} [ \t]{0,20})"},
      {"value", "object | array | string | number | boolean | null"},
      {"object",
       R"("{" space ( string ":" space value ( "," space string ":" space value )* )? "}" space)"},
      {"array", R"("[" space ( value ( "," space value )* )? "]" space)"},
      {"char", R"([^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ))"},
      {"string", R"("\"" char* "\"" space)"},
      {"integral", R"("-"? ( "0" | [1-9] [0-9]* ))"},
      {"number", R"(integral ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )? space)"},
      {"integer", "integral space"},
      {"boolean", R"(( "true" | "false" ) space)"},
      {"null", R"("null" space)"},
      {"date",
       R"([0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | [12] [0-9] | "3" [01] ))"},
      {"time",
       R"(( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]+ )? ( "Z" | [+-] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ))"},
      {"date-time", R"(date "T" time)"},
      {"uuid",
       R"([0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12})"},
  };
  return p;
}

// Which primitives a primitive's body refers to.
const std::map<std::string, std::vector<std::string>>& primitive_deps() {
  static const std::map<std::string, std::vector<std::string>> d = {
      {"value", {"object", "array", "string", "number", "boolean", "null"}},
      {"object", {"space", "string", "value"}},
      {"array", {"space", "value"}},
      {"string", {"char", "space"}},
      {"number", {"integral", "space"}},
      {"integer", {"integral", "space"}},
      {"boolean", {"space"}},
      {"null", {"space"}},
      {"date-time", {"date", "time"}},
  };
  return d;
}

const std::set<std::string>& ignored_keywords() {
  static const std::set<std::string> k = {"title",    "description", "examples", "default",
                                          "$schema",  "$id",         "$comment", "deprecated",
                                          "readOnly", "writeOnly",   "$defs",    "definitions"};
  return k;
}

const std::set<std::string>& supported_keywords() {
  static const std::set<std::string> k = {"type",
                                          "properties",
                                          "required",
                                          "additionalProperties",
                                          "items",
                                          "prefixItems",
                                          "minItems",
                                          "maxItems",
                                          "enum",
                                          "const",
                                          "minLength",
                                          "maxLength",
                                          "pattern",
                                          "format",
                                          "anyOf",
                                          "oneOf",
                                          "$ref",
                                          "minimum",
                                          "maximum",
                                          "exclusiveMinimum",
                                          "exclusiveMaximum"};
  return k;
}

std::string json_type_of(const Json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "boolean";
  if (v.is_number_integer() || v.is_number_unsigned()) return "integer";
  if (v.is_number()) return "number";
  if (v.is_string()) return "string";
  if (v.is_array()) return "array";
  return "object";
}

class Converter {
 public:
  explicit Converter(const Json& root) : root_(root) {}

  std::string run() {
    std::string top = visit(root_, "root-value", "#");
    rules_.emplace_back("root", top);
    std::string out;
    for (auto& [name, body] : rules_) out += fmt::format("{} ::= {}\n", name, body);
    for (const auto& p : used_prims_) out += fmt::format("{} ::= {}\n", p, primitives().at(p));
    return out;
  }

 private:
  [[noreturn]] static void bad(const std::string& path, const std::string& what) {
    fail("json schema: {} at {}", what, path);
  }

  std::string prim(const std::string& name) {
    if (used_prims_.insert(name).second)
      if (auto it = primitive_deps().find(name); it != primitive_deps().end())
        for (const auto& d : it->second) prim(d);
    return name;
  }

  std::string fresh(std::string hint) {
    for (char& c : hint)
      if (!std::isalnum(static_cast<unsigned char>(c))) c = '-';
    if (hint.empty()) hint = "r";
    std::string name = hint;
    for (int n = 1; !names_.insert(name).second || primitives().count(name); ++n)
      name = fmt::format("{}-{}", hint, n);
    return name;
  }

  std::string add(const std::string& hint, std::string body) {
    std::string name = fresh(hint);
    rules_.emplace_back(name, std::move(body));
    return name;
  }

  static uint64_t count(const Json& s, const char* key, uint64_t dflt, const std::string& path) {
    if (!s.contains(key)) return dflt;
    const Json& v = s[key];
    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
      bad(path, fmt::format("'{}' must be a non-negative integer", key));
    uint64_t n = v.get<uint64_t>();
    if (n > kMaxRepeat)
      bad(path,
          fmt::format("'{}' = {} exceeds the grammar's repetition limit {}", key, n, kMaxRepeat));
    return n;
  }

  static std::string repeat(const std::string& item, uint64_t min, uint64_t max) {
    if (max == UINT64_MAX) return fmt::format("{}{{{},}}", item, min);
    return fmt::format("{}{{{},{}}}", item, min, max);
  }

  // A constant value, with the same optional whitespace as any other value.
  std::string literal(const Json& v) {
    const std::string sp = prim("space");
    if (v.is_object() || v.is_array()) {
      std::string out = v.is_object() ? "\"{\" " + sp : "\"[\" " + sp;
      bool first = true;
      for (auto& [key, item] : v.items()) {
        out += first ? " " : " \",\" " + sp + " ";
        if (v.is_object())
          out += fmt::format("\"{}\" {} \":\" {} ", gbnf_literal(Json(key).dump()), sp, sp);
        out += literal(item);
        first = false;
      }
      return out + (v.is_object() ? " \"}\" " : " \"]\" ") + sp;
    }
    return fmt::format("\"{}\" {}", gbnf_literal(v.dump()), sp);
  }

  std::string resolve_ref(const std::string& ref, const std::string& path) {
    if (auto it = refs_.find(ref); it != refs_.end()) return it->second;
    if (ref != "#" && ref.rfind("#/$defs/", 0) != 0 && ref.rfind("#/definitions/", 0) != 0)
      bad(path, fmt::format(
                    "$ref '{}' is not supported (only #, #/$defs/... and #/definitions/...)", ref));
    const Json* target = &root_;
    if (ref != "#") {
      try {
        target = &root_.at(Json::json_pointer(ref.substr(1)));
      } catch (const std::exception&) {
        bad(path, fmt::format("$ref '{}' points to nothing", ref));
      }
    }
    std::string name = fresh("ref-" + ref.substr(ref.rfind('/') + 1));
    refs_[ref] = name;  // before visiting: a recursive reference finds it
    size_t slot = rules_.size();
    rules_.emplace_back(name, "");
    std::string body = visit(*target, name + "-body", ref);
    rules_[slot].second = body;
    return name;
  }

  std::string visit(const Json& s, const std::string& hint, const std::string& path) {
    if (++depth_ > kMaxSchemaDepth)
      bad(path,
          fmt::format("the schema is nested deeper than {} levels (the limit)", kMaxSchemaDepth));
    std::string r = visit_node(s, hint, path);
    --depth_;
    return r;
  }

  std::string visit_node(const Json& s, const std::string& hint, const std::string& path) {
    if (s.is_boolean()) {
      if (!s.get<bool>()) bad(path, "the schema 'false' admits no value");
      return prim("value");
    }
    if (!s.is_object()) bad(path, "a schema must be an object or a boolean");
    for (auto& [key, _] : s.items())
      if (!ignored_keywords().count(key) && !supported_keywords().count(key))
        bad(path, fmt::format("unsupported keyword '{}'", key));
    if (s.contains("$ref")) {
      for (auto& [key, _] : s.items())
        if (key != "$ref" && supported_keywords().count(key))
          bad(path, fmt::format("'{}' beside '$ref' is not supported", key));
      return resolve_ref(s["$ref"].get<std::string>(), path);
    }
    for (const char* comb : {"anyOf", "oneOf"}) {
      if (!s.contains(comb)) continue;
      for (auto& [key, _] : s.items())
        if (key != comb && supported_keywords().count(key))
          bad(path, fmt::format("'{}' beside '{}' is not supported", key, comb));
      const Json& subs = s[comb];
      if (!subs.is_array() || subs.empty())
        bad(path, fmt::format("'{}' must be a non-empty array", comb));
      std::string body;
      for (size_t i = 0; i < subs.size(); ++i)
        body += (i ? " | " : "") + visit(subs[i], hint + "-" + std::to_string(i),
                                         fmt::format("{}/{}/{}", path, comb, i));
      return add(hint, body);
    }
    std::vector<std::string> types;
    if (s.contains("type")) {
      const Json& t = s["type"];
      if (t.is_string())
        types.push_back(t.get<std::string>());
      else if (t.is_array())
        for (const auto& x : t) types.push_back(x.get<std::string>());
      else
        bad(path, "'type' must be a string or an array");
    }
    if (s.contains("const")) {
      const Json& c = s["const"];
      if (c.is_number() && has_numeric_bounds(s) && !numeric_in_bounds(s, c, path))
        bad(path, "unsatisfiable schema: 'const' is outside the numeric bounds");
      return add(hint, literal(c));
    }
    if (s.contains("enum")) return enum_rule(s, types, hint, path);
    if (types.empty()) types.push_back(infer_type(s));
    std::string body;
    for (size_t i = 0; i < types.size(); ++i)
      body += (i ? " | " : "") + typed(s, types[i], hint, path);
    return add(hint, body);
  }

  std::string enum_rule(const Json& s, const std::vector<std::string>& types,
                        const std::string& hint, const std::string& path) {
    if (!s["enum"].is_array()) bad(path, "'enum' must be an array");
    if (s["enum"].size() > kMaxEnumValues)
      bad(path,
          fmt::format("'enum' has {} values; the limit is {}", s["enum"].size(), kMaxEnumValues));
    std::string body;
    for (const auto& v : s["enum"]) {
      std::string t = json_type_of(v);
      bool ok = types.empty();
      for (const auto& want : types) ok = ok || want == t || (want == "number" && t == "integer");
      if (v.is_number() && has_numeric_bounds(s)) ok = ok && numeric_in_bounds(s, v, path);
      if (ok) body += (body.empty() ? "" : " | ") + literal(v);
    }
    if (body.empty()) bad(path, "'enum' has no value of the schema's type");
    return add(hint, body);
  }

  static std::string infer_type(const Json& s) {
    for (const char* k : {"properties", "additionalProperties", "required"})
      if (s.contains(k)) return "object";
    for (const char* k : {"items", "prefixItems", "minItems", "maxItems"})
      if (s.contains(k)) return "array";
    for (const char* k : {"minLength", "maxLength", "pattern", "format"})
      if (s.contains(k)) return "string";
    if (has_numeric_bounds(s)) return "number";
    return "any";
  }

  std::string typed(const Json& s, const std::string& type, const std::string& hint,
                    const std::string& path) {
    if (type == "object") return object_rule(s, hint, path);
    if (type == "array") return array_rule(s, hint, path);
    if (type == "string") return string_rule(s, hint, path);
    if (type == "any") return prim("value");
    if ((type == "number" || type == "integer") && has_numeric_bounds(s)) {
      AddRule add_rule = [this](const std::string& h, std::string body) {
        return add(h, std::move(body));
      };
      return bounded_numeric_gbnf(s, type == "integer", add_rule, hint, path) + " " + prim("space");
    }
    if (type == "number" || type == "integer" || type == "boolean" || type == "null")
      return prim(type);
    bad(path, fmt::format("unknown type '{}'", type));
  }

  std::string string_rule(const Json& s, const std::string& hint, const std::string& path);
  std::string array_rule(const Json& s, const std::string& hint, const std::string& path);
  std::string object_rule(const Json& s, const std::string& hint, const std::string& path);
  std::string key_not_in(const std::vector<std::string>& keys, const std::string& hint);

  const Json& root_;
  std::vector<std::pair<std::string, std::string>> rules_;
  std::set<std::string> names_{"root"};
  std::set<std::string> used_prims_;
  std::map<std::string, std::string> refs_;
  int depth_ = 0;
};

std::string Converter::string_rule(const Json& s, const std::string& hint,
                                   const std::string& path) {
  bool lengths = s.contains("minLength") || s.contains("maxLength");
  if (s.contains("format")) {
    if (lengths || s.contains("pattern"))
      bad(path, "'format' with 'pattern' or lengths is not supported");
    std::string f = s["format"].get<std::string>();
    if (f != "date" && f != "time" && f != "date-time" && f != "uuid")
      bad(path,
          fmt::format(
              "unsupported keyword 'format' value '{}' (supported: date, time, date-time, uuid)",
              f));
    return fmt::format("\"\\\"\" {} \"\\\"\" {}", prim(f), prim("space"));
  }
  if (s.contains("pattern")) {
    if (lengths) bad(path, "'pattern' with 'minLength'/'maxLength' is not supported");
    std::string body = pattern_to_gbnf(s["pattern"].get<std::string>());
    return fmt::format("\"\\\"\" {} \"\\\"\" {}", add(hint + "-pattern", body), prim("space"));
  }
  if (!lengths) return prim("string");
  uint64_t min = count(s, "minLength", 0, path), max = count(s, "maxLength", UINT64_MAX, path);
  if (max < min) bad(path, "'maxLength' < 'minLength'");
  return fmt::format("\"\\\"\" {} \"\\\"\" {}", repeat(prim("char"), min, max), prim("space"));
}

std::string Converter::array_rule(const Json& s, const std::string& hint, const std::string& path) {
  uint64_t min = count(s, "minItems", 0, path), max = count(s, "maxItems", UINT64_MAX, path);
  if (max < min) bad(path, "'maxItems' < 'minItems'");
  std::vector<std::string> prefix;
  if (s.contains("prefixItems")) {
    const Json& p = s["prefixItems"];
    if (!p.is_array()) bad(path, "'prefixItems' must be an array");
    for (size_t i = 0; i < p.size() && i < max; ++i)
      prefix.push_back(
          visit(p[i], hint + "-" + std::to_string(i), fmt::format("{}/prefixItems/{}", path, i)));
  }
  std::string item;  // empty: no items past the prefix
  if (!s.contains("items"))
    item = prim("value");
  else if (!(s["items"].is_boolean() && !s["items"].get<bool>()))
    item = visit(s["items"], hint + "-item", path + "/items");
  const auto n = static_cast<uint64_t>(prefix.size());
  if (item.empty() && min > n)
    bad(path, "'minItems' exceeds the items 'prefixItems' and 'items' allow");
  // What follows element k, built from the back: the rest of the prefix,
  // then the free items; elements past minItems are optional.
  std::string after;
  if (!item.empty() && max > n) {
    uint64_t lo = min > n ? min - n : 0, hi = max == UINT64_MAX ? max : max - n;
    if (n == 0) {  // the first element has no comma before it
      std::string rest = repeat("( \",\" " + prim("space") + " " + item + " )", lo ? lo - 1 : 0,
                                hi == UINT64_MAX ? hi : hi - 1);
      std::string body = item + " " + rest;
      return fmt::format("\"[\" {} {} \"]\" {}", prim("space"), lo ? body : "( " + body + " )?",
                         prim("space"));
    }
    after = repeat("( \",\" " + prim("space") + " " + item + " )", lo, hi);
  }
  for (uint64_t k = n; k-- > 1;) {
    std::string next = fmt::format("\",\" {} {} {}", prim("space"), prefix[k], after);
    after = k < min ? next : "( " + next + " )?";
  }
  std::string body = n ? prefix[0] + " " + after : "";
  if (n && min == 0) body = "( " + body + " )?";
  return fmt::format("\"[\" {} {} \"]\" {}", prim("space"), body, prim("space"));
}

// Properties in schema order, each optional unless required, then the
// additional ones. Built from the back as two chains: R_i* (no comma needed
// yet) and R_i (a comma before the next property).
std::string Converter::object_rule(const Json& s, const std::string& hint,
                                   const std::string& path) {
  std::set<std::string> required;
  if (s.contains("required")) {
    if (!s["required"].is_array()) bad(path, "'required' must be an array");
    for (const auto& r : s["required"]) {
      if (!r.is_string()) bad(path, "'required' must list strings");
      required.insert(r.get<std::string>());
    }
  }
  std::vector<std::pair<std::string, std::string>> props;  // key, value rule
  if (s.contains("properties")) {
    if (!s["properties"].is_object()) bad(path, "'properties' must be an object");
    for (auto& [key, sub] : s["properties"].items())
      props.emplace_back(key, visit(sub, hint + "-" + key, path + "/properties/" + key));
  }
  std::string extra;  // the additional properties' value rule; empty: none allowed
  if (!s.contains("additionalProperties")) {
    extra = prim("value");
  } else if (const Json& a = s["additionalProperties"]; a.is_boolean()) {
    extra = a.get<bool>() ? prim("value") : "";
  } else {
    extra = visit(a, hint + "-additional", path + "/additionalProperties");
  }
  for (const auto& r : required) {
    bool listed = false;
    for (const auto& p : props) listed = listed || p.first == r;
    if (listed) continue;
    if (extra.empty())
      bad(path,
          fmt::format("required property '{}' is neither listed nor allowed as additional", r));
    props.emplace_back(r, extra);
  }
  const std::string sp = prim("space");
  auto e = [](const std::string& x) { return x.empty() ? std::string("\"\"") : x; };
  std::string tail_first, tail;
  if (!extra.empty()) {
    std::vector<std::string> keys;
    for (const auto& p : props) keys.push_back(p.first);
    std::string akv =
        add(hint + "-additional-kv",
            fmt::format("{} \":\" {} {}", key_not_in(keys, hint + "-key"), sp, extra));
    tail_first = fmt::format("( {} ( \",\" {} {} )* )?", akv, sp, akv);
    tail = fmt::format("( \",\" {} {} )*", sp, akv);
  }
  for (size_t i = props.size(); i-- > 0;) {
    const auto& [key, value] = props[i];
    std::string kv =
        add(hint + "-" + key + "-kv",
            fmt::format("\"{}\" {} \":\" {} {}", gbnf_literal(Json(key).dump()), sp, sp, value));
    bool req = required.count(key) > 0;
    std::string first = kv + " " + tail + (req ? "" : " | " + e(tail_first));
    std::string later = fmt::format("\",\" {} {} {}", sp, kv, tail) + (req ? "" : " | " + e(tail));
    tail_first = add(hint + "-from-" + key, first);
    tail = add(hint + "-after-" + key, later);
  }
  return fmt::format("\"{{\" {} {} \"}}\" {}", sp, e(tail_first), sp);
}

// A JSON string (its quotes included) whose decoded value is none of `keys`:
// a trie of the keys, where each node may diverge by a character outside its
// children, or end if it is not a key itself.
std::string Converter::key_not_in(const std::vector<std::string>& keys, const std::string& hint) {
  struct Node {
    std::map<uint32_t, size_t> kids;
    bool key = false;
  };
  std::vector<Node> trie(1);
  for (const auto& k : keys) {
    size_t t = 0;
    for (size_t i = 0; i < k.size();) {
      auto c = static_cast<unsigned char>(k[i]);
      int len = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
      uint32_t cp = len == 1 ? c : c & (0x7Fu >> len);
      for (int b = 1; b < len && i + b < k.size(); ++b)
        cp = (cp << 6) | (static_cast<unsigned char>(k[i + b]) & 0x3F);
      i += len;
      auto [it, fresh_kid] = trie[t].kids.emplace(cp, trie.size());
      if (fresh_kid) trie.emplace_back();
      t = it->second;
    }
    trie[t].key = true;
  }
  std::vector<std::string> names(trie.size());
  for (auto& n : names) n = fresh(hint);
  const std::string quote = "\"\\\"\"";
  for (size_t t = 0; t < trie.size(); ++t) {
    std::vector<std::pair<uint32_t, uint32_t>> kids;
    for (auto& [cp, _] : trie[t].kids) kids.emplace_back(cp, cp);
    std::string body = fmt::format("{} {}* {}", json_chars_gbnf(make_class(kids, true).ranges),
                                   prim("char"), quote);
    for (auto& [cp, child] : trie[t].kids)
      body += fmt::format(" | {} {}", json_chars_gbnf({{cp, cp}}), names[child]);
    if (!trie[t].key) body += " | " + quote;
    rules_.emplace_back(names[t], body);
  }
  return add(hint, fmt::format("{} {} {}", quote, names[0], prim("space")));
}

}  // namespace

std::string schema_to_gbnf(const nlohmann::ordered_json& schema) {
  return Converter(schema).run();
}

std::string schema_to_gbnf(const nlohmann::json& schema) {
  return Converter(nlohmann::ordered_json::parse(schema.dump())).run();
}

std::string schema_to_gbnf(std::string_view schema_text) {
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(schema_text);
  } catch (const std::exception& e) {
    fail("json schema: not valid JSON: {}", e.what());
  }
  return Converter(j).run();
}

std::string json_object_gbnf() {
  return schema_to_gbnf(nlohmann::ordered_json{{"type", "object"}});
}

}  // namespace lr::grammar
