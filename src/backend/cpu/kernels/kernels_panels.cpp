// Q4_K and Q6_K in panels of 16 rows for decode (panels.h): the repack, the products
// on both instruction-set paths (kernels_panels_isa.h) and the scalar twin.
#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "backend/cpu/kernels/block_input.h"
#include "backend/cpu/kernels/kernels_amx.h"
#include "backend/cpu/kernels/kernels_simd.h"
#include "backend/cpu/kernels/panels.h"
#include "core/cpu_features.h"
#include "core/error.h"
#include "core/half.h"
#include "core/quants.h"

namespace lr::cpu {

using namespace detail;
namespace q = lr::quants;

namespace avx2 {
#define LR_PANELS_512 0
#include "backend/cpu/kernels/kernels_panels_isa.h"
#undef LR_PANELS_512
}  // namespace avx2

LR_BEGIN_AVX512VNNI
namespace avx512vnni {
#define LR_PANELS_512 1
#include "backend/cpu/kernels/kernels_panels_isa.h"
#undef LR_PANELS_512
}  // namespace avx512vnni
LR_END_AVX512VNNI

namespace {

constexpr int kQ2K = q::Q2_K::kBytes, kQ3K = q::Q3_K::kBytes, kQ4K = q::Q4_K::kBytes,
              kQ6K = q::Q6_K::kBytes;

int file_bytes(DType t) {
  return int(dtype_info(t).block_bytes);
}
int64_t block_elems(DType t) {
  return int64_t(dtype_info(t).block_elems);
}
bool small_format(DType t) {
  return block_elems(t) == 32;
}

// Row i's super-block `blk` into its place o (a panel's super-block) and
// back: each format's pair of inverses.
void pack_q4k(const uint8_t* blk, int i, uint8_t* o) {
  for (int g = 0; g < 32; ++g) std::memcpy(o + 64 * g + 4 * i, blk + q::Q4_K::kQs + 4 * g, 4);
  uint8_t sc[8], mn[8];
  q::k4_scales(blk + q::Q4_K::kScales, sc, mn);
  for (int c = 0; c < 8; ++c) o[2048 + 16 * c + i] = sc[c];
  for (int k = 0; k < 4; ++k) {
    o[2176 + 32 * k + 2 * i] = mn[2 * k];
    o[2176 + 32 * k + 2 * i + 1] = mn[2 * k + 1];
  }
  std::memcpy(o + 2304 + 2 * i, blk + q::Q4_K::kD, 2);
  std::memcpy(o + 2336 + 2 * i, blk + q::Q4_K::kDmin, 2);
}

void unpack_q4k(const uint8_t* o, int i, uint8_t* blk) {
  for (int g = 0; g < 32; ++g) std::memcpy(blk + q::Q4_K::kQs + 4 * g, o + 64 * g + 4 * i, 4);
  uint8_t sc[8], mn[8];
  for (int c = 0; c < 8; ++c) sc[c] = o[2048 + 16 * c + i];
  for (int k = 0; k < 4; ++k) {
    mn[2 * k] = o[2176 + 32 * k + 2 * i];
    mn[2 * k + 1] = o[2176 + 32 * k + 2 * i + 1];
  }
  uint8_t* s = blk + q::Q4_K::kScales;  // the packing q::k4_scales reads
  for (int j = 0; j < 4; ++j) {
    s[j] = uint8_t(sc[j] | (sc[j + 4] >> 4) << 6);
    s[j + 4] = uint8_t(mn[j] | (mn[j + 4] >> 4) << 6);
    s[j + 8] = uint8_t((sc[j + 4] & 15) | (mn[j + 4] & 15) << 4);
  }
  std::memcpy(blk + q::Q4_K::kD, o + 2304 + 2 * i, 2);
  std::memcpy(blk + q::Q4_K::kDmin, o + 2336 + 2 * i, 2);
}

// Q5_K: Q4_K's layout after 512 bytes, but the first 1024 bytes hold qh
// group j and nibble group (0, j) side by side (panels.h).
void pack_q5k(const uint8_t* blk, int i, uint8_t* o) {
  uint8_t q4[q::Q4_K::kBytes];
  std::memcpy(q4 + q::Q4_K::kD, blk + q::Q5_K::kD, 2);
  std::memcpy(q4 + q::Q4_K::kDmin, blk + q::Q5_K::kDmin, 2);
  std::memcpy(q4 + q::Q4_K::kScales, blk + q::Q5_K::kScales, 12);
  std::memcpy(q4 + q::Q4_K::kQs, blk + q::Q5_K::kQs, 128);
  pack_q4k(q4, i, o + 512);  // nibble groups (0, j) land in [512, 1024): rewritten below
  for (int j = 0; j < 8; ++j) {
    std::memcpy(o + 128 * j + 4 * i, blk + q::Q5_K::kQh + 4 * j, 4);
    std::memcpy(o + 128 * j + 64 + 4 * i, blk + q::Q5_K::kQs + 4 * j, 4);
  }
}

void unpack_q5k(const uint8_t* o, int i, uint8_t* blk) {
  uint8_t q4[q::Q4_K::kBytes];
  unpack_q4k(o + 512, i, q4);  // its first 32 nibble bytes are read below instead
  std::memcpy(blk + q::Q5_K::kD, q4 + q::Q4_K::kD, 2);
  std::memcpy(blk + q::Q5_K::kDmin, q4 + q::Q4_K::kDmin, 2);
  std::memcpy(blk + q::Q5_K::kScales, q4 + q::Q4_K::kScales, 12);
  std::memcpy(blk + q::Q5_K::kQs, q4 + q::Q4_K::kQs, 128);
  for (int j = 0; j < 8; ++j) {
    std::memcpy(blk + q::Q5_K::kQh + 4 * j, o + 128 * j + 4 * i, 4);
    std::memcpy(blk + q::Q5_K::kQs + 4 * j, o + 128 * j + 64 + 4 * i, 4);
  }
}

// n bytes from the file's block into the panel (kPack) or back: the formats
// whose panels only move bytes describe both directions once.
template <bool kPack>
void mv(uint8_t* panel, uint8_t* file, int n) {
  if constexpr (kPack)
    std::memcpy(panel, file, size_t(n));
  else
    std::memcpy(file, panel, size_t(n));
}

// Q6_K: for h and j, qh bytes 32h + 4j, then ql 64h + 4j and 64h + 32 + 4j.
template <bool kPack>
void move_q6k(uint8_t* blk, int i, uint8_t* o) {
  for (int h = 0; h < 2; ++h)
    for (int j = 0; j < 8; ++j) {
      uint8_t* g = o + 192 * (8 * h + j) + 4 * i;
      mv<kPack>(g, blk + q::Q6_K::kQh + 32 * h + 4 * j, 4);
      mv<kPack>(g + 64, blk + q::Q6_K::kQl + 64 * h + 4 * j, 4);
      mv<kPack>(g + 128, blk + q::Q6_K::kQl + 64 * h + 32 + 4 * j, 4);
    }
  for (int k = 0; k < 8; ++k)
    mv<kPack>(o + 3072 + 32 * k + 2 * i, blk + q::Q6_K::kScales + 2 * k, 2);
  mv<kPack>(o + 3328 + 2 * i, blk + q::Q6_K::kD, 2);
}

// Q2_K: qs groups, the scale bytes as pairs, d, dmin.
template <bool kPack>
void move_q2k(uint8_t* blk, int i, uint8_t* o) {
  for (int h = 0; h < 2; ++h)
    for (int j = 0; j < 8; ++j)
      mv<kPack>(o + 64 * (8 * h + j) + 4 * i, blk + q::Q2_K::kQs + 32 * h + 4 * j, 4);
  for (int k = 0; k < 8; ++k)
    mv<kPack>(o + 1024 + 32 * k + 2 * i, blk + q::Q2_K::kScales + 2 * k, 2);
  mv<kPack>(o + 1280 + 2 * i, blk + q::Q2_K::kD, 2);
  mv<kPack>(o + 1312 + 2 * i, blk + q::Q2_K::kDmin, 2);
}

// Q3_K's high-bit nibble of lane byte k (row k / 4, byte k % 4 of a group):
// its byte in the group's 32 (panels.h) and which nibble.
int nibble_byte(int k) {
  return k < 32 ? k % 16 : 16 + k % 16;
}
int nibble_shift(int k) {
  return (k / 16) % 2 ? 4 : 0;
}

void pack_q3k(const uint8_t* blk, int i, uint8_t* o) {
  for (int h = 0; h < 2; ++h)
    for (int j = 0; j < 8; ++j) {
      uint8_t* g = o + 96 * (8 * h + j);
      std::memcpy(g + 4 * i, blk + q::Q3_K::kQs + 32 * h + 4 * j, 4);
      for (int p = 0; p < 4; ++p) {
        const int k = 4 * i + p;
        const int nib = (blk[q::Q3_K::kHmask + 4 * j + p] >> (4 * h)) & 15;
        uint8_t& b = g[64 + nibble_byte(k)];
        b = uint8_t((b & ~(15 << nibble_shift(k))) | nib << nibble_shift(k));
      }
    }
  int8_t sc[16];
  q::k3_scales(blk + q::Q3_K::kScales, sc);
  for (int k = 0; k < 8; ++k) std::memcpy(o + 1536 + 32 * k + 2 * i, sc + 2 * k, 2);
  std::memcpy(o + 1792 + 2 * i, blk + q::Q3_K::kD, 2);
}

void unpack_q3k(const uint8_t* o, int i, uint8_t* blk) {
  std::memset(blk + q::Q3_K::kHmask, 0, 32);
  for (int h = 0; h < 2; ++h)
    for (int j = 0; j < 8; ++j) {
      const uint8_t* g = o + 96 * (8 * h + j);
      std::memcpy(blk + q::Q3_K::kQs + 32 * h + 4 * j, g + 4 * i, 4);
      for (int p = 0; p < 4; ++p) {
        const int k = 4 * i + p;
        const int nib = (g[64 + nibble_byte(k)] >> nibble_shift(k)) & 15;
        blk[q::Q3_K::kHmask + 4 * j + p] =
            uint8_t(blk[q::Q3_K::kHmask + 4 * j + p] | nib << (4 * h));
      }
    }
  int8_t sc[16];
  for (int k = 0; k < 8; ++k) std::memcpy(sc + 2 * k, o + 1536 + 32 * k + 2 * i, 2);
  uint8_t* s = blk + q::Q3_K::kScales;  // the packing q::k3_scales reads (scale + 32)
  std::memset(s, 0, 12);
  for (int g = 0; g < 16; ++g) {
    const int v = sc[g] + 32;
    s[g % 8] = uint8_t(s[g % 8] | (v & 15) << (g < 8 ? 0 : 4));
    s[8 + g % 4] = uint8_t(s[8 + g % 4] | ((v >> 4) & 3) << (2 * (g / 4)));
  }
  std::memcpy(blk + q::Q3_K::kD, o + 1792 + 2 * i, 2);
}

// Q4_0 .. Q5_1: the nibble groups (after Q5's high-bit bytes), d, m.
struct SmallLayout {
  int qs, d, m, qh;  // offsets in the file's block (m, qh: -1 when absent)
};
SmallLayout small_layout(DType t) {
  switch (t) {
    case DType::Q4_0:
      return {q::Q4_0::kQs, 0, -1, -1};
    case DType::Q4_1:
      return {q::Q4_1::kQs, 0, 2, -1};
    case DType::Q5_0:
      return {q::Q5_0::kQs, 0, -1, q::Q5_0::kQh};
    default:
      return {q::Q5_1::kQs, 0, 2, q::Q5_1::kQh};
  }
}

void pack_small(DType t, const uint8_t* blk, int i, uint8_t* o) {
  const SmallLayout f = small_layout(t);
  const int qs = f.qh >= 0 ? 64 : 0;
  for (int g = 0; g < 4; ++g) std::memcpy(o + qs + 64 * g + 4 * i, blk + f.qs + 4 * g, 4);
  std::memcpy(o + qs + 256 + 2 * i, blk + f.d, 2);
  if (f.m >= 0) std::memcpy(o + qs + 288 + 2 * i, blk + f.m, 2);
  if (f.qh >= 0) {
    uint32_t h;
    std::memcpy(&h, blk + f.qh, 4);
    for (int p = 0; p < 4; ++p) {
      int v = 0;
      for (int g = 0; g < 4; ++g)
        v |= int((h >> (4 * g + p)) & 1) << (2 * g) | int((h >> (16 + 4 * g + p)) & 1)
                                                          << (2 * g + 1);
      o[4 * i + p] = uint8_t(v);
    }
  }
}

void unpack_small(DType t, const uint8_t* o, int i, uint8_t* blk) {
  const SmallLayout f = small_layout(t);
  const int qs = f.qh >= 0 ? 64 : 0;
  for (int g = 0; g < 4; ++g) std::memcpy(blk + f.qs + 4 * g, o + qs + 64 * g + 4 * i, 4);
  std::memcpy(blk + f.d, o + qs + 256 + 2 * i, 2);
  if (f.m >= 0) std::memcpy(blk + f.m, o + qs + 288 + 2 * i, 2);
  if (f.qh >= 0) {
    uint32_t h = 0;
    for (int p = 0; p < 4; ++p)
      for (int g = 0; g < 4; ++g) {
        h |= uint32_t((o[4 * i + p] >> (2 * g)) & 1) << (4 * g + p);
        h |= uint32_t((o[4 * i + p] >> (2 * g + 1)) & 1) << (16 + 4 * g + p);
      }
    std::memcpy(blk + f.qh, &h, 4);
  }
}

void pack_row(DType t, const uint8_t* blk, int i, uint8_t* o) {
  auto* b = const_cast<uint8_t*>(blk);  // read only when packing
  if (small_format(t)) return pack_small(t, blk, i, o);
  switch (t) {
    case DType::Q2_K:
      return move_q2k<true>(b, i, o);
    case DType::Q3_K:
      return pack_q3k(blk, i, o);
    case DType::Q5_K:
      return pack_q5k(blk, i, o);
    case DType::Q6_K:
      return move_q6k<true>(b, i, o);
    default:
      return pack_q4k(blk, i, o);
  }
}

void unpack_row(DType t, const uint8_t* o, int i, uint8_t* blk) {
  auto* p = const_cast<uint8_t*>(o);  // read only when unpacking
  if (small_format(t)) return unpack_small(t, o, i, blk);
  switch (t) {
    case DType::Q2_K:
      return move_q2k<false>(blk, i, p);
    case DType::Q3_K:
      return unpack_q3k(o, i, blk);
    case DType::Q5_K:
      return unpack_q5k(o, i, blk);
    case DType::Q6_K:
      return move_q6k<false>(blk, i, p);
    default:
      return unpack_q4k(o, i, blk);
  }
}

float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// One super-block's twin sums (integer) and its f32 steps: the min's term
// leaves the same accumulator, as the prompt kernels do (kernels_blocks_gemm.cpp),
// so a token's products are the same bits in a prompt and in decode.
void twin_q45k(bool q5, const uint8_t* blk, const Acts& a, int64_t b, float& acc) {
  const int sc_off = q5 ? q::Q5_K::kScales : q::Q4_K::kScales,
            qs = q5 ? q::Q5_K::kQs : q::Q4_K::kQs;
  uint8_t sc[8], mn[8];
  q::k4_scales(blk + sc_off, sc, mn);
  int32_t S = 0, M = 0;
  for (int c = 0; c < 8; ++c) {
    int32_t s = 0;
    for (int l = 0; l < 32; ++l) {
      int u = (blk[qs + 32 * (c / 2) + l] >> (4 * (c % 2))) & 15;
      if (q5) u |= ((blk[q::Q5_K::kQh + l] >> c) & 1) << 4;
      s += u * a.q[256 * b + 32 * c + l];
    }
    S += sc[c] * s;
    M += mn[c] * a.s32[8 * b + c];
  }
  const float xd = a.d[b];
  acc = std::fma(half_at(blk + (q5 ? q::Q5_K::kD : q::Q4_K::kD)) * xd, float(S), acc);
  acc = std::fma(-(half_at(blk + (q5 ? q::Q5_K::kDmin : q::Q4_K::kDmin)) * xd), float(M), acc);
}

void twin_q6k(const uint8_t* blk, const Acts& a, int64_t b, float& acc) {
  const auto* sc = reinterpret_cast<const int8_t*>(blk + q::Q6_K::kScales);
  int32_t S = 0, M = 0;
  for (int c = 0; c < 8; ++c)
    for (int part = 0; part < 2; ++part) {
      int32_t s = 0;
      for (int l = 16 * part; l < 16 * part + 16; ++l) {
        const int lo =
            (blk[q::Q6_K::kQl + 64 * (c / 4) + 32 * (c % 2) + l] >> (4 * ((c % 4) / 2))) & 15;
        const int hi = (blk[q::Q6_K::kQh + 32 * (c / 4) + l] >> (2 * (c % 4))) & 3;
        s += (lo | hi << 4) * a.q[256 * b + 32 * c + l];
      }
      const int g = 2 * c + part;
      S += sc[g] * s;
      M += sc[g] * a.s16[16 * b + g];
    }
  acc = std::fma(half_at(blk + q::Q6_K::kD) * a.d[b], float(S - 32 * M), acc);
}

void twin_q2k(const uint8_t* blk, const Acts& a, int64_t b, float& acc) {
  int32_t S = 0, M = 0;
  for (int c = 0; c < 8; ++c)
    for (int part = 0; part < 2; ++part) {
      int32_t s = 0;
      for (int l = 16 * part; l < 16 * part + 16; ++l)
        s += ((blk[q::Q2_K::kQs + 32 * (c / 4) + l] >> (2 * (c % 4))) & 3) *
             a.q[256 * b + 32 * c + l];
      const int g = 2 * c + part, sc = blk[q::Q2_K::kScales + g];
      S += (sc & 15) * s;
      M += (sc >> 4) * a.s16[16 * b + g];
    }
  const float xd = a.d[b];
  acc = std::fma(half_at(blk + q::Q2_K::kD) * xd, float(S), acc);
  acc = std::fma(-(half_at(blk + q::Q2_K::kDmin) * xd), float(M), acc);
}

void twin_q3k(const uint8_t* blk, const Acts& a, int64_t b, float& acc) {
  int8_t sc[16];
  q::k3_scales(blk + q::Q3_K::kScales, sc);
  int32_t S = 0, M = 0;
  for (int c = 0; c < 8; ++c)
    for (int part = 0; part < 2; ++part) {
      int32_t s = 0;
      for (int l = 16 * part; l < 16 * part + 16; ++l) {
        const int lo = (blk[q::Q3_K::kQs + 32 * (c / 4) + l] >> (2 * (c % 4))) & 3;
        const int hi = (blk[q::Q3_K::kHmask + l] >> c) & 1;
        s += (lo | hi << 2) * a.q[256 * b + 32 * c + l];
      }
      const int g = 2 * c + part;
      S += sc[g] * s;
      M += sc[g] * a.s16[16 * b + g];
    }
  acc = std::fma(half_at(blk + q::Q3_K::kD) * a.d[b], float(S - 4 * M), acc);
}

// Q4_0 .. Q5_1, one block of 32: S = sum(u q), then acc as panels.h says.
void twin_small(DType t, const uint8_t* blk, const Acts& a, int64_t b, float& acc) {
  const SmallLayout f = small_layout(t);
  uint32_t h = 0;
  if (f.qh >= 0) std::memcpy(&h, blk + f.qh, 4);
  int32_t S = 0;
  for (int v = 0; v < 32; ++v) {
    const int u = ((blk[f.qs + v % 16] >> (v < 16 ? 0 : 4)) & 15) | int((h >> v) & 1) << 4;
    S += u * a.q[32 * b + v];
  }
  const float d = half_at(blk + f.d);
  const float d2 = f.m >= 0 ? -half_at(blk + f.m) : float(t == DType::Q5_0 ? 16 : 8) * d;
  acc = std::fma(d * a.d[b], float(S), acc);
  acc = std::fma(-d2, a.dsum[b], acc);
}

}  // namespace

// A buffer in 2 MiB pages where the kernel grants them (transparent huge
// pages in madvise mode): a decode step streams every panel once, through
// 500 times fewer TLB entries. (Qwen2.5-Coder-1.5B decode on a Zen 4, 3
// interleaved runs: 31.9-43.3 tok/s against 30.8-38.9 in 4 KiB pages, within
// the spread of this host's bandwidth.)
std::shared_ptr<uint8_t[]> huge_page_buffer(uint64_t bytes) {
  constexpr uint64_t kHuge = uint64_t(2) << 20;
  // Below a huge page (small low-rank factors) cache lines suffice: a buffer
  // rounded up to 2 MiB could hold a whole huge page for a few kilobytes.
  const uint64_t align = bytes < kHuge ? 64 : kHuge;
  const uint64_t size = (bytes + align - 1) / align * align;
  void* p = std::aligned_alloc(align, size);
  if (!p) throw std::bad_alloc();
  if (align == kHuge) (void)madvise(p, size, MADV_HUGEPAGE);
  return std::shared_ptr<uint8_t[]>(static_cast<uint8_t*>(p), [](uint8_t* q) { std::free(q); });
}

bool panels_fit(DType t, int64_t rows, int64_t cols) {
  const bool format = t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q5_0 ||
                      t == DType::Q5_1 || t == DType::Q2_K || t == DType::Q3_K ||
                      t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K;
  return format && rows > 0 && rows % kPanelRows == 0 && cols > 0 && cols % block_elems(t) == 0;
}

uint64_t panel_bytes(DType t, int64_t rows, int64_t cols) {
  return uint64_t(rows / kPanelRows) * uint64_t(cols / block_elems(t)) * panel_block_bytes(t);
}

std::shared_ptr<const uint8_t[]> repack_panels(DType t, const uint8_t* W, uint64_t rb, int64_t rows,
                                               int64_t cols) {
  const uint64_t bytes = uint64_t(file_bytes(t));
  LR_ASSERT(panels_fit(t, rows, cols) && rb == uint64_t(cols / block_elems(t)) * bytes);
  const int64_t nb = cols / block_elems(t);
  std::shared_ptr<uint8_t[]> out = huge_page_buffer(panel_bytes(t, rows, cols));
  std::memset(out.get(), 0, panel_bytes(t, rows, cols));  // Q3_K's nibbles are or-ed in
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < nb; ++b)
      pack_row(t, W + uint64_t(r) * rb + uint64_t(b) * bytes, int(r % kPanelRows),
               out.get() + uint64_t(r / kPanelRows * nb + b) * panel_block_bytes(t));
  return out;
}

