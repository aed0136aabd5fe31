#include "runtime/embed.h"

#include <cmath>

#include "core/error.h"
#include "model/scalar_ops.h"

namespace lr {

Pooling parse_pooling(const std::string& name) {
  if (name == "mean") return Pooling::Mean;
  if (name == "last") return Pooling::Last;
  fail("unknown pooling '{}' (expected mean or last)", name);
}

Embedder::Embedder(std::shared_ptr<const Weights> w, int ctx, int n_threads)
    : w_(std::move(w)), ctx_(ctx) {
  BackendOptions o;
  o.ctx = ctx;
  o.cpu.n_threads = n_threads;
  layers_ = make_cpu_layer_runner(w_, o, /*panels=*/true);
}

std::vector<float> Embedder::embed(const std::vector<int32_t>& tokens, Pooling pooling) {
  const Config& c = w_->cfg;
  const int n = int(tokens.size());
  if (n == 0) fail("nothing to embed: the input has no tokens");
  if (n > ctx_) fail("the input has {} tokens; embeddings take at most {} (raise -c)", n, ctx_);
  std::vector<float> x(size_t(n) * size_t(c.dim));
  for (int t = 0; t < n; ++t) {
    const int32_t id = tokens[size_t(t)];
    if (id < 0 || id >= c.vocab)
      fail("token id {} is out of range for a vocabulary of {}", id, c.vocab);
    float* row = &x[size_t(t) * size_t(c.dim)];
    w_->tok_embd.row_to_f32(id, row);
    for (int i = 0; i < c.dim; ++i) row[i] *= c.embed_scale;
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    layers_->run(x.data(), n);
  }
  // The output norm of each pooled row, then the pool (as llama.cpp pools its t_embd).
  std::vector<double> sum(size_t(c.dim), 0.0);
  std::vector<float> h(size_t(c.dim));
  for (int t = pooling == Pooling::Last ? n - 1 : 0; t < n; ++t) {
    scalar::rms_norm(&x[size_t(t) * size_t(c.dim)], w_->out_norm.f32(), h.data(), c.dim, c.rms_eps);
    for (int i = 0; i < c.dim; ++i) sum[size_t(i)] += h[size_t(i)];
  }
  double norm = 0;
  for (double v : sum) norm += v * v;
  norm = std::sqrt(norm);
  std::vector<float> out(size_t(c.dim));
  for (int i = 0; i < c.dim; ++i) out[size_t(i)] = norm > 0 ? float(sum[size_t(i)] / norm) : 0.f;
  return out;
}

}  // namespace lr
