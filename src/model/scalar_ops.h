// The model's operations in plain scalar code (double where it costs
// nothing), defined once: the reference forward pass, the scalar plan
// executor, the CPU kernels' scalar twins and every RoPE table call these.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "model/config.h"

namespace lr::scalar {

// RoPE: pair i of a head turns by pos * inv_freq[i] at position pos, with
// inv_freq[i] = theta^(-2i / rotary_dims) / linear_factor / freq_factor[i]
// (Llama 3's factors, or LongRoPE's short ones, or its long ones when the
// session's context `ctx` exceeds the model's original one) for
// i < rotary_dims / 2, and 0 for the pairs past them, which do not turn.
// Set 1: the windowed layers' (theta = rope_theta_swa, unscaled); set 2:
// none, every frequency 0 (Config::rope_set, plan.h Job::rope_set).
std::vector<double> rope_inv_freq(const Config& c, int set = 0, int ctx = 0);
// The magnitude the turned pairs are scaled by (LongRoPE's attention factor; set 0 only).
double rope_mscale(const Config& c, int set = 0);
// Rotates the pairs (x[2i], x[2i+1]) of n_heads consecutive heads, those
// that turn (inv_freq[i] != 0) scaled by mscale.
void rope(float* x, int n_heads, int head_dim, int64_t pos, const std::vector<double>& inv_freq,
          double mscale = 1.0);

// y = x / sqrt(mean(x^2) + eps) * w   (y may alias x)
void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps);

inline double silu(double x) {
  return x / (1.0 + std::exp(-x));
}
// g = silu(g) * u
void silu_mul(float* g, const float* u, int64_t n);
// GELU's tanh form: 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
inline double gelu_tanh(double x) {
  return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}
// g = gelu_tanh(g) * u
void gelu_mul(float* g, const float* u, int64_t n);
// g = act(g) * u
void gated(Activation act, float* g, const float* u, int64_t n);

// Softmax attention of g query heads q [g, d] that share one KV head over
// positions j in [j0, j1) (key j at K + j*stride, value j at V + j*stride),
// scores scale * q.k: the running maximum m[h], the sum l[h] of exp(score -
// m[h]) and the unnormalized output acc[h*d ..] (the split-attention
// partial; an empty range gives m = -inf, l = 0, acc = 0) ...
void attend_partial(const float* q, int g, int d, const float* K, const float* V, int64_t stride,
                    int64_t j0, int64_t j1, float scale, float* m, float* l, float* acc);
// ... and the normalized output out [g, d] over positions [0, n).
void attend(const float* q, int g, int d, const float* K, const float* V, int64_t stride, int64_t n,
            float scale, float* out);

}  // namespace lr::scalar
