// Tokenizer::from_hf_json: HuggingFace tokenizer.json (+ tokenizer_config.json).
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"

namespace lr {

namespace {

using json = nlohmann::json;

json read_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open", path);
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return json::parse(ss.str());
  } catch (const json::exception& e) {
    fail("{}: invalid JSON: {}", path, e.what());
  }
}

bool is_type(const json& j, const char* type) {
  return j.is_object() && j.contains("type") && j["type"] == type;
}

// Calls fn on every component of a (possibly Sequence) pre-tokenizer / normalizer
// / decoder object.
template <typename Fn>
void for_each_component(const json& j, Fn&& fn) {
  if (!j.is_object()) return;
  if (is_type(j, "Sequence")) {
    for (const char* key : {"pretokenizers", "normalizers", "decoders", "processors"}) {
      if (j.contains(key) && j[key].is_array())
        for (const json& c : j[key]) for_each_component(c, fn);
    }
    return;
  }
  fn(j);
}

std::string quote_regex(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

// "content" of a tokenizer_config.json token entry (a string or an AddedToken object).
std::string token_content(const json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string())
    return j["content"].get<std::string>();
  return {};
}

// The file's vocabulary: id -> text and score, with added tokens, holes
// filled as unused tokens, and each token's type.
struct HfVocab {
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  int64_t unk = -1;
};

HfVocab read_vocab(const std::string& path, const json& root, const json& model,
                   const std::string& mtype) {
  auto bad = [&](const std::string& what) -> void { fail("{}: {}", path, what); };
  HfVocab v;
  std::vector<bool> have;
  auto put = [&](int64_t id, const std::string& text, float score) {
    if (id < 0 || id > 16'000'000) bad(fmt::format("token id {} out of range", id));
    if (static_cast<size_t>(id) >= v.tokens.size()) {
      v.tokens.resize(id + 1);
      v.scores.resize(id + 1, 0.0f);
      have.resize(id + 1, false);
    }
    v.tokens[id] = text;
    v.scores[id] = score;
    have[id] = true;
  };
  if (!model.contains("vocab")) bad("missing 'model.vocab'");
  const json& jv = model["vocab"];
  if (mtype == "BPE") {
    if (!jv.is_object()) bad("'model.vocab' must be an object of token -> id");
    for (auto it = jv.begin(); it != jv.end(); ++it) {
      if (!it.value().is_number_integer())
        bad(fmt::format("'model.vocab' id of '{}' is not an integer", it.key()));
      put(it.value().get<int64_t>(), it.key(), 0.0f);
    }
  } else if (mtype == "Unigram") {
    if (!jv.is_array()) bad("'model.vocab' must be an array of [piece, score]");
    for (size_t i = 0; i < jv.size(); ++i) {
      const json& e = jv[i];
      if (!e.is_array() || e.size() != 2 || !e[0].is_string() || !e[1].is_number())
        bad(fmt::format("'model.vocab'[{}] is not [piece, score]", i));
      put(static_cast<int64_t>(i), e[0].get<std::string>(), e[1].get<float>());
    }
  } else {
    bad(fmt::format("model type '{}' is not supported (expected BPE or Unigram)", mtype));
  }
  std::vector<std::pair<int64_t, bool>> added;  // id, special
  if (root.contains("added_tokens") && root["added_tokens"].is_array()) {
    for (const json& a : root["added_tokens"]) {
      if (!a.is_object() || !a.contains("id") || !a.contains("content"))
        bad("malformed 'added_tokens' entry");
      const int64_t id = a["id"].get<int64_t>();
      const float keep =
          (id >= 0 && static_cast<size_t>(id) < v.scores.size()) ? v.scores[id] : 0.0f;
      put(id, a["content"].get<std::string>(), keep);
      added.emplace_back(id, a.value("special", false));
    }
  }
  v.types.assign(v.tokens.size(), static_cast<int32_t>(TokenType::Normal));
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    if (!have[i]) {  // a hole in the id range
      v.tokens[i] = fmt::format("<lowrank_unused_{}>", i);
      v.types[i] = static_cast<int32_t>(TokenType::Unused);
    }
  }
  return v;
}

