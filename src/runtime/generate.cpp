#include "runtime/generate.h"

#include <chrono>

#include "core/error.h"

namespace lr {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

GenerateResult generate(Backend& backend, const std::vector<int32_t>& prompt, int n_predict,
                        Sampler& sampler, const std::set<int32_t>& stop,
                        const std::function<void(int32_t)>& on_token) {
  if (prompt.empty()) fail("the prompt is empty (nothing to condition on)");
  const int vocab = backend.weights().cfg.vocab;
  std::vector<float> logits(static_cast<size_t>(vocab));
  std::vector<int32_t> history = prompt;
  GenerateResult r;

  auto t0 = std::chrono::steady_clock::now();
  backend.forward(prompt.data(), int(prompt.size()), logits.data(), false);
  r.prefill_s = seconds_since(t0);

  t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n_predict; ++i) {
    int32_t next = sampler.sample(logits.data(), vocab, history);
    if (stop.count(next)) {
      r.stopped = true;
      break;
    }
    r.tokens.push_back(next);
    history.push_back(next);
    if (on_token) on_token(next);
    if (i + 1 == n_predict || backend.n_past() >= backend.ctx()) break;
    backend.forward(&next, 1, logits.data(), false);
    ++r.n_decode;
  }
  r.decode_s = seconds_since(t0);
  return r;
}

}  // namespace lr
