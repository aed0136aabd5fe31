#include "backend/cpu/kernels/key_kernels.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/kernels/attention_kernels.h"
#include "backend/cpu/kernels/kernels_simd.h"
#include "backend/cpu/kernels/quant_scores.h"
#include "backend/cpu/kernels/stored_attention.h"
#include "core/error.h"
#include "core/half.h"

namespace lr::cpu {

namespace {

constexpr int kMaxHeadDim = 512;

using detail::hmax;
using detail::hsum;
using detail::load_f16x8;
using kv::BlockLayout;
using kv::unpack_codes;

inline float dot_f32(const float* a, const float* b, int n) {
  __m256 acc = _mm256_setzero_ps();
  int i = 0;
  for (; i + 8 <= n; i += 8)
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
  float s = hsum(acc);
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// An f16 row (the stored basis) dotted with an f32 vector.
inline float dot_f16(const uint16_t* h, const float* b, int n) {
  __m256 acc = _mm256_setzero_ps();
  int i = 0;
  for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(load_f16x8(h + i), _mm256_loadu_ps(b + i), acc);
  float s = hsum(acc);
  for (; i < n; ++i) s += f16_to_f32(h[i]) * b[i];
  return s;
}

// Scores of one block of 32 tokens for NH <= 3 query heads, the 12
// accumulators in registers: s_h[t] = base_h + sum_c w[h][c] code_c[t].
template <int NH>
void block32_scores(const BlockLayout& lay, const uint32_t* codes, const float* w, int ldw,
                    const float* base, float* s, int64_t lds) {
  __m256 acc[NH][4];
  for (int h = 0; h < NH; ++h)
    for (int k = 0; k < 4; ++k) acc[h][k] = _mm256_set1_ps(base[h]);
  alignas(32) float cf[32];
  uint8_t q8[32];
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (int c = 0; c < lay.channels(); ++c) {
    const int b = lay.bits[size_t(c)];
    const uint64_t off = lay.bit_off[size_t(c)];
    const uint32_t* cw = codes + off / 32;
    __m256 c0, c1, c2, c3;
    if (b == 1 || b == 2 || b == 4) {
      // Token t's code at bit t * b of the channel's words, 8 tokens per
      // shift-and-mask (8 * b <= 32 bits sit in one word).
      const __m256i mask = _mm256_set1_epi32((1 << b) - 1);
      const __m256i step = _mm256_slli_epi32(lane, b == 1 ? 0 : b == 2 ? 1 : 2);
      auto part = [&](int i) {
        const int bit = i * b;
        const __m256i sh = _mm256_add_epi32(step, _mm256_set1_epi32(bit % 32));
        return _mm256_cvtepi32_ps(
            _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(int(cw[bit / 32])), sh), mask));
      };
      c0 = part(0), c1 = part(8), c2 = part(16), c3 = part(24);
    } else if (b == 8) {
      const uint8_t* p = reinterpret_cast<const uint8_t*>(cw);
      auto part = [&](int i) {
        return _mm256_cvtepi32_ps(
            _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + i))));
      };
      c0 = part(0), c1 = part(8), c2 = part(16), c3 = part(24);
    } else {
      unpack_codes(codes, off, 32, b, q8);
      for (int t = 0; t < 32; ++t) cf[t] = float(q8[t]);
      c0 = _mm256_load_ps(cf), c1 = _mm256_load_ps(cf + 8), c2 = _mm256_load_ps(cf + 16),
      c3 = _mm256_load_ps(cf + 24);
    }
    for (int h = 0; h < NH; ++h) {
      const __m256 wv = _mm256_broadcast_ss(w + h * ldw + c);
      acc[h][0] = _mm256_fmadd_ps(wv, c0, acc[h][0]);
      acc[h][1] = _mm256_fmadd_ps(wv, c1, acc[h][1]);
      acc[h][2] = _mm256_fmadd_ps(wv, c2, acc[h][2]);
      acc[h][3] = _mm256_fmadd_ps(wv, c3, acc[h][3]);
    }
  }
  for (int h = 0; h < NH; ++h)
    for (int k = 0; k < 4; ++k) _mm256_storeu_ps(s + h * lds + 8 * k, acc[h][k]);
}

