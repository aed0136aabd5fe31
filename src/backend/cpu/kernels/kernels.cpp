// AVX2/FMA/F16C kernels: matrix-vector products (the decode hot path), norms,
// element-wise ops and bf16 conversion. Matrix-matrix products are in
// kernels_matmul.cpp.
#include "backend/cpu/kernels/kernels.h"

#include <immintrin.h>

#include <cmath>

#include "backend/cpu/kernels/kernels_simd.h"
#include "core/half.h"

namespace lr::cpu {

using namespace detail;

// ---------------------------------------------------------------------------
// matvec

namespace {

// y[r] = W[r] . x for r in [r0, r1), weights read through Fmt (f32 and f16;
// bf16 has its own kernel below). 4 rows at a time, 2 accumulators per row:
// each x vector feeds 4 FMAs.
template <class Fmt>
void matvec_rows(const typename Fmt::T* W, const float* x, float* y, int64_t cols, int64_t r0,
                 int64_t r1) {
  using T = typename Fmt::T;
  const int64_t c16 = cols & ~int64_t(15);
  const int64_t c8 = cols & ~int64_t(7);
  const int64_t ctail = cols - c8;
  const __m256i mask = tail_mask(ctail);
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) {
    const T* w0 = W + r * cols;
    const T* w1 = w0 + cols;
    const T* w2 = w1 + cols;
    const T* w3 = w2 + cols;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(),
           a3 = _mm256_setzero_ps();
    __m256 b0 = _mm256_setzero_ps(), b1 = _mm256_setzero_ps(), b2 = _mm256_setzero_ps(),
           b3 = _mm256_setzero_ps();
    // Prefetch the 4 rows four groups ahead (rows r + 16 .. r + 19, 4 * cols *
    // sizeof(T) bytes) into L2 at 4 * 16 * sizeof(T) bytes per iteration, as
    // the block kernels do: from DRAM, one group ahead into L1 left the f16
    // decode at 66% of the probe. Prefetches never fault, so running past the
    // end of W is harmless.
    const char* pf = reinterpret_cast<const char*>(w0 + 16 * cols);
    int64_t c = 0;
    for (; c < c16; c += 16) {
      for (int k = 0; k < int(sizeof(T)); ++k)
        _mm_prefetch(pf + c * int64_t(4 * sizeof(T)) + 64 * k, _MM_HINT_T1);
      const __m256 xa = _mm256_loadu_ps(x + c), xb = _mm256_loadu_ps(x + c + 8);
      a0 = _mm256_fmadd_ps(Fmt::load8(w0 + c), xa, a0);
      a1 = _mm256_fmadd_ps(Fmt::load8(w1 + c), xa, a1);
      a2 = _mm256_fmadd_ps(Fmt::load8(w2 + c), xa, a2);
      a3 = _mm256_fmadd_ps(Fmt::load8(w3 + c), xa, a3);
      b0 = _mm256_fmadd_ps(Fmt::load8(w0 + c + 8), xb, b0);
      b1 = _mm256_fmadd_ps(Fmt::load8(w1 + c + 8), xb, b1);
      b2 = _mm256_fmadd_ps(Fmt::load8(w2 + c + 8), xb, b2);
      b3 = _mm256_fmadd_ps(Fmt::load8(w3 + c + 8), xb, b3);
    }
    for (; c < c8; c += 8) {
      const __m256 xa = _mm256_loadu_ps(x + c);
      a0 = _mm256_fmadd_ps(Fmt::load8(w0 + c), xa, a0);
      a1 = _mm256_fmadd_ps(Fmt::load8(w1 + c), xa, a1);
      a2 = _mm256_fmadd_ps(Fmt::load8(w2 + c), xa, a2);
      a3 = _mm256_fmadd_ps(Fmt::load8(w3 + c), xa, a3);
    }
    if (c < cols) {
      const __m256 xa = _mm256_maskload_ps(x + c, mask);
      b0 = _mm256_fmadd_ps(Fmt::load_partial(w0 + c, ctail), xa, b0);
      b1 = _mm256_fmadd_ps(Fmt::load_partial(w1 + c, ctail), xa, b1);
      b2 = _mm256_fmadd_ps(Fmt::load_partial(w2 + c, ctail), xa, b2);
      b3 = _mm256_fmadd_ps(Fmt::load_partial(w3 + c, ctail), xa, b3);
    }
    const __m128 s = hsum4(_mm256_add_ps(a0, b0), _mm256_add_ps(a1, b1), _mm256_add_ps(a2, b2),
                           _mm256_add_ps(a3, b3));
    _mm_storeu_ps(y + r, s);
  }
  for (; r < r1; ++r) {
    const T* w0 = W + r * cols;
    __m256 a0 = _mm256_setzero_ps(), b0 = _mm256_setzero_ps();
    int64_t c = 0;
    for (; c < c16; c += 16) {
      a0 = _mm256_fmadd_ps(Fmt::load8(w0 + c), _mm256_loadu_ps(x + c), a0);
      b0 = _mm256_fmadd_ps(Fmt::load8(w0 + c + 8), _mm256_loadu_ps(x + c + 8), b0);
    }
    for (; c < c8; c += 8) a0 = _mm256_fmadd_ps(Fmt::load8(w0 + c), _mm256_loadu_ps(x + c), a0);
    if (c < cols)
      b0 = _mm256_fmadd_ps(Fmt::load_partial(w0 + c, ctail), _mm256_maskload_ps(x + c, mask), b0);
    y[r] = hsum_as4(_mm256_add_ps(a0, b0));
  }
}

}  // namespace

