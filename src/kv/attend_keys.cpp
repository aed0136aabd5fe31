#include "kv/attend_keys.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/dtype.h"
#include "model/scalar_ops.h"

namespace lr::kv {

void attend_keys_reference(const KeyStream& ks, const Rows& V, const float* q, int g, int64_t j0,
                           int64_t j1, float scale, float* out) {
  const int d = ks.head_dim();
  const size_t n = size_t(j1 - j0);
  std::vector<float> keys(n * size_t(d)), values(n * size_t(d));
  for (int64_t j = j0; j < j1; ++j)
    reconstruct_row(V.fmt, V.row(j), d, &values[size_t(j - j0) * size_t(d)]);
  const DType kt = ks.rows().fmt.type;
  if (!ks.latent() && d % 32 == 0 && (kt == DType::Q8_0 || kt == DType::Q4_0)) {
    // As the kernels score q8_0 and q4_0 keys: each query head (rotated as the
    // keys are stored) rounded to q8_0 blocks (backend/cpu/kernels/
    // quant_scores.h), against the stored rows.
    std::vector<float> qr(q, q + int64_t(g) * d), scales(size_t(d / 32));
    std::vector<int8_t> codes(static_cast<size_t>(d));
    for (int h = 0; h < g; ++h) {
      float* r = &qr[size_t(h) * size_t(d)];
      if (ks.rotation()) hadamard(r, d, ks.rotation());
      quantize_q8_blocks(r, codes.data(), scales.data(), d);
      for (int i = 0; i < d; ++i) r[i] = float(codes[size_t(i)]) * scales[size_t(i / 32)];
    }
    ks.decode_rows(j0, j1, keys.data());
    return scalar::attend(qr.data(), g, d, keys.data(), values.data(), d, int64_t(n), scale, out);
  }
  for (int64_t j = j0; j < j1; ++j) ks.reconstruct(j, &keys[size_t(j - j0) * size_t(d)]);
  scalar::attend(q, g, d, keys.data(), values.data(), d, int64_t(n), scale, out);
}

}  // namespace lr::kv