void latent_scores(const kv::KeyStream& ks, const float* prep, int g, int64_t blk, float* s,
                   int64_t lds) {
  const BlockLayout& layout = ks.layout();
  const int C = layout.channels(), pf = key_prep_floats(ks), d = ks.head_dim(),
            bt = ks.block_tokens();
  const uint8_t* B = ks.block(blk);
  const uint16_t* sm = reinterpret_cast<const uint16_t*>(B);
  const uint32_t* codes = reinterpret_cast<const uint32_t*>(B + 4 * C);
  // score_t = q.mean + sum_c q~_c m_c + sum_c (q~_c s_c) code_tc: the block's
  // scales and mins widened once, folded into per-head weights w and a base.
  thread_local std::vector<float> scale, mins, w, base;
  scale.resize(size_t(C));
  mins.resize(size_t(C));
  f16_to_f32_row(sm, scale.data(), C);
  f16_to_f32_row(sm + C, mins.data(), C);
  w.resize(size_t(g) * size_t(C));
  base.resize(size_t(g));
  for (int h = 0; h < g; ++h) {
    const float* qt = prep + size_t(h) * size_t(pf) + d;
    base[size_t(h)] = qt[C] + dot_f32(qt, mins.data(), C);
    float* wh = &w[size_t(h) * size_t(C)];
    for (int c = 0; c < C; ++c) wh[c] = qt[c] * scale[size_t(c)];
  }
  if (bt == 32) {
    for (int h0 = 0; h0 < g; h0 += 3) {
      const float* wh = &w[size_t(h0) * size_t(C)];
      float* sh = s + h0 * lds;
      switch (std::min(3, g - h0)) {
        case 1:
          block32_scores<1>(layout, codes, wh, C, &base[size_t(h0)], sh, lds);
          break;
        case 2:
          block32_scores<2>(layout, codes, wh, C, &base[size_t(h0)], sh, lds);
          break;
        default:
          block32_scores<3>(layout, codes, wh, C, &base[size_t(h0)], sh, lds);
          break;
      }
    }
    return;
  }
  // Any other block length: one channel's codes at a time.
  for (int h = 0; h < g; ++h) std::fill_n(s + h * lds, bt, base[size_t(h)]);
  uint8_t q8[256];
  for (int c = 0; c < C; ++c) {
    unpack_codes(codes, layout.bit_off[size_t(c)], bt, layout.bits[size_t(c)], q8);
    for (int h = 0; h < g; ++h) {
      const float wc = w[size_t(h) * size_t(C) + size_t(c)];
      for (int t = 0; t < bt; ++t) s[h * lds + t] += wc * float(q8[t]);
    }
  }
}

// Dimensions [d0, d0 + 32) of value row r as four vectors of 8, times
// *scale: f16 as stored (scale 1); q8_0 and q4_0 as their integer codes
// (q - 8 for q4_0), *scale the block's f16 scale.
template <DType T>
inline void load_value32(const uint8_t* r, int d0, __m256 v[4], float* scale) {
  if constexpr (T == DType::F16) {
    const uint16_t* h = reinterpret_cast<const uint16_t*>(r) + d0;
    for (int k = 0; k < 4; ++k) v[k] = load_f16x8(h + 8 * k);
    *scale = 1.f;
  } else if constexpr (T == DType::Q8_0) {
    const uint8_t* blk = r + (d0 / 32) * 34;
    uint16_t dh;
    std::memcpy(&dh, blk, 2);
    *scale = f16_to_f32(dh);
    for (int k = 0; k < 4; ++k)
      v[k] = _mm256_cvtepi32_ps(
          _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + 2 + 8 * k))));
  } else {
    static_assert(T == DType::Q4_0);
    const uint8_t* blk = r + (d0 / 32) * 18;
    uint16_t dh;
    std::memcpy(&dh, blk, 2);
    *scale = f16_to_f32(dh);
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
    const __m128i m4 = _mm_set1_epi8(15);
    const __m128i lo = _mm_and_si128(q, m4), hi = _mm_and_si128(_mm_srli_epi16(q, 4), m4);
    const __m256 eight = _mm256_set1_ps(8.f);
    auto widen = [&](__m128i x) {
      return _mm256_sub_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(x)), eight);
    };
    v[0] = widen(lo);  // values 0..15: the low nibbles
    v[1] = widen(_mm_srli_si128(lo, 8));
    v[2] = widen(hi);  // values 16..31: the high nibbles
    v[3] = widen(_mm_srli_si128(hi, 8));
  }
}

