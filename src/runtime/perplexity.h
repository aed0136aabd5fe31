// Perplexity over a token stream in non-overlapping windows of `ctx` tokens.
//
// Default protocol = llama.cpp's perplexity tool: the text is tokenized once
// (with BOS when the vocabulary adds one), each window's first token is
// replaced by BOS when add_bos, and only the second half of each window is
// scored (tokens ctx/2+1 .. ctx-1 predicted from their prefixes). With
// score_all every token after the first of each window is scored.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "backend/backend.h"

namespace lr {

struct PerplexityOptions {
  int ctx = 512;
  int max_chunks = -1;     // -1: all whole windows
  bool score_all = false;
  bool add_bos = true;
  int32_t bos = -1;
  bool decode = false;     // prompt = the unscored prefix, then one token per forward (the decode path)
};

struct PerplexityResult {
  double ppl = 0;
  double ppl_err = 0;      // one standard error of the ppl estimate
  int chunks = 0;
  int64_t scored = 0;      // tokens scored
  double mean_nll = 0;
};

using PerplexityProgress = std::function<void(int done, int total, double ppl_so_far)>;

PerplexityResult perplexity(Backend& backend, const std::vector<int32_t>& tokens,
                            const PerplexityOptions& opt, const PerplexityProgress& progress = {});

}  // namespace lr
