// The weighted-value tile of attend_causal (attention_kernels.cpp), written
// once and compiled once per register width: attention_kernels.cpp includes
// this file in its AVX2 code with LR_TILE_BITS 256 and inside namespace
// avx512, under the AVX-512 target pragma, with 512. Every lane gets the
// same multiply and multiply-adds at either width, so both give the same
// bits. (Internal linkage only, no includes: kernels_blocks_isa.h's reasons.)

namespace {

#if LR_TILE_BITS == 512
using Vec = __m512;
constexpr int kLanes = 16, kWidest = 4;  // a pass: 4 registers, 64 columns
inline Vec vload(const float* p) {
  return _mm512_loadu_ps(p);
}
// Columns [col, col + 16) of a value row, as f32 (exactly).
inline Vec vrow(const float* row, int col) {
  return _mm512_loadu_ps(row + col);
}
inline Vec vrow(const uint16_t* row, int col) {    // f16 values
  return _mm512_maskz_cvtph_ps(__mmask16(0xffff),  // (the masked form: GCC 12 warns of the other)
                               _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + col)));
}
inline Vec widen(__m512i x) {  // (masked forms: GCC 12 warns of the others' undefined source)
  return _mm512_maskz_cvtepi32_ps(__mmask16(0xffff), x);
}
inline Vec vscale(const void* block) {
  uint16_t d;
  std::memcpy(&d, block, 2);
  return _mm512_set1_ps(_cvtsh_ss(d));
}
// q8_0 and q4_0 rows: the codes (q; q - 8) of columns [col, col + 16), and
// the scale of the block holding col.
inline Vec vcodes(const Q8Block* row, int col) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row[col / 32].qs + col % 32));
  return widen(_mm512_maskz_cvtepi8_epi32(__mmask16(0xffff), q));
}
inline Vec vcodes(const Q4Block* row, int col) {
  const __m128i q =
      q4_codes(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row[col / 32].qs)), col % 32);
  return _mm512_sub_ps(widen(_mm512_maskz_cvtepu8_epi32(__mmask16(0xffff), q)),
                       _mm512_set1_ps(8.f));
}
template <typename B>
inline Vec vscale_at(const B* row, int col) {
  return vscale(row + col / 32);
}
inline void vstore(float* p, Vec v) {
  _mm512_storeu_ps(p, v);
}
inline Vec vset1(float x) {
  return _mm512_set1_ps(x);
}
inline Vec vmul(Vec a, Vec b) {
  return _mm512_mul_ps(a, b);
}
inline Vec vfmadd(Vec a, Vec b, Vec c) {
  return _mm512_fmadd_ps(a, b, c);
}
#else
using Vec = __m256;
constexpr int kLanes = 8, kWidest = 2;  // a pass: 2 registers, 16 columns
inline Vec vload(const float* p) {
  return _mm256_loadu_ps(p);
}
// Columns [col, col + 8) of a value row, as f32 (exactly).
inline Vec vrow(const float* row, int col) {
  return row8(row, col);
}
inline Vec vrow(const uint16_t* row, int col) {
  return row8(row, col);
}
// q8_0 and q4_0 rows: the codes of columns [col, col + 8) and the scale of
// the block holding col.
template <typename B>
inline Vec vcodes(const B* row, int col) {
  return codes8(row, col);
}
template <typename B>
inline Vec vscale_at(const B* row, int col) {
  return scale_of(row + col / 32);
}
inline void vstore(float* p, Vec v) {
  _mm256_storeu_ps(p, v);
}
inline Vec vset1(float x) {
  return _mm256_set1_ps(x);
}
inline Vec vmul(Vec a, Vec b) {
  return _mm256_mul_ps(a, b);
}
inline Vec vfmadd(Vec a, Vec b, Vec c) {
  return _mm256_fmadd_ps(a, b, c);
}
#endif

// Columns [col, col + W * kLanes) of a value row in W registers, as f32
// (exactly): a q8_0 or q4_0 block's scale taken once for its 32 columns.
template <int W, typename E>
inline void vrows(const E* row, int col, Vec* v) {
  if constexpr (std::is_same_v<E, Q8Block> || std::is_same_v<E, Q4Block>) {
    Vec sc = vscale_at(row, col);
    for (int i = 0; i < W; ++i) {
      const int c = col + kLanes * i;
      if (i > 0 && c % 32 == 0) sc = vscale_at(row, c);
      v[i] = vmul(vcodes(row, c), sc);
    }
  } else {
    for (int i = 0; i < W; ++i) v[i] = vrow(row, col + kLanes * i);
  }
}

// Rows [r0, r0 + R), columns [col, col + W * kLanes): acc = acc * c + sum_b w[b] V[b]
// (value rows of f32, f16, q8_0 or q4_0).
template <int R, int W, typename E>
void values_of(int r0, float* const* acc, const float* c, const float* const* w, const E* V,
               int64_t stride, int nb, int col) {
  Vec a[R][W];
  for (int r = 0; r < R; ++r) {
    const Vec cv = vset1(c[r0 + r]);
    for (int i = 0; i < W; ++i) a[r][i] = vmul(vload(acc[r0 + r] + col + kLanes * i), cv);
  }
  for (int b = 0; b < nb; ++b) {
    Vec v[W];
    vrows<W>(V + b * stride, col, v);
    for (int r = 0; r < R; ++r) {
      const Vec p = vset1(w[r0 + r][b]);
      for (int i = 0; i < W; ++i) a[r][i] = vfmadd(p, v[i], a[r][i]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < W; ++i) vstore(acc[r0 + r] + col + kLanes * i, a[r][i]);
}

template <int W, typename E>
constexpr ValuesFn<E> kValues[] = {nullptr,
                                   values_of<1, W, E>,
                                   values_of<2, W, E>,
                                   values_of<3, W, E>,
                                   values_of<4, W, E>,
                                   values_of<5, W, E>,
                                   values_of<6, W, E>};
template <typename E>
constexpr const ValuesFn<E>* kValuesOfWidth[] = {nullptr, kValues<1, E>, kValues<2, E>,
                                                 kValues<3, E>, kValues<4, E>};

// The weighted values of the tile's R rows, columns [col, d) in passes of
// kWidest registers, then the whole registers left; returns the first
// column left (d, or 8 columns short of it at 512 bits).
template <typename E>
int values_by_width(float* const* acc, const float* c, const float* const* w, int R, int d,
                    const E* V, int64_t stride, int nb) {
  int col = 0;
  for (; col + kWidest * kLanes <= d; col += kWidest * kLanes)
    by_rows(kValues<kWidest, E>, 6, R, acc, c, w, V, stride, nb, col);
  if (const int W = (d - col) / kLanes; W > 0) {
    by_rows(kValuesOfWidth<E>[W], 6, R, acc, c, w, V, stride, nb, col);
    col += W * kLanes;
  }
  return col;
}

}  // namespace
