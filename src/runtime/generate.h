// The generation loop: prefill the prompt, then sample one token at a time
// until n_predict tokens, a stop token, or a full context.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <vector>

#include "backend/backend.h"
#include "sampling/sampler.h"

namespace lr {

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated tokens (without the prompt, without the stop token)
  bool stopped = false;         // ended on a stop token
  double prefill_s = 0;
  double decode_s = 0;          // time of all decode steps (n_decode forwards)
  int n_decode = 0;             // single-token forwards run
};

// `on_token` is called for every generated token as soon as it is sampled.
GenerateResult generate(Backend& backend, const std::vector<int32_t>& prompt, int n_predict,
                        Sampler& sampler, const std::set<int32_t>& stop,
                        const std::function<void(int32_t)>& on_token = {});

}  // namespace lr