// Types the file implies: byte tokens (<0x..> under byte fallback), added
// tokens (control when special), the unknown token.
void mark_types(HfVocab& v, const json& root, const json& model, const std::string& mtype,
                bool byte_level) {
  const bool byte_fallback = model.value("byte_fallback", false) || mtype == "Unigram";
  if (byte_fallback && !byte_level) {
    for (size_t i = 0; i < v.tokens.size(); ++i) {
      const std::string& t = v.tokens[i];
      if (t.size() == 6 && t.starts_with("<0x") && t.back() == '>' &&
          std::isxdigit(static_cast<unsigned char>(t[3])) &&
          std::isxdigit(static_cast<unsigned char>(t[4])))
        v.types[i] = static_cast<int32_t>(TokenType::Byte);
    }
  }
  if (mtype == "Unigram" && model.contains("unk_id") && model["unk_id"].is_number_integer()) {
    v.unk = model["unk_id"].get<int64_t>();
  } else if (model.contains("unk_token") && model["unk_token"].is_string()) {
    auto it = std::find(v.tokens.begin(), v.tokens.end(), model["unk_token"].get<std::string>());
    if (it != v.tokens.end()) v.unk = it - v.tokens.begin();
  }
  if (root.contains("added_tokens") && root["added_tokens"].is_array())
    for (const json& a : root["added_tokens"])
      v.types[size_t(a["id"].get<int64_t>())] = static_cast<int32_t>(
          a.value("special", false) ? TokenType::Control : TokenType::UserDefined);
  if (v.unk >= 0 && static_cast<size_t>(v.unk) < v.types.size())
    v.types[size_t(v.unk)] = static_cast<int32_t>(TokenType::Unknown);
}

// Merges ("a b" strings, or ["a", "b"] pairs in newer files).
std::vector<std::string> read_merges(const std::string& path, const json& model,
                                     const std::string& mtype) {
  std::vector<std::string> merges;
  if (mtype != "BPE" || !model.contains("merges") || !model["merges"].is_array()) return merges;
  for (const json& m : model["merges"]) {
    if (m.is_string())
      merges.push_back(m.get<std::string>());
    else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string())
      merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
    else
      fail("{}: malformed entry in 'model.merges'", path);
  }
  return merges;
}

// A byte-level BPE (GPT-2 style): the merges and the pre-tokenizer's split patterns.
void byte_level_bpe(VocabSpec& s, const std::string& path, const json& root, const json& model,
                    std::vector<std::string> merges) {
  s.model = "gpt2";
  s.pre = "hf-json";
  s.merges = std::move(merges);
  s.ignore_merges = model.value("ignore_merges", false);
  for_each_component(root.value("pre_tokenizer", json()), [&](const json& c) {
    const std::string t = c.value("type", std::string());
    if (t == "ByteLevel") {
      if (c.value("use_regex", true)) {
        bool known;
        for (auto& p : PreTokenizer::patterns_for("gpt2", &known)) s.pre_patterns.push_back(p);
      }
    } else if (t == "Digits") {
      s.pre_patterns.push_back(c.value("individual_digits", false) ? R"(\p{N})" : R"(\p{N}+)");
    } else if (t == "Split") {
      const json& pat = c.value("pattern", json());
      if (pat.contains("Regex"))
        s.pre_patterns.push_back(pat["Regex"].get<std::string>());
      else if (pat.contains("String"))
        s.pre_patterns.push_back(quote_regex(pat["String"].get<std::string>()));
      else
        fail("{}: Split pre-tokenizer without a pattern", path);
    } else {
      fail("{}: pre_tokenizer '{}' is not supported", path, t);
    }
  });
  if (s.pre_patterns.empty()) s.pre_patterns.push_back(R"([\s\S]+)");  // no split at all
}