void matvec_f32(const float* W, const float* x, float* y, int64_t cols, int64_t r0, int64_t r1) {
  matvec_rows<F32Weights>(W, x, y, cols, r0, r1);
}

void matvec_f16(const uint16_t* W, const float* x, float* y, int64_t cols, int64_t r0,
                int64_t r1) {
  matvec_rows<F16Weights>(W, x, y, cols, r0, r1);
}

void matvec_bf16(const uint16_t* W, const float* x, float* y, int64_t cols, int64_t r0,
                 int64_t r1) {
  if (r1 <= r0) return;
  // Blocks of 16 columns are read with one 256-bit load per row and split into
  // even / odd columns (bf16_even / bf16_odd); x is deinterleaved to match
  // once per call. The last cols % 16 columns are done in scalar code.
  const int64_t cmain = cols & ~int64_t(15);
  float* xs = scratch(0, cmain);
  deinterleave_rows(x, cols, 1, cmain, xs);
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) {
    const uint16_t* w0 = W + r * cols;
    const uint16_t* w1 = w0 + cols;
    const uint16_t* w2 = w1 + cols;
    const uint16_t* w3 = w2 + cols;
    __m256 e0 = _mm256_setzero_ps(), e1 = _mm256_setzero_ps(), e2 = _mm256_setzero_ps(),
           e3 = _mm256_setzero_ps();
    __m256 o0 = _mm256_setzero_ps(), o1 = _mm256_setzero_ps(), o2 = _mm256_setzero_ps(),
           o3 = _mm256_setzero_ps();
    // The 4 rows four groups ahead (4 * cols * 2 bytes) are prefetched into
    // L2 128 bytes per iteration (as matvec_rows).
    // (Prefetches past the end of W are harmless: they never fault.)
    const char* pf = reinterpret_cast<const char*>(w0 + 16 * cols);
    for (int64_t c = 0; c < cmain; c += 16) {
      _mm_prefetch(pf + c * 8, _MM_HINT_T1);
      _mm_prefetch(pf + c * 8 + 64, _MM_HINT_T1);
      const __m256 xe = _mm256_loadu_ps(xs + c), xo = _mm256_loadu_ps(xs + c + 8);
      const __m256i v0 = load_bf16x16_raw(w0 + c);
      const __m256i v1 = load_bf16x16_raw(w1 + c);
      const __m256i v2 = load_bf16x16_raw(w2 + c);
      const __m256i v3 = load_bf16x16_raw(w3 + c);
      e0 = _mm256_fmadd_ps(bf16_even(v0), xe, e0);
      o0 = _mm256_fmadd_ps(bf16_odd(v0), xo, o0);
      e1 = _mm256_fmadd_ps(bf16_even(v1), xe, e1);
      o1 = _mm256_fmadd_ps(bf16_odd(v1), xo, o1);
      e2 = _mm256_fmadd_ps(bf16_even(v2), xe, e2);
      o2 = _mm256_fmadd_ps(bf16_odd(v2), xo, o2);
      e3 = _mm256_fmadd_ps(bf16_even(v3), xe, e3);
      o3 = _mm256_fmadd_ps(bf16_odd(v3), xo, o3);
    }
    __m128 s = hsum4(_mm256_add_ps(e0, o0), _mm256_add_ps(e1, o1), _mm256_add_ps(e2, o2),
                     _mm256_add_ps(e3, o3));
    if (cmain < cols) {
      alignas(16) float t[4] = {0, 0, 0, 0};
      for (int64_t c = cmain; c < cols; ++c) {
        const float xc = x[c];
        t[0] += bf16_to_f32(w0[c]) * xc;
        t[1] += bf16_to_f32(w1[c]) * xc;
        t[2] += bf16_to_f32(w2[c]) * xc;
        t[3] += bf16_to_f32(w3[c]) * xc;
      }
      s = _mm_add_ps(s, _mm_load_ps(t));
    }
    _mm_storeu_ps(y + r, s);
  }
  for (; r < r1; ++r) {
    const uint16_t* w0 = W + r * cols;
    __m256 e0 = _mm256_setzero_ps(), o0 = _mm256_setzero_ps();
    for (int64_t c = 0; c < cmain; c += 16) {
      const __m256i v0 = load_bf16x16_raw(w0 + c);
      e0 = _mm256_fmadd_ps(bf16_even(v0), _mm256_loadu_ps(xs + c), e0);
      o0 = _mm256_fmadd_ps(bf16_odd(v0), _mm256_loadu_ps(xs + c + 8), o0);
    }
    float s = hsum_as4(_mm256_add_ps(e0, o0));
    if (cmain < cols) {  // the tail summed apart, then added once, as the rows of four do
      float t = 0;
      for (int64_t c = cmain; c < cols; ++c) t += bf16_to_f32(w0[c]) * x[c];
      s += t;
    }
    y[r] = s;
  }
}

