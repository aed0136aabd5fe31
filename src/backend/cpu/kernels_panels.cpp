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

#include "backend/cpu/block_input.h"
#include "backend/cpu/kernels_simd.h"
#include "backend/cpu/panels.h"
#include "core/cpu_features.h"
#include "core/error.h"
#include "core/half.h"
#include "core/quants.h"

namespace lr::cpu {

using namespace detail;
namespace q = lr::quants;

namespace avx2 {
#define LR_PANELS_512 0
#include "backend/cpu/kernels_panels_isa.h"
#undef LR_PANELS_512
}  // namespace avx2

LR_BEGIN_AVX512VNNI
namespace avx512vnni {
#define LR_PANELS_512 1
#include "backend/cpu/kernels_panels_isa.h"
#undef LR_PANELS_512
}  // namespace avx512vnni
LR_END_AVX512VNNI

namespace {

constexpr int kQ4K = q::Q4_K::kBytes, kQ6K = q::Q6_K::kBytes;

uint64_t block_bytes(DType t) {
  return t == DType::Q6_K ? kPanelBytesQ6K : kPanelBytesQ4K;
}

// Super-block b of rows 16p .. 16p + 15 into its place o in the panel form.
void repack_q4k(const uint8_t* const blk[16], uint8_t* o) {
  for (int i = 0; i < 16; ++i) {
    for (int g = 0; g < 32; ++g) std::memcpy(o + 64 * g + 4 * i, blk[i] + q::Q4_K::kQs + 4 * g, 4);
    uint8_t sc[8], mn[8];
    q::k4_scales(blk[i] + q::Q4_K::kScales, sc, mn);
    for (int c = 0; c < 8; ++c) o[2048 + 16 * c + i] = sc[c];
    for (int k = 0; k < 4; ++k) {
      o[2176 + 32 * k + 2 * i] = mn[2 * k];
      o[2176 + 32 * k + 2 * i + 1] = mn[2 * k + 1];
    }
    std::memcpy(o + 2304 + 2 * i, blk[i] + q::Q4_K::kD, 2);
    std::memcpy(o + 2336 + 2 * i, blk[i] + q::Q4_K::kDmin, 2);
  }
}

void repack_q6k(const uint8_t* const blk[16], uint8_t* o) {
  for (int i = 0; i < 16; ++i) {
    for (int h = 0; h < 2; ++h)
      for (int j = 0; j < 8; ++j) {
        uint8_t* g = o + 192 * (8 * h + j) + 4 * i;
        std::memcpy(g, blk[i] + q::Q6_K::kQh + 32 * h + 4 * j, 4);
        std::memcpy(g + 64, blk[i] + q::Q6_K::kQl + 64 * h + 4 * j, 4);
        std::memcpy(g + 128, blk[i] + q::Q6_K::kQl + 64 * h + 32 + 4 * j, 4);
      }
    for (int k = 0; k < 8; ++k)
      std::memcpy(o + 3072 + 32 * k + 2 * i, blk[i] + q::Q6_K::kScales + 2 * k, 2);
    std::memcpy(o + 3328 + 2 * i, blk[i] + q::Q6_K::kD, 2);
  }
}

// The inverses, one row's super-block from its place in the panel form.
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

void unpack_q6k(const uint8_t* o, int i, uint8_t* blk) {
  for (int h = 0; h < 2; ++h)
    for (int j = 0; j < 8; ++j) {
      const uint8_t* g = o + 192 * (8 * h + j) + 4 * i;
      std::memcpy(blk + q::Q6_K::kQh + 32 * h + 4 * j, g, 4);
      std::memcpy(blk + q::Q6_K::kQl + 64 * h + 4 * j, g + 64, 4);
      std::memcpy(blk + q::Q6_K::kQl + 64 * h + 32 + 4 * j, g + 128, 4);
    }
  for (int k = 0; k < 8; ++k)
    std::memcpy(blk + q::Q6_K::kScales + 2 * k, o + 3072 + 32 * k + 2 * i, 2);
  std::memcpy(blk + q::Q6_K::kD, o + 3328 + 2 * i, 2);
}

float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// One super-block's twin sums (integer) and its f32 step.
void twin_q4k(const uint8_t* blk, const Acts& a, int64_t b, float& acc, float& corr) {
  uint8_t sc[8], mn[8];
  q::k4_scales(blk + q::Q4_K::kScales, sc, mn);
  int32_t S = 0, M = 0;
  for (int c = 0; c < 8; ++c) {
    int32_t s = 0;
    for (int l = 0; l < 32; ++l) {
      const int u = (blk[q::Q4_K::kQs + 32 * (c / 2) + l] >> (4 * (c % 2))) & 15;
      s += u * a.q[256 * b + 32 * c + l];
    }
    S += sc[c] * s;
    M += mn[c] * a.s32[8 * b + c];
  }
  const float xd = a.d[b];
  acc = std::fma(half_at(blk + q::Q4_K::kD) * xd, float(S), acc);
  corr = std::fma(half_at(blk + q::Q4_K::kDmin) * xd, float(M), corr);
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

}  // namespace

// A buffer in 2 MiB pages where the kernel grants them (transparent huge
// pages in madvise mode): a decode step streams every panel once, through
// 500 times fewer TLB entries. (Qwen2.5-Coder-1.5B decode on a Zen 4, 3
// interleaved runs: 31.9-43.3 tok/s against 30.8-38.9 in 4 KiB pages, within
// the spread of this host's bandwidth.)
std::shared_ptr<uint8_t[]> huge_page_buffer(uint64_t bytes) {
  constexpr uint64_t kHuge = uint64_t(2) << 20;
  const uint64_t size = (bytes + kHuge - 1) / kHuge * kHuge;
  void* p = std::aligned_alloc(kHuge, size);
  if (!p) throw std::bad_alloc();
  (void)madvise(p, size, MADV_HUGEPAGE);
  return std::shared_ptr<uint8_t[]>(static_cast<uint8_t*>(p), [](uint8_t* q) { std::free(q); });
}

bool panels_fit(DType t, int64_t rows, int64_t cols) {
  return (t == DType::Q4_K || t == DType::Q6_K) && rows > 0 && rows % kPanelRows == 0 && cols > 0 &&
         cols % 256 == 0;
}

uint64_t panel_bytes(DType t, int64_t rows, int64_t cols) {
  return uint64_t(rows / kPanelRows) * uint64_t(cols / 256) * block_bytes(t);
}

std::shared_ptr<const uint8_t[]> repack_panels(DType t, const uint8_t* W, uint64_t rb, int64_t rows,
                                               int64_t cols) {
  const int bytes = t == DType::Q6_K ? kQ6K : kQ4K;
  LR_ASSERT(panels_fit(t, rows, cols) && rb == uint64_t(cols / 256) * uint64_t(bytes));
  const int64_t nb = cols / 256;
  std::shared_ptr<uint8_t[]> out = huge_page_buffer(panel_bytes(t, rows, cols));
  for (int64_t p = 0; p < rows / kPanelRows; ++p)
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk[16];
      for (int i = 0; i < 16; ++i)
        blk[i] = W + uint64_t(kPanelRows * p + i) * rb + uint64_t(b) * uint64_t(bytes);
      uint8_t* o = out.get() + uint64_t(p * nb + b) * block_bytes(t);
      if (t == DType::Q6_K)
        repack_q6k(blk, o);
      else
        repack_q4k(blk, o);
    }
  return out;
}

void matvec_panels_n(DType t, const uint8_t* P, const float* X, int64_t ldx, float* Y, int64_t ldy,
                     int64_t n, int64_t cols, int64_t r0, int64_t r1) {
  if (r1 <= r0 || n <= 0) return;
  LR_ASSERT(r0 % kPanelRows == 0 && r1 % kPanelRows == 0 && cols % 256 == 0);
  const std::vector<Acts>& a = quantize_block_inputs(X, cols, n, ldx, 256);
  const int64_t nb = cols / 256;
  if (kernel_isa() == Isa::Avx512Vnni)
    avx512vnni::matvec_panels(t, P, nb, a.data(), n, Y, ldy, r0 / kPanelRows, r1 / kPanelRows);
  else
    avx2::matvec_panels(t, P, nb, a.data(), n, Y, ldy, r0 / kPanelRows, r1 / kPanelRows);
}

void unpack_panels(DType t, const uint8_t* P, int64_t cols, int64_t r0, int64_t r1, uint8_t* out) {
  LR_ASSERT(r0 % kPanelRows == 0 && r1 % kPanelRows == 0 && cols % 256 == 0);
  const int64_t nb = cols / 256;
  const uint64_t bytes = t == DType::Q6_K ? kQ6K : kQ4K, rb = uint64_t(nb) * bytes;
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* o = P + uint64_t(r / kPanelRows * nb + b) * block_bytes(t);
      uint8_t* blk = out + uint64_t(r - r0) * rb + uint64_t(b) * bytes;
      if (t == DType::Q6_K)
        unpack_q6k(o, int(r % kPanelRows), blk);
      else
        unpack_q4k(o, int(r % kPanelRows), blk);
    }
}