// acc_h = acc_h * c_h + sum_b p_h[b] V[b] for NH <= 3 heads, value rows of
// type T (row_bytes apart) read straight into registers, 32 dimensions (12
// accumulators) at a time; a block's scale is folded into p_h[b].
template <int NH, DType T>
void accumulate_rows(float* acc, int d, const float* c, const float* p, int64_t lds,
                     const uint8_t* V, uint64_t row_bytes, int nb) {
  for (int d0 = 0; d0 < d; d0 += 32) {
    __m256 a[NH][4];
    for (int h = 0; h < NH; ++h)
      for (int k = 0; k < 4; ++k)
        a[h][k] = _mm256_mul_ps(_mm256_loadu_ps(acc + h * d + d0 + 8 * k), _mm256_set1_ps(c[h]));
    for (int b = 0; b < nb; ++b) {
      __m256 vk[4];
      float sc;
      load_value32<T>(V + uint64_t(b) * row_bytes, d0, vk, &sc);
      for (int h = 0; h < NH; ++h) {
        const __m256 pb = _mm256_set1_ps(p[h * lds + b] * sc);
        for (int k = 0; k < 4; ++k) a[h][k] = _mm256_fmadd_ps(pb, vk[k], a[h][k]);
      }
    }
    for (int h = 0; h < NH; ++h)
      for (int k = 0; k < 4; ++k) _mm256_storeu_ps(acc + h * d + d0 + 8 * k, a[h][k]);
  }
}

template <int NH>
void accumulate(float* acc, int d, const float* c, const float* p, int64_t lds, const kv::Rows& V,
                int64_t j0, int nb) {
  switch (V.fmt.type) {
    case DType::F16:
      return accumulate_rows<NH, DType::F16>(acc, d, c, p, lds, V.row(j0), V.bytes, nb);
    case DType::Q8_0:
      return accumulate_rows<NH, DType::Q8_0>(acc, d, c, p, lds, V.row(j0), V.bytes, nb);
    case DType::Q4_0:
      return accumulate_rows<NH, DType::Q4_0>(acc, d, c, p, lds, V.row(j0), V.bytes, nb);
    default:
      LR_ASSERT(false);  // f32 rows take softmax_update
  }
}

// softmax_update with value rows of f16, q8_0 or q4_0 (head_dim a multiple
// of 32), rows [j0, j0 + nb) of V.
void softmax_update_rows(int g, int d, float* s, int64_t lds, int nb, const kv::Rows& V, int64_t j0,
                         float* m, float* l, float* acc) {
  using detail::exp_ps;
  float c[3];
  for (int h0 = 0; h0 < g; h0 += 3) {
    const int nh = std::min(3, g - h0);
    for (int i = 0; i < nh; ++i) {
      const int h = h0 + i;
      float* sh = s + h * lds;
      __m256 mx = _mm256_set1_ps(-INFINITY);
      int b = 0;
      for (; b + 8 <= nb; b += 8) mx = _mm256_max_ps(mx, _mm256_loadu_ps(sh + b));
      float bm = hmax(mx);
      for (; b < nb; ++b) bm = std::max(bm, sh[b]);
      c[i] = 1.f;  // rescale of what was accumulated under the old maximum
      if (bm > m[h]) {
        if (l[h] > 0.f) c[i] = std::exp(m[h] - bm);
        l[h] *= c[i];
        m[h] = bm;
      }
      const __m256 mh = _mm256_set1_ps(m[h]);
      __m256 sum = _mm256_setzero_ps();
      for (b = 0; b + 8 <= nb; b += 8) {
        const __m256 e = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(sh + b), mh));
        _mm256_storeu_ps(sh + b, e);
        sum = _mm256_add_ps(sum, e);
      }
      alignas(32) float part[8];
      _mm256_store_ps(part, sum);
      float total = 0.f;
      for (float x : part) total += x;
      for (; b < nb; ++b) total += (sh[b] = std::exp(sh[b] - m[h]));
      l[h] += total;
    }
    float* ah = acc + int64_t(h0) * d;
    const float* sh = s + h0 * lds;
    switch (nh) {
      case 1:
        accumulate<1>(ah, d, c, sh, lds, V, j0, nb);
        break;
      case 2:
        accumulate<2>(ah, d, c, sh, lds, V, j0, nb);
        break;
      default:
        accumulate<3>(ah, d, c, sh, lds, V, j0, nb);
        break;
    }
  }
}

}  // namespace

