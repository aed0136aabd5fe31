// The first two stages of an 8 x 8 transpose of int32 rows r[0 .. 8), within
// each 128-bit lane (quant_scores.cpp), written once and compiled per
// register width: included in the AVX2 code with LR_QT_VEC __m256i and in the
// AVX-512 region with __m512i, beside that width's lo32, hi32, lo64 and hi64
// (the unpacks). Afterwards, per 256 bits, r[e] (e < 4) holds element e of
// rows 0-3 in its low lane and element e + 4 in its high lane, r[4 + e] the
// same of rows 4-7. (No include guard: included once per width. Internal
// linkage only, kernels_blocks_isa.h's reasons.)

inline void transpose8(LR_QT_VEC r[8]) {
  LR_QT_VEC t[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = lo32(r[i], r[i + 1]);
    t[i + 1] = hi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    r[i] = lo64(t[i], t[i + 2]);  // elements 0 and 4 of rows i .. i + 3
    r[i + 1] = hi64(t[i], t[i + 2]);
    r[i + 2] = lo64(t[i + 1], t[i + 3]);
    r[i + 3] = hi64(t[i + 1], t[i + 3]);
  }
}
