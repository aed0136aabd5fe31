// Prompt processing on the fast CPU path: chunks of up to max_batch() tokens
// run through every block as matrix-matrix products (low-rank maps as
// U (V X): the factorized prefill), blocked causal attention over the cache,
// K/V (or, in legacy mode, the latents) written into the cache once.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/cpu/session.h"

namespace lr::cpu {

class Prefill {
 public:
  Prefill(Session& s, ActivationObserver* observer);
  int max_batch() const { return batch_; }
  // Runs n <= max_batch() tokens at positions s.pos .. s.pos+n-1.
  void run(const int32_t* tokens, int n);
  // logits[i, :] = output(rms_norm(x[first + i])) for i < count, of the last run.
  void logits(int first, int count, float* out);

 private:
  void linear(const Linear& L, const float* X, float* Y, int n, float* latent = nullptr);
  void matmul_rows(const Matrix& W, const float* X, float* Y, int n);
  void rms_norm_rows(const float* x, const Matrix& w, float* y, int n);
  void observe(int layer, Site site, const float* X, int n, int dim);
  void attention_block(int l, int n);
  void attend(int l, int n);
  void mlp_block(int l, int n);

  Session& s_;
  ActivationObserver* observer_;
  int batch_ = 1;
  std::vector<float> x_;       // [batch, dim] residual stream
  std::vector<float> h_;       // [batch, dim] normed input / block output
  std::vector<float> q_, att_; // [batch, q_dim]
  std::vector<float> k_, v_;   // [batch, kv_dim]
  std::vector<float> g_, u_;   // [batch, ffn_dim]
  std::vector<float> scratch_; // [n_threads, group, head_dim + 2] attention accumulators
  std::vector<float> lr_tmp_;  // [batch, max rank] low-rank intermediate V X
};

}  // namespace lr::cpu
