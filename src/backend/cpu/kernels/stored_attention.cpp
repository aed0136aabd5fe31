// Attention over key and value rows stored as f16, q8_0 or q4_0 (the KV row
// formats, kv/row_codec.h) through the dense cache's tiles
// (attention_kernels.h attend_tiles): one row's range (attend_stored) and a
// prompt's rows together (key_kernels.h attend_keys_rows).
#include "backend/cpu/kernels/stored_attention.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "backend/cpu/kernels/attention_kernels.h"
#include "backend/cpu/kernels/key_kernels.h"
#include "backend/cpu/kernels/quant_scores.h"
#include "core/error.h"

namespace lr::cpu {

bool stored_tiles(DType k, DType v, int d) {
  auto ok = [d](DType t) {
    return t == DType::F16 || (d % 32 == 0 && (t == DType::Q8_0 || t == DType::Q4_0));
  };
  return ok(k) && ok(v);
}

namespace {

// Positions [j0, j1) of key and value rows of types EK and EV, in blocks of
// 32 from j0: the whole blocks through one attend_tiles call (converted in
// registers; the query quantized once for q8_0 and q4_0 keys); a part of a
// block (or every block where the tile does not apply) decoded into f32 rows
// (exact) for attend_block, or for q8_0 and q4_0 keys scored in integers as
// the tiles score them (quant_scores.h) and the values' f32 rows weighted by
// softmax_update. f16 keys: the bits attend_partial gives f32 rows holding
// the stored values.
template <typename EK, typename EV>
void attend_stored(const kv::Rows& K, const kv::Rows& V, const float* q, int g, int d, int64_t j0,
                   int64_t j1, float scale, float* m, float* l, float* acc) {
  const int64_t ks = int64_t(K.bytes / sizeof(EK)), vs = int64_t(V.bytes / sizeof(EV));
  int64_t jb = j0;
  if (attend_tile_ok(g, d)) {
    const int64_t whole = (j1 - j0) / 32 * 32;
    if (whole > 0)
      attend_tiles(q, 0, 1, g, d, reinterpret_cast<const EK*>(K.row(j0)), ks,
                   reinterpret_cast<const EV*>(V.row(j0)), vs, whole, scale, m, l, acc, 0);
    jb += whole;
  }
  if (jb >= j1) return;
  constexpr bool kQuantKeys = std::is_same_v<EK, Q8Block> || std::is_same_v<EK, Q4Block>;
  thread_local std::vector<float> kt, vt, s;
  thread_local QuantQueries qq;
  if constexpr (kQuantKeys) {  // the tiles' integer scores: a key scores the same in a part of a
                               // block as in a whole one
    qq.reset(g, d);
    for (int h = 0; h < g; ++h) qq.quantize(h, q + int64_t(h) * d);
    s.resize(size_t(g) * 32);
  }
  for (; jb < j1; jb += 32) {
    const int nb = int(std::min<int64_t>(32, j1 - jb));
    kt.resize(size_t(nb) * size_t(d));
    vt.resize(kt.size());
    for (int b = 0; b < nb; ++b)
      kv::decode_row(V.fmt.type, V.row(jb + b), d, &vt[size_t(b) * size_t(d)]);
    if constexpr (kQuantKeys) {
      quant_scores(qq.rows(), g, d, reinterpret_cast<const EK*>(K.row(jb)), ks, nb, scale, s.data(),
                   32);
      softmax_update(g, d, s.data(), 32, nb, vt.data(), d, m, l, acc);
    } else {
      for (int b = 0; b < nb; ++b)
        kv::decode_row(K.fmt.type, K.row(jb + b), d, &kt[size_t(b) * size_t(d)]);
      attend_block(q, g, d, kt.data(), vt.data(), d, nb, scale, m, l, acc);
    }
  }
}

// attend_keys_rows over stored rows (m, l, acc initialized): the blocks of
// 32 every row sees whole through attend_tiles for all the rows at once,
// the rest of each row's range as attend_stored continues it.
template <typename EK, typename EV>
void stored_rows(const kv::Rows& K, const kv::Rows& V, const float* q, int64_t q_stride, int n,
                 int g, int d, int64_t n0, bool causal, float scale, float* m, float* l, float* acc,
                 int64_t ml_stride) {
  const int64_t common = attend_tile_ok(g, d) ? n0 / 32 * 32 : 0;
  if (common > 0)
    attend_tiles(q, q_stride, n, g, d, reinterpret_cast<const EK*>(K.row(0)),
                 int64_t(K.bytes / sizeof(EK)), reinterpret_cast<const EV*>(V.row(0)),
                 int64_t(V.bytes / sizeof(EV)), common, scale, m, l, acc, ml_stride);
  for (int t = 0; t < n; ++t)
    attend_stored<EK, EV>(K, V, q + t * q_stride, g, d, common, n0 + (causal ? t : 0), scale,
                          m + t * ml_stride, l + t * ml_stride, acc + t * ml_stride * d);
}

template <typename EK>
void attend_stored_values(const kv::Rows& K, const kv::Rows& V, const float* q, int g, int d,
                          int64_t j0, int64_t j1, float scale, float* m, float* l, float* acc) {
  switch (V.fmt.type) {
    case DType::F16:
      return attend_stored<EK, uint16_t>(K, V, q, g, d, j0, j1, scale, m, l, acc);
    case DType::Q8_0:
      return attend_stored<EK, Q8Block>(K, V, q, g, d, j0, j1, scale, m, l, acc);
    default:
      LR_ASSERT(V.fmt.type == DType::Q4_0);
      return attend_stored<EK, Q4Block>(K, V, q, g, d, j0, j1, scale, m, l, acc);
  }
}

}  // namespace

void attend_stored(const kv::Rows& K, const kv::Rows& V, const float* q, int g, int d, int64_t j0,
                   int64_t j1, float scale, float* m, float* l, float* acc) {
  switch (K.fmt.type) {
    case DType::F16:
      return attend_stored_values<uint16_t>(K, V, q, g, d, j0, j1, scale, m, l, acc);
    case DType::Q8_0:
      return attend_stored_values<Q8Block>(K, V, q, g, d, j0, j1, scale, m, l, acc);
    default:
      LR_ASSERT(K.fmt.type == DType::Q4_0);
      return attend_stored_values<Q4Block>(K, V, q, g, d, j0, j1, scale, m, l, acc);
  }
}

namespace {

template <typename EK>
void stored_rows_values(const kv::Rows& K, const kv::Rows& V, const float* q, int64_t q_stride,
                        int n, int g, int d, int64_t n0, bool causal, float scale, float* m,
                        float* l, float* acc, int64_t ml_stride) {
  switch (V.fmt.type) {
    case DType::F16:
      return stored_rows<EK, uint16_t>(K, V, q, q_stride, n, g, d, n0, causal, scale, m, l, acc,
                                       ml_stride);
    case DType::Q8_0:
      return stored_rows<EK, Q8Block>(K, V, q, q_stride, n, g, d, n0, causal, scale, m, l, acc,
                                      ml_stride);
    default:
      LR_ASSERT(V.fmt.type == DType::Q4_0);
      return stored_rows<EK, Q4Block>(K, V, q, q_stride, n, g, d, n0, causal, scale, m, l, acc,
                                      ml_stride);
  }
}

}  // namespace

void rotate_back(const kv::Rows& V, int g, int d, float* acc) {
  if (V.fmt.rot)
    for (int h = 0; h < g; ++h) kv::hadamard(acc + int64_t(h) * d, d, V.fmt.rot);
}

void attend_keys_rows(const kv::KeyStream& ks, const kv::Rows& V, const float* q, int64_t q_stride,
                      int n, int g, int64_t n0, bool causal, float scale, float* m, float* l,
                      float* acc, int64_t ml_stride) {
  const int d = ks.head_dim();
  const DType kt = ks.rows().fmt.type;
  if (ks.latent() || !stored_tiles(kt, V.fmt.type, d)) {  // row by row
    for (int t = 0; t < n; ++t)
      attend_keys_partial(ks, V, q + t * q_stride, g, 0, n0 + (causal ? t : 0), scale,
                          m + t * ml_stride, l + t * ml_stride, acc + t * ml_stride * d);
    return;
  }
  thread_local std::vector<float> qr;  // the queries rotated as the stored keys are
  if (ks.rotation()) {
    qr.resize(size_t(n) * size_t(g) * size_t(d));
    for (int t = 0; t < n; ++t)
      for (int h = 0; h < g; ++h) {
        float* r = &qr[(size_t(t) * size_t(g) + size_t(h)) * size_t(d)];
        std::copy_n(q + t * q_stride + int64_t(h) * d, d, r);
        kv::hadamard(r, d, ks.rotation());
      }
    q = qr.data();
    q_stride = int64_t(g) * d;
  }
  for (int t = 0; t < n; ++t)
    for (int h = 0; h < g; ++h) {
      m[t * ml_stride + h] = -INFINITY;
      l[t * ml_stride + h] = 0.f;
      std::fill_n(acc + (t * ml_stride + h) * d, d, 0.f);
    }
  const kv::Rows& K = ks.rows();
  auto go = [&](auto key) {
    using EK = std::remove_const_t<std::remove_pointer_t<decltype(key)>>;
    stored_rows_values<EK>(K, V, q, q_stride, n, g, d, n0, causal, scale, m, l, acc, ml_stride);
  };
  if (kt == DType::F16)
    go(static_cast<const uint16_t*>(nullptr));
  else if (kt == DType::Q8_0)
    go(static_cast<const Q8Block*>(nullptr));
  else
    go(static_cast<const Q4Block*>(nullptr));
  for (int t = 0; t < n; ++t) rotate_back(V, g, d, acc + t * ml_stride * d);
}

}  // namespace lr::cpu
