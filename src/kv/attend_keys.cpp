#include "kv/attend_keys.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "model/scalar_ops.h"

namespace lr::kv {

void attend_keys_reference(const KeyStream& ks, const Rows& V, const float* q, int g, int64_t j0,
                           int64_t j1, float scale, float* out) {
  const int d = ks.head_dim();
  const size_t n = size_t(j1 - j0);
  std::vector<float> keys(n * size_t(d)), values(n * size_t(d));
  for (int64_t j = j0; j < j1; ++j) {
    ks.reconstruct(j, &keys[size_t(j - j0) * size_t(d)]);
    reconstruct_row(V.fmt, V.row(j), d, &values[size_t(j - j0) * size_t(d)]);
  }
  scalar::attend(q, g, d, keys.data(), values.data(), d, int64_t(n), scale, out);
}

}  // namespace lr::kv
