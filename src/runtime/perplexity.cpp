#include "runtime/perplexity.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace lr {

namespace {

// -log softmax(logits)[target], in double.
double nll_of(const float* logits, int vocab, int32_t target) {
  float mx = *std::max_element(logits, logits + vocab);
  double sum = 0;
  for (int i = 0; i < vocab; ++i) sum += std::exp(double(logits[i]) - mx);
  return std::log(sum) - (double(logits[target]) - mx);
}

}  // namespace

PerplexityResult perplexity(Backend& backend, const std::vector<int32_t>& tokens,
                            const PerplexityOptions& opt, const PerplexityProgress& progress) {
  if (opt.ctx < 4) fail("perplexity context must be at least 4 tokens (got {})", opt.ctx);
  if (opt.ctx > backend.ctx())
    fail("perplexity context {} exceeds the session's context {}", opt.ctx, backend.ctx());
  int total = int(tokens.size() / size_t(opt.ctx));
  if (total == 0)
    fail("the text has {} tokens, fewer than one window of {} (use a smaller --ctx)",
         tokens.size(), opt.ctx);
  if (opt.max_chunks > 0) total = std::min(total, opt.max_chunks);
  if (opt.add_bos && opt.bos < 0) fail("perplexity: BOS requested but the vocabulary has none");

  const int vocab = backend.weights().cfg.vocab;
  const int first = opt.score_all ? 0 : opt.ctx / 2;
  std::vector<float> logits(size_t(opt.ctx) * vocab);
  std::vector<int32_t> window(size_t(opt.ctx));
  double nll = 0, nll2 = 0;
  int64_t count = 0;
  PerplexityResult r;
  for (int c = 0; c < total; ++c) {
    auto begin = tokens.begin() + long(c) * opt.ctx;
    std::copy(begin, begin + opt.ctx, window.begin());
    if (opt.add_bos) window[0] = opt.bos;
    backend.rewind(0);
    if (opt.decode) {
      // The unscored prefix as one prompt, then every scored position one
      // token at a time: what a chat turn does after its prompt.
      backend.forward(window.data(), first + 1, &logits[size_t(first) * vocab], false);
      for (int j = first + 1; j < opt.ctx - 1; ++j)
        backend.forward(&window[size_t(j)], 1, &logits[size_t(j) * vocab], false);
    } else {
      backend.forward(window.data(), opt.ctx, logits.data(), true);
    }
    for (int j = first; j < opt.ctx - 1; ++j) {
      double v = nll_of(&logits[size_t(j) * vocab], vocab, *(begin + j + 1));
      nll += v;
      nll2 += v * v;
      ++count;
    }
    r.chunks = c + 1;
    if (progress) progress(c + 1, total, std::exp(nll / double(count)));
  }
  r.scored = count;
  r.mean_nll = nll / double(count);
  r.ppl = std::exp(r.mean_nll);
  double var = nll2 / double(count) - r.mean_nll * r.mean_nll;
  r.ppl_err = var > 0 && count > 1 ? std::sqrt(var / double(count - 1)) * r.ppl : 0;
  return r;
}

}  // namespace lr
