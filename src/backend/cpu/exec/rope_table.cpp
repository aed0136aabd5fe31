#include "backend/cpu/exec/rope_table.h"

#include <cmath>

#include "model/scalar_ops.h"

namespace lr::cpu {

RopeTable::RopeTable(const Config& c, int ctx, int set) : half(c.head_dim / 2) {
  const std::vector<double> inv = scalar::rope_inv_freq(c, set, ctx);
  const double mscale = scalar::rope_mscale(c, set);
  cos.resize(size_t(ctx) * size_t(half));
  sin.resize(size_t(ctx) * size_t(half));
  for (int p = 0; p < ctx; ++p)
    for (int i = 0; i < half; ++i) {
      const double a = double(p) * inv[size_t(i)];
      const double m =
          inv[size_t(i)] == 0 ? 1.0 : mscale;  // pairs that do not turn stay as they are
      cos[size_t(p) * half + i] = float(std::cos(a) * m);
      sin[size_t(p) * half + i] = float(std::sin(a) * m);
    }
}

void RopeTable::apply(float* x, int n_heads, int head_dim, int pos) const {
  const float* cs = &cos[size_t(pos) * half];
  const float* sn = &sin[size_t(pos) * half];
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + h * head_dim;
    for (int i = 0; i < half; ++i) {
      float a = v[2 * i], b = v[2 * i + 1];
      v[2 * i] = a * cs[i] - b * sn[i];
      v[2 * i + 1] = a * sn[i] + b * cs[i];
    }
  }
}

void RopeTable::apply_rows(float* x, int64_t r0, int64_t r1, int head_dim, int pos) const {
  const float* cs = &cos[size_t(pos) * half];
  const float* sn = &sin[size_t(pos) * half];
  for (int64_t r = r0; r < r1; r += 2) {
    const int i = int(r % head_dim) / 2;
    const float a = x[r], b = x[r + 1];
    x[r] = a * cs[i] - b * sn[i];
    x[r + 1] = a * sn[i] + b * cs[i];
  }
}

}  // namespace lr::cpu