// SentencePiece-style: a merge of rank r scores -r, so the greedy
// highest-score merge replays the merge order; the space prefix from the
// normalizer or the Metaspace pre-tokenizer.
void sentencepiece(VocabSpec& s, const std::string& path, const json& root, const HfVocab& v,
                   const std::string& mtype, const std::vector<std::string>& merges) {
  s.model = "llama";
  s.pre = "default";
  s.sentencepiece_default_ids = false;
  std::vector<float> sc(v.tokens.size(), mtype == "Unigram" ? 0.0f : -1e9f);
  if (mtype == "Unigram") sc = v.scores;
  std::unordered_map<std::string, int32_t> index;
  for (size_t i = 0; i < v.tokens.size(); ++i) index.emplace(v.tokens[i], static_cast<int32_t>(i));
  for (size_t r = 0; r < merges.size(); ++r) {
    const std::string& m = merges[r];
    const size_t sp = m.find(' ', 1);
    if (sp == std::string::npos) fail("{}: malformed merge '{}'", path, m);
    auto it = index.find(m.substr(0, sp) + m.substr(sp + 1));
    if (it != index.end()) sc[it->second] = std::max(sc[it->second], -static_cast<float>(r));
  }
  s.scores = std::move(sc);
  bool prefix = false;
  for_each_component(root.value("normalizer", json()), [&](const json& c) {
    if (is_type(c, "Prepend") && c.value("prepend", std::string()) == "\xE2\x96\x81") prefix = true;
  });
  for_each_component(root.value("pre_tokenizer", json()), [&](const json& c) {
    if (is_type(c, "Metaspace")) {
      const std::string scheme = c.value("prepend_scheme", std::string());
      if (scheme == "always" || scheme == "first" || c.value("add_prefix_space", false))
        prefix = true;
    }
  });
  s.add_space_prefix = prefix;
}

// BOS from the post-processor template, then tokenizer_config.json beside
// the file (BOS, EOS, add_bos_token, the chat template).
void special_tokens(VocabSpec& s, const std::string& path, const json& root) {
  for_each_component(root.value("post_processor", json()), [&](const json& c) {
    if (!is_type(c, "TemplateProcessing") || !c.contains("single") || !c["single"].is_array())
      return;
    const json& single = c["single"];
    if (!single.empty() && single[0].contains("SpecialToken")) {
      const std::string name = single[0]["SpecialToken"].value("id", std::string());
      auto it = std::find(s.tokens.begin(), s.tokens.end(), name);
      if (it != s.tokens.end()) {
        s.bos = it - s.tokens.begin();
        s.add_bos = true;
      }
    }
  });
  const auto cfg_path = std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  if (!std::filesystem::exists(cfg_path)) return;
  const json cfg = read_json(cfg_path.string());
  auto id_of = [&](const char* key) -> int64_t {
    if (!cfg.contains(key)) return -1;
    const std::string t = token_content(cfg[key]);
    auto it = std::find(s.tokens.begin(), s.tokens.end(), t);
    return it == s.tokens.end() ? -1 : it - s.tokens.begin();
  };
  if (int64_t b = id_of("bos_token"); b >= 0) s.bos = b;
  if (int64_t e = id_of("eos_token"); e >= 0) s.eos = e;
  if (cfg.contains("add_bos_token") && cfg["add_bos_token"].is_boolean())
    s.add_bos = cfg["add_bos_token"].get<bool>();
  if (!cfg.contains("chat_template")) return;
  const json& ct = cfg["chat_template"];
  if (ct.is_string()) {
    s.chat_template = ct.get<std::string>();
  } else if (ct.is_array()) {  // named templates: prefer "default"
    for (const json& e : ct)
      if (e.is_object() && e.value("name", std::string()) == "default")
        s.chat_template = e.value("template", std::string());
    if (s.chat_template.empty() && !ct.empty() && ct[0].is_object())
      s.chat_template = ct[0].value("template", std::string());
  }
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_hf_json(const std::string& path) {
  const json root = read_json(path);
  if (!root.is_object() || !root.contains("model") || !root["model"].is_object())
    fail("{}: missing object 'model'", path);
  const json& model = root["model"];
  const std::string mtype = model.value("type", std::string());
  HfVocab v = read_vocab(path, root, model, mtype);
  bool byte_level = false;
  for (const char* key : {"pre_tokenizer", "decoder"})
    for_each_component(root.value(key, json()), [&](const json& c) {
      if (is_type(c, "ByteLevel")) byte_level = true;
    });
  mark_types(v, root, model, mtype, byte_level);
  std::vector<std::string> merges = read_merges(path, model, mtype);
  VocabSpec s;
  s.source = path;
  s.unk = v.unk;
  if (byte_level) {
    if (mtype != "BPE") fail("{}: a byte-level pre-tokenizer needs a BPE model", path);
    byte_level_bpe(s, path, root, model, std::move(merges));
  } else {
    sentencepiece(s, path, root, v, mtype, merges);
  }
  s.tokens = std::move(v.tokens);
  s.types = std::move(v.types);
  special_tokens(s, path, root);
  return from_spec(std::move(s));
}

}  // namespace lr