void matmul_panels(DType t, const uint8_t* P, const float* X, float* Y, int64_t n, int64_t cols,
                   int64_t ldx, int64_t ldy, int64_t r0, int64_t r1, MatmulPath path) {
  // 1024 rows a chunk: the int8 kernel quantizes the tokens once per call,
  // about 1% of the chunk's multiply-adds.
  constexpr int64_t kChunk = 1024;
  thread_local std::vector<uint8_t> rows;
  const uint64_t rb = uint64_t(cols / 256) * (t == DType::Q6_K ? kQ6K : kQ4K);
  for (int64_t r = r0; r < r1; r += kChunk) {
    const int64_t e = std::min(r1, r + kChunk);
    rows.resize(uint64_t(e - r) * rb);
    unpack_panels(t, P, cols, r, e, rows.data());
    matmul_blocks(t, rows.data(), rb, X, Y + r, n, cols, ldx, ldy, 0, e - r, path);
  }
}

void matvec_panel_twin(DType t, const uint8_t* W, uint64_t rb, const float* x, float* y,
                       int64_t cols, int64_t r0, int64_t r1) {
  LR_ASSERT(t == DType::Q4_K || t == DType::Q6_K);
  const Acts& a = quantize_block_inputs(x, cols, 1, cols, 256)[0];
  for (int64_t r = r0; r < r1; ++r) {
    float acc = 0, corr = 0;
    for (int64_t b = 0; b < cols / 256; ++b) {
      const uint8_t* blk = W + uint64_t(r) * rb;
      if (t == DType::Q6_K)
        twin_q6k(blk + uint64_t(b) * kQ6K, a, b, acc);
      else
        twin_q4k(blk + uint64_t(b) * kQ4K, a, b, acc, corr);
    }
    y[r] = acc - corr;
  }
}

}  // namespace lr::cpu
