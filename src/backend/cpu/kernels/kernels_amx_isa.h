// The AMX prompt kernels' per-format parts (kernels_amx.cpp): how a panel
// block becomes B tiles (unpack) and how a block's tile sums become the
// VNNI panel kernel's f32 steps (finish). Included once, inside
// kernels_amx.cpp's AVX-512 region, in its anonymous namespace.

inline int32_t word_at(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline __m512i load(const void* p) {
  return _mm512_loadu_si512(p);
}
inline __m512i bytes8(uint8_t v) {
  return _mm512_set1_epi8(char(v));
}
// The maskz forms: GCC 12 warns of the plain ones' undefined pass-through.
inline __m512 halves(const uint8_t* p) {  // 16 f16 -> f32
  return _mm512_maskz_cvtph_ps(__mmask16(0xffff),
                               _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline __m512 to_f(__m512i v) {
  return _mm512_maskz_cvtepi32_ps(__mmask16(0xffff), v);
}
// 32-bit shifts (the maskz forms, as above).
template <int N>
inline __m512i shl32(__m512i v) {
  return _mm512_maskz_slli_epi32(__mmask16(0xffff), v, N);
}
template <int N>
inline __m512i sar32(__m512i v) {
  return _mm512_maskz_srai_epi32(__mmask16(0xffff), v, N);
}
inline __m512i u8_to_32(const uint8_t* p) {  // 16 bytes, one per row
  return _mm512_maskz_cvtepu8_epi32(__mmask16(0xffff),
                                    _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
// Bit c (0..7) of every byte moved to bit 4; the rest of the byte zero.
inline __m512i bit_to_4(__m512i v, int c) {
  const __m512i s =
      c < 4 ? _mm512_slli_epi16(v, unsigned(4 - c)) : _mm512_srli_epi16(v, unsigned(c - 4));
  return _mm512_and_si512(s, bytes8(0x10));
}

// 16 rows x 4 values u (row i in bytes 4i .. 4i + 3) times row i's scale
// (int32 lane i, an int8), less off times it, as two tile rows: w = lo +
// 128 hi, lo 0 .. 127 and hi the rest (maddubs: u x the scale in the even,
// then the odd byte of each 16-bit lane, exact: |u sc| < 2^13).
inline void scaled_planes(__m512i u, __m512i sc, int off, uint8_t* lo, uint8_t* hi) {
  const __m512i s16 =
      _mm512_or_si512(_mm512_and_si512(sc, _mm512_set1_epi32(0xffff)), shl32<16>(sc));
  const __m512i even = _mm512_and_si512(s16, _mm512_set1_epi16(0x00ff)),
                odd = _mm512_slli_epi16(even, 8);
  __m512i we = _mm512_maddubs_epi16(u, even), wo = _mm512_maddubs_epi16(u, odd);
  if (off) {
    const __m512i o = _mm512_mullo_epi16(s16, _mm512_set1_epi16(short(off)));
    we = _mm512_sub_epi16(we, o);
    wo = _mm512_sub_epi16(wo, o);
  }
  const __m512i m7 = _mm512_set1_epi16(0x7f);
  _mm512_store_si512(lo, _mm512_or_si512(_mm512_and_si512(we, m7),
                                         _mm512_slli_epi16(_mm512_and_si512(wo, m7), 8)));
  _mm512_store_si512(
      hi, _mm512_or_si512(_mm512_and_si512(_mm512_srai_epi16(we, 7), _mm512_set1_epi16(0xff)),
                          _mm512_slli_epi16(_mm512_srai_epi16(wo, 7), 8)));
}

// The two planes' sums as the exact S = lo + 128 hi.
inline __m512i plane_sum(const int32_t* lo, const int32_t* hi) {
  return _mm512_add_epi32(load(lo), shl32<7>(load(hi)));
}

// Each format: its panel block (kBytes, kValues values), the depth of its
// tile products (kDepth values: A tiles kDepth bytes wide, B tiles kDepth / 4
// rows), kSteps products per block, kPlanes weight planes; unpack() writes
// a panel block's B tiles (plane 0's kSteps tiles, then plane 1's), finish()
// the f32 steps of block b (panel blocks pbs) for nt tokens (x) from their
// sums (c0: rows of 16 ints; the second plane, or panel, 256 ints on) on
// their accumulators acc (rows of 16 floats, 64-byte aligned; a second
// panel's 256 on), as kernels_panels_isa.h does them.

// Q4_K and Q5_K (kQ5: the qh groups first, panels.h): w = sc u per chunk of
// 32, M = sum_c mn_c sum_c(q); acc = fnma(dmin dx, M, fma(d dx, S, acc)).
template <bool kQ5>
struct Q45K {
  static constexpr int kValues = 256, kDepth = 64, kSteps = 4, kPlanes = 2;
  static constexpr uint64_t kBytes = kQ5 ? kPanelBytesQ5K : kPanelBytesQ4K;
  static constexpr int kV = kQ5 ? 512 : 0;  // Q4_K's layout after Q5_K's qh groups
  static void unpack(const uint8_t* pb, uint8_t* out) {
    for (int s = 0; s < kSteps; ++s) {  // chunks 2s (tile rows 0..7) and 2s + 1 (8..15)
      const __m512i sc0 = u8_to_32(pb + kV + 2048 + 32 * s),
                    sc1 = u8_to_32(pb + kV + 2048 + 32 * s + 16);
      for (int r = 0; r < 8; ++r) {
        const __m512i q = load(pb + (kQ5 && s == 0 ? 128 * r + 64 : kV + 64 * (8 * s + r)));
        __m512i ul = _mm512_and_si512(q, bytes8(0x0f)),
                uh = _mm512_and_si512(_mm512_srli_epi16(q, 4), bytes8(0x0f));
        if constexpr (kQ5) {
          const __m512i hb = load(pb + 128 * r);
          ul = _mm512_or_si512(ul, bit_to_4(hb, 2 * s));
          uh = _mm512_or_si512(uh, bit_to_4(hb, 2 * s + 1));
        }
        uint8_t* o = out + 1024 * s + 64 * r;
        scaled_planes(ul, sc0, 0, o, o + 4096);
        scaled_planes(uh, sc1, 0, o + 512, o + 4096 + 512);
      }
    }
  }
  template <int NP>
  static void finish(const uint8_t* const* pbs, const int32_t* c0, const Acts* x, int nt, int64_t b,
                     float* acc) {
    static_assert(NP == 1, "two planes of one panel");
    const uint8_t* pb = pbs[0];
    const int32_t* c1 = c0 + 256;
    const __m512 d = halves(pb + kV + 2304), dm = halves(pb + kV + 2336);
    __m512i mn[4];
    for (int k = 0; k < 4; ++k)
      mn[k] = _mm512_maskz_cvtepu8_epi16(
          ~__mmask32(0),
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb + kV + 2176 + 32 * k)));
    for (int t = 0; t < nt; ++t) {
      const __m512i S = plane_sum(c0 + 16 * t, c1 + 16 * t);
      __m512i M = _mm512_setzero_si512();
      for (int k = 0; k < 4; ++k)
        M = _mm512_dpwssd_epi32(M, mn[k], _mm512_set1_epi32(word_at(x[t].s32 + 8 * b + 2 * k)));
      const __m512 xd = _mm512_set1_ps(x[t].d[b]);
      float* at = acc + 16 * t;
      const __m512 a = _mm512_fmadd_ps(_mm512_mul_ps(d, xd), to_f(S), _mm512_load_ps(at));
      _mm512_store_ps(at, _mm512_fnmadd_ps(_mm512_mul_ps(dm, xd), to_f(M), a));
    }
  }
};

// Q6_K: w = sc (u - 32) per 16 values, so S is S - 32 M already;
// acc = fma(d dx, S - 32 M, acc).
struct Q6K {
  static constexpr int kValues = 256, kDepth = 64, kSteps = 4, kPlanes = 2;
  static constexpr uint64_t kBytes = kPanelBytesQ6K;
  static void unpack(const uint8_t* pb, uint8_t* out) {
    for (int s = 0; s < kSteps; ++s)
      for (int r = 0; r < 16; ++r) {  // chunk c = 2s + r / 8 (4h + cc), values 4j .. 4j + 3
        const int c = 2 * s + r / 8, j = r % 8, h = c / 4, cc = c % 4;
        const uint8_t* g = pb + 192 * (8 * h + j);  // qh, ql (cc = 0, 2), ql (cc = 1, 3)
        const __m512i qh = load(g), l = load(g + 64 + 64 * (cc % 2));
        const __m512i hb = cc == 0   ? _mm512_slli_epi16(qh, 4)
                           : cc == 1 ? _mm512_slli_epi16(qh, 2)
                           : cc == 2 ? qh
                                     : _mm512_srli_epi16(qh, 2);
        const __m512i u =
            _mm512_or_si512(_mm512_and_si512(cc < 2 ? l : _mm512_srli_epi16(l, 4), bytes8(0x0f)),
                            _mm512_and_si512(hb, bytes8(0x30)));
        // sub-block 2c + j / 4: pair c, element j / 4, sign-extended per row
        const __m512i pc = _mm512_maskz_cvtepi8_epi16(
            ~__mmask32(0),
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb + 3072 + 32 * c)));
        const __m512i sc = j < 4 ? sar32<16>(shl32<16>(pc)) : sar32<16>(pc);
        uint8_t* o = out + 1024 * s + 64 * r;
        scaled_planes(u, sc, 32, o, o + 4096);
      }
  }
  template <int NP>
  static void finish(const uint8_t* const* pbs, const int32_t* c0, const Acts* x, int nt, int64_t b,
                     float* acc) {
    static_assert(NP == 1, "two planes of one panel");
    const uint8_t* pb = pbs[0];
    const int32_t* c1 = c0 + 256;
    const __m512 d = halves(pb + 3328);
    for (int t = 0; t < nt; ++t) {
      float* at = acc + 16 * t;
      _mm512_store_ps(
          at, _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(x[t].d[b])),
                              to_f(plane_sum(c0 + 16 * t, c1 + 16 * t)), _mm512_load_ps(at)));
    }
  }
};