void matvec_panels_n(DType t, const uint8_t* P, const float* X, int64_t ldx, float* Y, int64_t ldy,
                     int64_t n, int64_t cols, int64_t r0, int64_t r1) {
  if (r1 <= r0 || n <= 0) return;
  LR_ASSERT(r0 % kPanelRows == 0 && r1 % kPanelRows == 0 && cols % block_elems(t) == 0);
  const std::vector<Acts>& a = quantize_block_inputs(X, cols, n, ldx, int(block_elems(t)));
  const int64_t nb = cols / block_elems(t);
  if (kernel_isa() == Isa::Avx512Vnni)
    avx512vnni::matvec_panels(t, P, nb, a.data(), n, Y, ldy, r0 / kPanelRows, r1 / kPanelRows);
  else
    avx2::matvec_panels(t, P, nb, a.data(), n, Y, ldy, r0 / kPanelRows, r1 / kPanelRows);
}

void unpack_panels(DType t, const uint8_t* P, int64_t cols, int64_t r0, int64_t r1, uint8_t* out) {
  LR_ASSERT(r0 % kPanelRows == 0 && r1 % kPanelRows == 0 && cols % block_elems(t) == 0);
  const int64_t nb = cols / block_elems(t);
  const uint64_t bytes = uint64_t(file_bytes(t)), rb = uint64_t(nb) * bytes;
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t b = 0; b < nb; ++b)
      unpack_row(t, P + uint64_t(r / kPanelRows * nb + b) * panel_block_bytes(t),
                 int(r % kPanelRows), out + uint64_t(r - r0) * rb + uint64_t(b) * bytes);
}

