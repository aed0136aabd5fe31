// POST /v1/embeddings, OpenAI's body: "input" (a string, an array of
// strings, an array of token ids, or an array of those), "encoding_format"
// ("float", or "base64": little-endian float32, as the openai client asks
// for by default), "model", "user", and "dimensions" (refused: the width is
// the model's).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace lr::server {

struct EmbeddingRequest {
  std::vector<std::string> texts;         // or ...
  std::vector<std::vector<int32_t>> ids;  // ... token ids, one entry per input
  bool base64 = false;
};
// Throws ApiError 400 naming the field.
EmbeddingRequest parse_embedding_request(const std::string& body);

// {"object": "list", "data": [{"object": "embedding", "index", "embedding"}], "model", "usage"}.
nlohmann::json embedding_body(const std::vector<std::vector<float>>& vectors, bool base64,
                              const std::string& model, int prompt_tokens);

}  // namespace lr::server
