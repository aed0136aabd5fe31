#include "backend/backend.h"

#include "core/error.h"

namespace lr {

Backend::Backend(std::shared_ptr<const Weights> w, int ctx) : weights_(std::move(w)), ctx_(ctx) {
  if (ctx <= 0) fail("context size must be positive (got {})", ctx);
}

void Backend::rewind(int n) {
  LR_ASSERT(n >= 0 && n <= n_past_);
  on_rewind(n);
  n_past_ = n;
}

void Backend::check_forward_args(const int32_t* tokens, int n) const {
  if (n <= 0) fail("forward: no tokens to run");
  if (int64_t(n_past_) + n > ctx_)
    fail("context is full: {} cached + {} new tokens exceed the context size {} (raise -c/--ctx)",
         n_past_, n, ctx_);
  for (int t = 0; t < n; ++t)
    if (tokens[t] < 0 || tokens[t] >= weights_->cfg.vocab)
      fail("token id {} is out of range for a vocabulary of {}", tokens[t], weights_->cfg.vocab);
}

}  // namespace lr