void matmul_panels(DType t, const uint8_t* P, const float* X, float* Y, int64_t n, int64_t cols,
                   int64_t ldx, int64_t ldy, int64_t r0, int64_t r1, MatmulPath path) {
  // On AVX-512 VNNI a prompt of up to kPanelPromptTokens tokens takes the
  // panels as decode does: the same bits as the prompt kernel over the file's
  // rows (panels.h), without unpacking every row. (Qwen2.5-Coder shapes, 1
  // thread: the panel kernel at 4-8 inputs runs 101-161 G multiply-adds/s,
  // the prompt kernel at 8 tokens 70-87 and at 512 149-163. Prefill on a Zen
  // 4, 2 threads, panels against unpacking: 0.5B 16 tokens 38 against 96 ms,
  // 32 57/112, 64 107/155, 128 226/248, 256 456/439; 1.5B 32 203/273, 128
  // 661/704, 256 1392/1344.)
  const bool int8 = kernel_isa() == Isa::Avx512Vnni;
  // Where AMX runs, prompts of 16 tokens and more take its tiles, with the
  // same bits (kernels_amx.cpp); any that cannot fall through.
  if (int8 && n >= kAmxMinTokens && amx_has_format(t) && amx_prompts_ready()) {
    const std::vector<Acts>& in = quantize_block_inputs(X, cols, n, ldx, int(block_elems(t)));
    if (matmul_panels_amx(t, P, in.data(), n, Y, ldy, cols, r0, r1)) return;
  }
  if (int8 && n <= kPanelPromptTokens) return matvec_panels_n(t, P, X, ldx, Y, ldy, n, cols, r0, r1);
  // Else 1024 rows at a time back in the file's layout; on AVX-512 VNNI the
  // tokens are quantized once for all chunks.
  constexpr int64_t kChunk = 1024;
  thread_local std::vector<uint8_t> rows;
  const uint64_t rb = uint64_t(cols / block_elems(t)) * uint64_t(file_bytes(t));
  const Acts* in =
      int8 ? quantize_block_inputs(X, cols, n, ldx, int(block_elems(t))).data() : nullptr;
  for (int64_t r = r0; r < r1; r += kChunk) {
    const int64_t e = std::min(r1, r + kChunk);
    rows.resize(uint64_t(e - r) * rb);
    unpack_panels(t, P, cols, r, e, rows.data());
    if (int8)
      matmul_blocks_int8_acts(t, rows.data(), rb, in, Y + r, n, cols, ldy, 0, e - r);
    else
      matmul_blocks_f32(t, rows.data(), rb, X, Y + r, n, cols, ldx, ldy, 0, e - r, path);
  }
}

void matvec_panel_twin(DType t, const uint8_t* W, uint64_t rb, const float* x, float* y,
                       int64_t cols, int64_t r0, int64_t r1) {
  LR_ASSERT(panels_fit(t, kPanelRows, cols));
  const Acts& a = quantize_block_inputs(x, cols, 1, cols, int(block_elems(t)))[0];
  const uint64_t bytes = uint64_t(file_bytes(t));
  for (int64_t r = r0; r < r1; ++r) {
    float acc = 0;
    for (int64_t b = 0; b < cols / block_elems(t); ++b) {
      const uint8_t* blk = W + uint64_t(r) * rb + uint64_t(b) * bytes;
      if (small_format(t)) {
        twin_small(t, blk, a, b, acc);
        continue;
      }
      switch (t) {
        case DType::Q2_K:
          twin_q2k(blk, a, b, acc);
          break;
        case DType::Q3_K:
          twin_q3k(blk, a, b, acc);
          break;
        case DType::Q6_K:
          twin_q6k(blk, a, b, acc);
          break;
        default:
          twin_q45k(t == DType::Q5_K, blk, a, b, acc);
          break;
      }
    }
    y[r] = acc;
  }
}

}  // namespace lr::cpu
