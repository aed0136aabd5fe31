#include "model/scalar_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace lr::scalar {

std::vector<double> rope_inv_freq(const Config& c, int set, int ctx) {
  std::vector<double> f(size_t(c.head_dim / 2), 0.0);  // pairs past the rotary dims: 0
  if (set == 2) return f;
  const int n = c.rotary_dims();
  const bool long_ctx = !c.rope_factors_long.empty() && ctx > c.rope_orig_ctx;
  const std::vector<float>& factors = long_ctx ? c.rope_factors_long : c.rope_freq_factors;
  for (int i = 0; i < n / 2; ++i) {
    if (set == 1) {
      f[size_t(i)] = std::pow(double(c.rope_theta_swa), -2.0 * i / n);
      continue;
    }
    f[size_t(i)] = std::pow(double(c.rope_theta), -2.0 * i / n) / double(c.rope_linear_factor);
    if (!factors.empty()) f[size_t(i)] /= double(factors[size_t(i)]);
  }
  return f;
}

double rope_mscale(const Config& c, int set) {
  return set == 0 ? double(c.rope_mscale) : 1.0;
}

void rope(float* x, int n_heads, int head_dim, int64_t pos, const std::vector<double>& inv_freq,
          double mscale) {
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + int64_t(h) * head_dim;
    for (int i = 0; i < head_dim / 2; ++i) {
      if (inv_freq[size_t(i)] == 0) continue;  // a pair past the rotary dims (or no RoPE)
      const double a = double(pos) * inv_freq[size_t(i)];
      const double cs = std::cos(a) * mscale, sn = std::sin(a) * mscale;
      const double x0 = v[2 * i], x1 = v[2 * i + 1];
      v[2 * i] = float(x0 * cs - x1 * sn);
      v[2 * i + 1] = float(x0 * sn + x1 * cs);
    }
  }
}

void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += double(x[i]) * double(x[i]);
  const double inv = 1.0 / std::sqrt(ss / double(n) + double(eps));
  for (int64_t i = 0; i < n; ++i) y[i] = float(double(x[i]) * inv * double(w[i]));
}

void silu_mul(float* g, const float* u, int64_t n) {
  for (int64_t i = 0; i < n; ++i) g[i] = float(silu(g[i]) * double(u[i]));
}

void gelu_mul(float* g, const float* u, int64_t n) {
  for (int64_t i = 0; i < n; ++i) g[i] = float(gelu_tanh(g[i]) * double(u[i]));
}

void gated(Activation act, float* g, const float* u, int64_t n) {
  if (act == Activation::Silu) return silu_mul(g, u, n);
  gelu_mul(g, u, n);
}

namespace {

// One query head over [j0, j1) in two passes (the maximum, then the sums).
void attend_head(const float* q, int d, const float* K, const float* V, int64_t stride, int64_t j0,
                 int64_t j1, double scale, double& m, double& l, std::vector<double>& acc) {
  std::vector<double> s(size_t(std::max<int64_t>(j1 - j0, 0)));
  m = -std::numeric_limits<double>::infinity();
  for (int64_t j = j0; j < j1; ++j) {
    double dot = 0;
    for (int i = 0; i < d; ++i) dot += double(q[i]) * double(K[j * stride + i]);
    s[size_t(j - j0)] = dot * scale;
    m = std::max(m, s[size_t(j - j0)]);
  }
  l = 0;
  acc.assign(size_t(d), 0.0);
  for (int64_t j = j0; j < j1; ++j) {
    const double p = std::exp(s[size_t(j - j0)] - m);
    l += p;
    for (int i = 0; i < d; ++i) acc[size_t(i)] += p * double(V[j * stride + i]);
  }
}

}  // namespace

void attend_partial(const float* q, int g, int d, const float* K, const float* V, int64_t stride,
                    int64_t j0, int64_t j1, float scale, float* m, float* l, float* acc) {
  std::vector<double> a;
  for (int h = 0; h < g; ++h) {
    double mh, lh;
    attend_head(q + int64_t(h) * d, d, K, V, stride, j0, j1, scale, mh, lh, a);
    m[h] = float(mh);
    l[h] = float(lh);
    for (int i = 0; i < d; ++i) acc[int64_t(h) * d + i] = float(a[size_t(i)]);
  }
}

void attend(const float* q, int g, int d, const float* K, const float* V, int64_t stride, int64_t n,
            float scale, float* out) {
  std::vector<double> a;
  for (int h = 0; h < g; ++h) {
    double mh, lh;
    attend_head(q + int64_t(h) * d, d, K, V, stride, 0, n, scale, mh, lh, a);
    for (int i = 0; i < d; ++i) out[int64_t(h) * d + i] = float(a[size_t(i)] / lh);
  }
}

}  // namespace lr::scalar
