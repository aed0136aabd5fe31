// Embeddings (POST /v1/embeddings, llama.cpp's --embedding): a text's
// hidden states after the last layer and the output norm, pooled over its
// tokens (their mean, or the last token's) and scaled to unit length.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/cpu/cpu.h"
#include "model/weights.h"

namespace lr {

enum class Pooling { Mean, Last };
// "mean" | "last"; throws lr::Error naming the accepted values.
Pooling parse_pooling(const std::string& name);

class Embedder {
 public:
  // Texts of up to ctx tokens, on n_threads CPU threads (the fast path's layers).
  Embedder(std::shared_ptr<const Weights> w, int ctx, int n_threads);
  // [dim], unit length. Throws lr::Error for no tokens, more than ctx, or an id outside the
  // vocabulary.
  std::vector<float> embed(const std::vector<int32_t>& tokens, Pooling pooling);
  int ctx() const { return ctx_; }

 private:
  std::shared_ptr<const Weights> w_;
  int ctx_;
  std::unique_ptr<LayerRunner> layers_;
  std::mutex mu_;  // one text at a time: the runner keeps one cache
};

}  // namespace lr