int key_prep_floats(const kv::KeyStream& ks) {
  return ks.head_dim() + (ks.latent() ? ks.layout().channels() + 1 : 0);
}

void prepare_queries(const kv::KeyStream& ks, const float* q, int g, float scale, float* prep) {
  const int pf = key_prep_floats(ks), d = ks.head_dim();
  for (int h = 0; h < g; ++h) {
    float* p = prep + size_t(h) * size_t(pf);
    for (int i = 0; i < d; ++i) p[i] = scale * q[size_t(h) * size_t(d) + size_t(i)];
    if (ks.rotation()) kv::hadamard(p, d, ks.rotation());  // the stored rows' space
    if (!ks.latent()) continue;
    float* qt = p + d;
    const int C = ks.layout().channels();
    if (ks.type() == kv::KeyType::Kivi2) {
      std::copy_n(p, d, qt);
      qt[C] = 0;
      continue;
    }
    if (!ks.basis()) {  // not fitted yet: every key is in the window
      std::fill_n(qt, C + 1, 0.f);
      continue;
    }
    const std::vector<uint16_t>& vt = ks.basis_rows();
    for (int c = 0; c < C; ++c) qt[c] = dot_f16(&vt[size_t(c) * size_t(d)], p, d);
    qt[C] = dot_f32(ks.mean().data(), p, d);
  }
}

void key_scores(const kv::KeyStream& ks, const float* prep, int g, int64_t j0, int64_t j1, float* s,
                int64_t lds) {
  LR_ASSERT(j0 >= 0 && j1 <= ks.size());
  const int pf = key_prep_floats(ks), d = ks.head_dim(), bt = ks.block_tokens();
  const int64_t compressed = ks.compressed();
  alignas(32) float row[kMaxHeadDim];
  int64_t j = j0;
  if (ks.latent()) {
    thread_local std::vector<float> tmp;
    while (j < std::min(j1, compressed)) {
      const int64_t blk = j / bt, b0 = blk * bt, e = std::min(j1, b0 + bt);
      if (j == b0 && e == b0 + bt) {
        latent_scores(ks, prep, g, blk, s + (j - j0), lds);
      } else {  // a partial block: score it whole, keep the wanted part
        tmp.resize(size_t(g) * size_t(bt));
        latent_scores(ks, prep, g, blk, tmp.data(), bt);
        for (int h = 0; h < g; ++h)
          std::copy(tmp.begin() + h * bt + (j - b0), tmp.begin() + h * bt + (e - b0),
                    s + h * lds + (j - j0));
      }
      j = e;
    }
  }
  for (; j < j1; ++j) {
    ks.decode_rows(j, j + 1, row);
    for (int h = 0; h < g; ++h)
      s[h * lds + (j - j0)] = dot_f32(prep + size_t(h) * size_t(pf), row, d);
  }
}

void attend_keys_partial(const kv::KeyStream& ks, const kv::Rows& V, const float* q, int g,
                         int64_t j0, int64_t j1, float scale, float* m, float* l, float* acc) {
  attend_keys_partial(ks.view(), V, q, g, j0, j1, scale, m, l, acc);
}