// ---------------------------------------------------------------------------
// norms and element-wise ops

void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
    a0 = _mm256_fmadd_ps(v0, v0, a0);
    a1 = _mm256_fmadd_ps(v1, v1, a1);
  }
  for (; i + 8 <= n; i += 8) {
    const __m256 v0 = _mm256_loadu_ps(x + i);
    a0 = _mm256_fmadd_ps(v0, v0, a0);
  }
  const int64_t n8 = i;
  const __m256i mask = tail_mask(n - n8);
  if (n8 < n) {
    const __m256 v = _mm256_maskload_ps(x + n8, mask);
    a1 = _mm256_fmadd_ps(v, v, a1);
  }
  const double ss = hsum(_mm256_add_ps(a0, a1));
  const float inv = float(1.0 / std::sqrt(ss / double(n) + double(eps)));
  // y may alias x: every x[i] is read before y[i] is written.
  const __m256 s = _mm256_set1_ps(inv);
  for (i = 0; i < n8; i += 8) {
    const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), s);
    _mm256_storeu_ps(y + i, _mm256_mul_ps(v, _mm256_loadu_ps(w + i)));
  }
  if (n8 < n) {
    const __m256 v = _mm256_mul_ps(_mm256_maskload_ps(x + n8, mask), s);
    _mm256_maskstore_ps(y + n8, mask, _mm256_mul_ps(v, _mm256_maskload_ps(w + n8, mask)));
  }
}

float dot(const float* a, const float* b, int64_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps(), s2 = _mm256_setzero_ps(),
         s3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
    s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
  }
  for (; i + 8 <= n; i += 8)
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
  if (i < n) {
    const __m256i m = tail_mask(n - i);
    s1 = _mm256_fmadd_ps(_mm256_maskload_ps(a + i, m), _mm256_maskload_ps(b + i, m), s1);
  }
  return hsum(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
}

