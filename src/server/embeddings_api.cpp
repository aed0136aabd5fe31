#include "server/embeddings_api.h"

#include <fmt/format.h>

#include <cstring>
#include <limits>

#include "server/openai.h"

namespace lr::server {

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw ApiError(400, message, param);
}

constexpr size_t kMaxInputs = 2048;  // OpenAI's limit per request

std::vector<int32_t> token_ids(const nlohmann::json& a) {
  std::vector<int32_t> ids;
  for (const auto& t : a) {
    if (!t.is_number_integer()) bad("input", "'input' token arrays must hold integers");
    ids.push_back(
        int32_t(std::clamp<int64_t>(t.get<int64_t>(), -1, std::numeric_limits<int32_t>::max())));
  }
  if (ids.empty()) bad("input", "'input' must not hold an empty token array");
  return ids;
}

std::string base64(const std::vector<float>& v) {
  static const char* const kAbc =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes(v.size() * 4, '\0');  // x86-64: floats are little-endian already
  std::memcpy(bytes.data(), v.data(), bytes.size());
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const uint32_t b0 = uint8_t(bytes[i]), b1 = i + 1 < bytes.size() ? uint8_t(bytes[i + 1]) : 0,
                   b2 = i + 2 < bytes.size() ? uint8_t(bytes[i + 2]) : 0;
    const uint32_t w = b0 << 16 | b1 << 8 | b2;
    out += kAbc[w >> 18 & 63];
    out += kAbc[w >> 12 & 63];
    out += i + 1 < bytes.size() ? kAbc[w >> 6 & 63] : '=';
    out += i + 2 < bytes.size() ? kAbc[w & 63] : '=';
  }
  return out;
}

}  // namespace

EmbeddingRequest parse_embedding_request(const std::string& body) {
  const nlohmann::json j = parse_json_body(body);
  EmbeddingRequest r;
  if (!j.contains("input") || j["input"].is_null()) bad("input", "'input' is required");
  const nlohmann::json& in = j["input"];
  if (in.is_string()) {
    r.texts.push_back(in.get<std::string>());
  } else if (in.is_array() && !in.empty() && in[0].is_number_integer()) {
    r.ids.push_back(token_ids(in));
  } else if (in.is_array() && !in.empty()) {
    if (in.size() > kMaxInputs)
      bad("input", fmt::format("'input' takes at most {} inputs", kMaxInputs));
    for (const auto& x : in) {
      if (x.is_string())
        r.texts.push_back(x.get<std::string>());
      else if (x.is_array())
        r.ids.push_back(token_ids(x));
      else
        bad("input", "'input' must be a string, an array of strings, or token id arrays");
    }
    if (!r.texts.empty() && !r.ids.empty()) bad("input", "'input' mixes strings and token arrays");
  } else {
    bad("input", "'input' must be a non-empty string, array of strings, or token id arrays");
  }
  for (const std::string& t : r.texts)
    if (t.empty()) bad("input", "'input' must not hold an empty string");
  const std::string fmt_ = j.value("encoding_format", std::string("float"));
  if (j.contains("encoding_format") && !j["encoding_format"].is_null() &&
      !j["encoding_format"].is_string())
    bad("encoding_format", "'encoding_format' must be \"float\" or \"base64\"");
  if (fmt_ != "float" && fmt_ != "base64")
    bad("encoding_format",
        fmt::format("'encoding_format' is '{}'; expected float or base64", fmt_));
  r.base64 = fmt_ == "base64";
  if (j.contains("dimensions") && !j["dimensions"].is_null())
    bad("dimensions", "'dimensions' is not supported: the embedding is the model's width");
  return r;
}

nlohmann::json embedding_body(const std::vector<std::vector<float>>& vectors, bool b64,
                              const std::string& model, int prompt_tokens) {
  nlohmann::json data = nlohmann::json::array();
  for (size_t i = 0; i < vectors.size(); ++i) {
    nlohmann::json e = {{"object", "embedding"}, {"index", i}};
    if (b64)
      e["embedding"] = base64(vectors[i]);
    else
      e["embedding"] = vectors[i];
    data.push_back(std::move(e));
  }
  return {{"object", "list"},
          {"data", data},
          {"model", model},
          {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}};
}

}  // namespace lr::server