void attend_keys_partial(const kv::KeyView& view, const kv::Rows& V, const float* q, int g,
                         int64_t j0, int64_t j1, float scale, float* m, float* l, float* acc) {
  const kv::KeyStream& ks = *view.ks;
  const int64_t blocks = view.blocks;  // latent blocks below, f16 rows from here on
  const int d = ks.head_dim();
  for (int h = 0; h < g; ++h) {
    m[h] = -INFINITY;
    l[h] = 0.f;
    std::fill_n(acc + int64_t(h) * d, d, 0.f);
  }
  if (j1 <= j0) return;
  const bool latent = ks.latent();
  const int T =
      latent ? std::max(32, ks.block_tokens()) / ks.block_tokens() * ks.block_tokens() : 32;
  const DType vt_type = V.fmt.type;
  // Per-thread scratch: prepared queries, scores, a decoded tile of keys and
  // values, the queries rotated as the stored keys are.
  thread_local std::vector<float> prep, s, kt, vt, qr;
  if (ks.rotation()) {
    qr.assign(q, q + int64_t(g) * d);
    for (int h = 0; h < g; ++h) kv::hadamard(&qr[size_t(h) * size_t(d)], d, ks.rotation());
    q = qr.data();
  }
  if (!latent && stored_tiles(ks.rows().fmt.type, vt_type, d)) {
    attend_stored(ks.rows(), V, q, g, d, j0, j1, scale, m, l, acc);
    return rotate_back(V, g, d, acc);
  }
  prep.resize(size_t(g) * size_t(key_prep_floats(ks)));
  s.resize(size_t(g) * size_t(T));
  kt.resize(size_t(T) * size_t(d));
  vt.resize(size_t(T) * size_t(d));
  if (latent) prepare_queries(ks, q, g, scale, prep.data());
  const bool quant_keys =
      !latent &&
      (d % 32 == 0 && (ks.rows().fmt.type == DType::Q8_0 || ks.rows().fmt.type == DType::Q4_0));
  const bool coded_keys = latent || quant_keys;
  // q8_0 and q4_0 keys: the heads quantized once, scored in integers as the
  // tiles score them (quant_scores.h).
  thread_local QuantQueries qq;
  if (quant_keys) {
    qq.reset(g, d);
    for (int h = 0; h < g; ++h) qq.quantize(h, q + int64_t(h) * d);
  }
  for (int64_t jb = j0; jb < j1;) {
    const int64_t te = std::min(j1, (jb / T + 1) * T);
    const int nb = int(te - jb);
    if (!coded_keys && (vt_type == DType::F32 || vt_type == DType::F16)) {
      // f32 and f16 keys and values: a tile decoded, then the dense kernel
      // (the bits of f32 rows holding the same values)
      ks.decode_rows(jb, te, kt.data());
      const float* vr = reinterpret_cast<const float*>(V.row(jb));
      if (vt_type == DType::F16) {
        for (int b = 0; b < nb; ++b)
          kv::decode_row(vt_type, V.row(jb + b), d, &vt[size_t(b) * size_t(d)]);
        vr = vt.data();
      }
      attend_block(q, g, d, kt.data(), vr, d, nb, scale, m, l, acc);
      jb = te;
      continue;
    }
    if (latent && jb < blocks) {
      key_scores(ks, prep.data(), g, jb, std::min(te, blocks), s.data(), T);
      if (te > blocks) {  // a tile across the end of the blocks (block length < 32)
        const int64_t c = blocks;
        ks.decode_rows(c, te, kt.data());
        scores_tile(q, g, d, kt.data(), d, int(te - c), scale, &s[size_t(c - jb)], T);
      }
    } else if (quant_keys && ks.rows().fmt.type == DType::Q8_0) {
      quant_scores(qq.rows(), g, d, reinterpret_cast<const Q8Block*>(ks.rows().row(jb)),
                   int64_t(ks.rows().bytes / sizeof(Q8Block)), nb, scale, s.data(), T);
    } else if (quant_keys) {  // q4_0
      quant_scores(qq.rows(), g, d, reinterpret_cast<const Q4Block*>(ks.rows().row(jb)),
                   int64_t(ks.rows().bytes / sizeof(Q4Block)), nb, scale, s.data(), T);
    } else {
      ks.decode_rows(jb, te, kt.data());
      scores_tile(q, g, d, kt.data(), d, nb, scale, s.data(), T);
    }
    if (V.fmt.type == DType::F32) {
      softmax_update(g, d, s.data(), T, nb, reinterpret_cast<const float*>(V.row(jb)), d, m, l,
                     acc);
    } else if (d % 32 == 0) {  // f16, q8_0, q4_0 read into registers
      softmax_update_rows(g, d, s.data(), T, nb, V, jb, m, l, acc);
    } else {  // f16 rows of another length, decoded a tile at a time
      for (int b = 0; b < nb; ++b)
        kv::decode_row(V.fmt.type, V.row(jb + b), d, &vt[size_t(b) * size_t(d)]);
      softmax_update(g, d, s.data(), T, nb, vt.data(), d, m, l, acc);
    }
    jb = te;
  }
  rotate_back(V, g, d, acc);
}

}  // namespace lr::cpu