// Q4_0 .. Q5_1: the values u (0 .. 31) as they are, S = sum(u q) per block
// of 32; acc = fnma(d2, dx sum(q), fma(d dx, S, acc)), d2 = off d or -m.
template <DType kT>
struct Small {
  static constexpr bool kQ5 = kT == DType::Q5_0 || kT == DType::Q5_1;
  static constexpr bool kMin = kT == DType::Q4_1 || kT == DType::Q5_1;
  static constexpr int kValues = 32, kDepth = 32, kSteps = 1, kPlanes = 1;
  static constexpr int kQs = kQ5 ? 64 : 0, kOff = kT == DType::Q5_0 ? 16 : 8;
  static constexpr uint64_t kBytes = panel_block_bytes(kT);
  static void unpack(const uint8_t* pb, uint8_t* out) {
    const __m512i hb = kQ5 ? load(pb) : _mm512_setzero_si512();
    for (int g = 0; g < 4; ++g) {  // tile rows g: values 4g + p (low nibbles), 4 + g: 16 + 4g + p
      const __m512i q = load(pb + kQs + 64 * g);
      __m512i ul = _mm512_and_si512(q, bytes8(0x0f)),
              uh = _mm512_and_si512(_mm512_srli_epi16(q, 4), bytes8(0x0f));
      if constexpr (kQ5) {
        ul = _mm512_or_si512(ul, bit_to_4(hb, 2 * g));
        uh = _mm512_or_si512(uh, bit_to_4(hb, 2 * g + 1));
      }
      _mm512_store_si512(out + 64 * g, ul);
      _mm512_store_si512(out + 64 * (4 + g), uh);
    }
  }
  template <int NP>  // NP panels: sums c0 + 256 j, accumulators acc + 256 j
  static void finish(const uint8_t* const* pbs, const int32_t* c0, const Acts* x, int nt, int64_t b,
                     float* acc) {
    __m512 d[NP], d2[NP];
    for (int j = 0; j < NP; ++j) {
      d[j] = halves(pbs[j] + kQs + 256);
      d2[j] = kMin ? _mm512_mul_ps(halves(pbs[j] + kQs + 288), _mm512_set1_ps(-1.f))
                   : _mm512_mul_ps(d[j], _mm512_set1_ps(float(kOff)));
    }
    for (int t = 0; t < nt; ++t) {
      const __m512 xd = _mm512_set1_ps(x[t].d[b]), xs = _mm512_set1_ps(x[t].dsum[b]);
      for (int j = 0; j < NP; ++j) {
        float* at = acc + 256 * j + 16 * t;
        const __m512 a = _mm512_fmadd_ps(_mm512_mul_ps(d[j], xd), to_f(load(c0 + 256 * j + 16 * t)),
                                         _mm512_load_ps(at));
        _mm512_store_ps(at, _mm512_fnmadd_ps(d2[j], xs, a));
      }
    }
  }
};