void axpy(float a, const float* x, float* y, int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  if (i < n) {
    const __m256i m = tail_mask(n - i);
    _mm256_maskstore_ps(
        y + i, m, _mm256_fmadd_ps(va, _mm256_maskload_ps(x + i, m), _mm256_maskload_ps(y + i, m)));
  }
}

void scale(float a, float* y, int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(va, _mm256_loadu_ps(y + i)));
  if (i < n) {
    const __m256i m = tail_mask(n - i);
    _mm256_maskstore_ps(y + i, m, _mm256_mul_ps(va, _mm256_maskload_ps(y + i, m)));
  }
}

void add(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(x + i)));
  if (i < n) {
    const __m256i m = tail_mask(n - i);
    _mm256_maskstore_ps(y + i, m,
                        _mm256_add_ps(_mm256_maskload_ps(y + i, m), _mm256_maskload_ps(x + i, m)));
  }
}

namespace {

// silu(g) * u = g / (1 + exp(-g)) * u. For g < -88.3 this gives -0 * u.
inline __m256 silu_mul_ps(__m256 g, __m256 u) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 den = _mm256_add_ps(one, exp_ps(_mm256_sub_ps(_mm256_setzero_ps(), g)));
  return _mm256_mul_ps(_mm256_div_ps(g, den), u);
}

// gelu(g) * u = 0.5 g (1 + tanh(y)) u, y = sqrt(2 / pi) (g + 0.044715 g^3),
// with 1 + tanh(y) = 2 - 2 / (exp(2y) + 1) (exp overflowing to inf gives 2).
inline __m256 gelu_mul_ps(__m256 g, __m256 u) {
  const __m256 one = _mm256_set1_ps(1.0f), two = _mm256_set1_ps(2.0f);
  const __m256 g3 = _mm256_mul_ps(_mm256_mul_ps(g, g), g);
  const __m256 y = _mm256_mul_ps(_mm256_set1_ps(0.7978845608f),
                                 _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), g3, g));
  const __m256 e = exp_ps(_mm256_mul_ps(two, y));
  const __m256 t = _mm256_sub_ps(two, _mm256_div_ps(two, _mm256_add_ps(e, one)));
  return _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), g), t), u);
}

// g = f(g, u), 8 lanes at a time, the tail masked.
template <class F>
inline void gate_rows(float* g, const float* u, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(g + i, f(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i)));
  if (i < n) {
    const __m256i m = tail_mask(n - i);
    _mm256_maskstore_ps(g + i, m, f(_mm256_maskload_ps(g + i, m), _mm256_maskload_ps(u + i, m)));
  }
}

}  // namespace

void gelu_mul(float* g, const float* u, int64_t n) {
  gate_rows(g, u, n, gelu_mul_ps);
}

void silu_mul(float* g, const float* u, int64_t n) {
  gate_rows(g, u, n, silu_mul_ps);
}

// ---------------------------------------------------------------------------
// bf16 <-> f32 rows

namespace {

// Round-to-nearest-even f32 -> bf16 of 8 values, as 32-bit lanes holding the
// 16-bit results. Matches lr::f32_to_bf16 bit for bit (NaN -> quiet NaN with
// the sign and top payload bits kept).
inline __m256i f32_to_bf16_lanes(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i absu = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
  const __m256i is_nan = _mm256_cmpgt_epi32(absu, _mm256_set1_epi32(0x7f800000));
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  return _mm256_blendv_epi8(rounded, quiet, is_nan);
}

}  // namespace

void f32_to_bf16_row(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i a = f32_to_bf16_lanes(_mm256_loadu_ps(x + i));
    const __m256i b = f32_to_bf16_lanes(_mm256_loadu_ps(x + i + 8));
    // packus works per 128-bit lane: a0-3 b0-3 | a4-7 b4-7; fix the order.
    const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xD8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), p);
  }
  for (; i < n; ++i) y[i] = f32_to_bf16(x[i]);
}

void bf16_to_f32_row(const uint16_t* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_ps(y + i, load_bf16x8(x + i));
    _mm256_storeu_ps(y + i + 8, load_bf16x8(x + i + 8));
  }
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, load_bf16x8(x + i));
  for (; i < n; ++i) y[i] = bf16_to_f32(x[i]);
}

}  // namespace lr::cpu
