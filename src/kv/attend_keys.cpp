#include "kv/attend_keys.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/half.h"

namespace lr::kv {

void attend_keys_reference(const KeyStream& ks, const uint16_t* V, const float* q, int g,
                           int64_t j0, int64_t j1, float scale, float* out) {
  const int d = ks.head_dim();
  std::vector<float> k(static_cast<size_t>(d));
  std::vector<double> sc(size_t(j1 - j0));
  for (int h = 0; h < g; ++h) {
    const float* qh = q + int64_t(h) * d;
    double mx = -INFINITY;
    for (int64_t j = j0; j < j1; ++j) {
      ks.reconstruct(j, k.data());
      double dot = 0;
      for (int i = 0; i < d; ++i) dot += double(qh[i]) * double(k[size_t(i)]);
      sc[size_t(j - j0)] = dot * scale;
      mx = std::max(mx, sc[size_t(j - j0)]);
    }
    std::vector<double> o(size_t(d), 0.0);
    double sum = 0;
    for (int64_t j = j0; j < j1; ++j) {
      const double w = std::exp(sc[size_t(j - j0)] - mx);
      sum += w;
      for (int i = 0; i < d; ++i) o[size_t(i)] += w * double(f16_to_f32(V[j * d + i]));
    }
    for (int i = 0; i < d; ++i) out[int64_t(h) * d + i] = float(o[size_t(i)] / sum);
  }
}

}  // namespace lr::kv
