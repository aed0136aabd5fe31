// The prompt products of block-format panels (panels.h) on AMX-INT8
// (kernels_amx.h). A tile product TDPBSSD adds, for 16 tokens (A: their
// int8 inputs, 64 or 32 values each) and 16 weight rows (B: 4 values of
// each row per tile row, the panels' own interleave), the exact int32 sums
// C[token][row]; so a C row is one token's 16 rows in one 512-bit register,
// the lanes of the VNNI panel kernel (kernels_panels_isa.h), and the f32
// steps after it are that kernel's, per row and super-block, in its order.
// Every output is the VNNI path's bits (and the scalar twin's) whatever the
// number of tokens, a token's place among them or the row range.
//
// The integer scales of the K-quants, per 32 (Q4_K, Q5_K) or 16 (Q6_K)
// values, cannot enter a tile product after it: TDPBSSD sums all 64 values
// of its depth. So the weights go into the tiles already scaled, w = sc u
// (Q4_K, Q5_K: 0 .. 1953) or sc (u - 32) (Q6_K: -4064 .. 4096, which is
// S - 32 M at once), split into two int8 planes, w = lo + 128 hi (lo 0 ..
// 127, hi -32 .. 32): S = C_lo + 128 C_hi, the exact sum, with one f32 step
// per super-block as on VNNI (a store per tile per block, not per chunk).
// The 32-value formats (one f32 step per 32 values anyway) take their
// values u as they are, one plane, 32 values deep.
//
// Nibbles cannot be read by a tile, so each call unpacks the panels it
// computes into those planes (per row and super-block Q4_K's 148 panel
// bytes become 512, Q6_K's 210 512; per 32 values Q5_0's 22 become 32),
// 1024 columns of 8 passes (a pass: a panel, or two of a one-plane format)
// at a time, 256 KiB in L2, and runs every token tile of the call over
// them, reading the tokens' inputs where quantize_block_inputs left them.
// Unpacking is paid once per call, not per token tile, so at a prompt's
// hundreds of tokens it is small beside the products. (No timing yet: the
// tiles have not run on an AMX host, docs/results/cpu-vs-llamacpp.md.)
#include "backend/cpu/kernels/kernels_amx.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "backend/cpu/kernels/kernels_simd.h"
#include "backend/cpu/kernels/panels.h"
#include "core/cpu_features.h"

// The kernels below are compiled for AVX-512 F/BW/VL + VNNI
// (LR_BEGIN_AVX512VNNI); the tile instructions are inline assembly (no
// compiler flag), run only after amx_prompts_ready().

namespace lr::cpu::detail {

namespace {
std::atomic<int> g_on{-1};  // set_amx_prompts; -1: as LOWRANK_AMX says
}  // namespace

void set_amx_prompts(bool on) {
  g_on = on ? 1 : 0;
}

bool amx_prompts_ready() {
  // amx_status() requests the tile permission (for every thread) before
  // its probe; CPUID is asked first, so a host without AMX never forks.
  static const bool usable =
      cpu_supports(Isa::Avx512Vnni) && cpu_lists_amx_int8() && amx_status() == Amx::Usable;
  const int on = g_on.load(std::memory_order_relaxed);
  return (on < 0 ? amx_allowed_by_env() : on == 1) && usable && kernel_isa() == Isa::Avx512Vnni;
}

bool amx_has_format(DType t) {
  return t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q5_0 || t == DType::Q5_1 ||
         t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K;
}

namespace {

// The tile shapes for A tiles `depth` bytes wide (64 or 32): tmm0, tmm1 the
// token tiles (A: 16 tokens x depth values), tmm2, tmm3 the weight tiles
// (B: depth / 4 rows of 16 weight rows x 4 values), tmm4 + 2a + j the sums
// of A tile a and B tile j (16 tokens x 16 rows of int32).
struct TileShapes {
  int rows[8], colsb[8];
};
TileShapes tile_shapes(int depth) {
  TileShapes s{};
  for (int t = 0; t < 8; ++t) {
    s.colsb[t] = t < 2 ? depth : 64;
    s.rows[t] = t == 2 || t == 3 ? depth / 4 : 16;
  }
  return s;
}

// The tile unit: its instructions, tiles named by number. The loads and
// stores clobber memory, so the compiler keeps the unpacking's stores
// before them and the epilogue's loads after. The shapes are loaded at
// each call's start and released at its end, per thread (the tile state is
// the thread's; released, a context switch does not save it).
struct HwTiles {
  static void configure(int depth) {
    const TileShapes s = tile_shapes(depth);
    alignas(64) uint8_t cfg[64] = {};
    cfg[0] = 1;  // palette 1
    for (int t = 0; t < 8; ++t) {
      cfg[16 + 2 * t] = uint8_t(s.colsb[t]);  // bytes per row, 16 bits
      cfg[48 + t] = uint8_t(s.rows[t]);
    }
    asm volatile("ldtilecfg %0" ::"m"(cfg) : "memory");
  }
  static void release() { asm volatile("tilerelease" ::: "memory"); }
  template <int T>
  static void load(const void* p, int64_t stride) {
    asm volatile("tileloadd (%0,%1,1), %%tmm%c2" ::"r"(p), "r"(stride), "i"(T) : "memory");
  }
  template <int T>
  static void store(void* p) {  // rows 64 bytes apart
    asm volatile("tilestored %%tmm%c1, (%0,%2,1)" ::"r"(p), "i"(T), "r"(int64_t(64)) : "memory");
  }
  template <int T>
  static void zero() {
    asm volatile("tilezero %%tmm%c0" ::"i"(T));
  }
  template <int C, int A, int B>
  static void dot() {  // TDPBSSD: C += A . B, signed bytes, int32 sums
    asm volatile("tdpbssd %%tmm%c0, %%tmm%c1, %%tmm%c2" ::"i"(B), "i"(A), "i"(C));
  }
};

// A software model of the same unit, TDPBSSD as the instruction set
// reference defines it (C[m].dword[n] += the 4 products of A[m].dword[k]
// and B[k].dword[n], for each k): the kernel's every other step is tested
// with it where no AMX runs.
struct EmuTiles {
  struct State {
    int8_t t[8][16][64];
    TileShapes s;
  };
  static State& st() {
    thread_local State state;
    return state;
  }
  static void configure(int depth) {
    std::memset(st().t, 0, sizeof st().t);
    st().s = tile_shapes(depth);
  }
  static void release() {}
  template <int T>
  static void load(const void* p, int64_t stride) {
    for (int r = 0; r < st().s.rows[T]; ++r)
      std::memcpy(st().t[T][r], static_cast<const uint8_t*>(p) + r * stride,
                  size_t(st().s.colsb[T]));
  }
  template <int T>
  static void store(void* p) {
    for (int r = 0; r < st().s.rows[T]; ++r)
      std::memcpy(static_cast<uint8_t*>(p) + 64 * r, st().t[T][r], size_t(st().s.colsb[T]));
  }
  template <int T>
  static void zero() {
    std::memset(st().t[T], 0, sizeof st().t[T]);
  }
  template <int C, int A, int B>
  static void dot() {
    State& s = st();
    for (int m = 0; m < s.s.rows[A]; ++m)
      for (int n = 0; n < s.s.colsb[C] / 4; ++n) {
        int32_t c;
        std::memcpy(&c, &s.t[C][m][4 * n], 4);
        for (int k = 0; k < s.s.colsb[A] / 4; ++k)
          for (int i = 0; i < 4; ++i)
            c += int32_t(s.t[A][m][4 * k + i]) * int32_t(s.t[B][k][4 * n + i]);
        std::memcpy(&s.t[C][m][4 * n], &c, 4);
      }
  }
};

// A per-thread buffer of at least `bytes`, 64-byte aligned.
uint8_t* buffer(int slot, size_t bytes) {
  thread_local std::vector<uint8_t> bufs[3];
  std::vector<uint8_t>& b = bufs[slot];
  if (b.size() < bytes + 64) b.resize(bytes + 64);
  return reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(b.data()) + 63) & ~uintptr_t(63));
}

}  // namespace

LR_BEGIN_AVX512VNNI
namespace {

#include "backend/cpu/kernels/kernels_amx_isa.h"

// A tile of up to 16 tokens: their values of the column block at base,
// rows stride bytes apart; nt tokens, x the first's.
struct TokenTile {
  const int8_t* base;
  int64_t stride;
  int nt;
  const Acts* x;
};

// Blocks [b0, b1) for NA token tiles and NB weight tiles (the planes of one
// panel, or one or two panels of a one-plane format): U holds the blocks'
// B tiles (block stride 2 kSteps tiles, B tile j kSteps tiles in), pan[j]
// the panel whose rows B tile j (one-plane) or both planes are, y[j] its
// rows' outputs for the first tile's first token. The accumulators live in
// 4 KiB of L1 meanwhile (Y's rows, ldy apart, would share a few cache sets).
template <class Tl, class F, int NA, int NB>
void tile_blocks(const TokenTile* A, const uint8_t* U, const uint8_t* const* pan, float* const* y,
                 int64_t ldy, int64_t b0, int64_t b1) {
  constexpr int64_t kTile = F::kDepth / 4 * 64, kPlane = F::kSteps * kTile;
  constexpr int kPanels = F::kPlanes == 2 ? 1 : NB;
  auto* C = reinterpret_cast<int32_t*>(buffer(2, 4 * 1024));
  alignas(64) float acc[NA][kPanels][16 * 16];
  for (int a = 0; a < NA; ++a)
    for (int j = 0; j < kPanels; ++j)
      for (int t = 0; t < A[a].nt; ++t)
        for (int i = 0; i < 16; ++i)
          acc[a][j][16 * t + i] = b0 == 0 ? 0.f : y[j][(16 * a + t) * ldy + i];
  for (int64_t b = b0; b < b1; ++b) {
    Tl::template zero<4>();
    if constexpr (NB == 2) Tl::template zero<5>();
    if constexpr (NA == 2) Tl::template zero<6>();
    if constexpr (NA == 2 && NB == 2) Tl::template zero<7>();
    const uint8_t* ub = U + (b - b0) * 2 * kPlane;
    for (int s = 0; s < F::kSteps; ++s) {
      const int64_t at = (b - b0) * F::kValues + s * F::kDepth;
      Tl::template load<0>(A[0].base + at, A[0].stride);
      if constexpr (NA == 2) Tl::template load<1>(A[1].base + at, A[1].stride);
      Tl::template load<2>(ub + s * kTile, 64);
      if constexpr (NB == 2) Tl::template load<3>(ub + kPlane + s * kTile, 64);
      Tl::template dot<4, 0, 2>();
      if constexpr (NB == 2) Tl::template dot<5, 0, 3>();
      if constexpr (NA == 2) Tl::template dot<6, 1, 2>();
      if constexpr (NA == 2 && NB == 2) Tl::template dot<7, 1, 3>();
    }
    Tl::template store<4>(C);
    if constexpr (NB == 2) Tl::template store<5>(C + 256);
    if constexpr (NA == 2) Tl::template store<6>(C + 512);
    if constexpr (NA == 2 && NB == 2) Tl::template store<7>(C + 768);
    const uint8_t* pbs[kPanels];
    for (int j = 0; j < kPanels; ++j) pbs[j] = pan[j] + b * F::kBytes;
    for (int a = 0; a < NA; ++a)
      F::template finish<kPanels>(pbs, C + 512 * a, A[a].x, A[a].nt, b, acc[a][0]);
  }
  for (int a = 0; a < NA; ++a)
    for (int j = 0; j < kPanels; ++j)
      for (int t = 0; t < A[a].nt; ++t)
        std::memcpy(&y[j][(16 * a + t) * ldy], &acc[a][j][16 * t], 64);
}

template <class Tl, class F, int NA>
void tile_blocks_nb(int nb_tiles, const TokenTile* A, const uint8_t* U, const uint8_t* const* pan,
                    float* const* y, int64_t ldy, int64_t b0, int64_t b1) {
  if (nb_tiles == 2)
    tile_blocks<Tl, F, NA, 2>(A, U, pan, y, ldy, b0, b1);
  else
    tile_blocks<Tl, F, NA, 1>(A, U, pan, y, ldy, b0, b1);
}

// Columns a block of this many values at a time, and panels a group of
// kGroup passes at a time (a pass: one panel, or two of a one-plane
// format): a group's unpacked tiles, 8 x 32 KiB, stay in L2 while every
// token tile of the call runs over them, and a token's outputs of the group
// are 512 or 1024 consecutive bytes of Y (a pass at a time, the 16 or 32
// rows of 512 tokens spanned 512 pages of Y and as many TLB misses).
constexpr int64_t kColumnBlock = 1024;
constexpr int kGroup = 8;

// Panels [p0, p1) of nb blocks against the n tokens x (values q0 + k cols).
template <class Tl, class F>
void matmul_t(const uint8_t* P, int64_t nb, const Acts* x, int64_t n, float* Y, int64_t ldy,
              int64_t p0, int64_t p1) {
  constexpr int64_t kPlane = F::kSteps * (F::kDepth / 4 * 64);
  constexpr int kPanels = F::kPlanes == 2 ? 1 : 2;  // panels per pass: two B tiles either way
  const int64_t cols = nb * F::kValues, kb = std::max<int64_t>(1, kColumnBlock / F::kValues);
  const int64_t pass_bytes = kb * 2 * kPlane, whole = n / 16 * 16;
  const int tail_nt = int(n - whole);
  uint8_t* U = buffer(0, size_t(kGroup * pass_bytes));
  // The last tokens (fewer than 16) copied into a tile of 16 rows.
  auto* tail = reinterpret_cast<int8_t*>(buffer(1, size_t(16 * kb * F::kValues)));
  if (tail_nt) std::memset(tail, 0, size_t(16 * kb * F::kValues));
  Tl::configure(F::kDepth);
  for (int64_t b0 = 0; b0 < nb; b0 += kb) {
    const int64_t b1 = std::min(nb, b0 + kb), off = b0 * F::kValues;
    for (int r = 0; r < tail_nt; ++r)
      std::memcpy(tail + r * kb * F::kValues, x[whole + r].q + off, size_t((b1 - b0) * F::kValues));
    for (int64_t g0 = p0; g0 < p1; g0 += kGroup * kPanels) {
      const int64_t g1 = std::min(p1, g0 + kGroup * kPanels);
      // Pass k of the group: panels p .. p + np - 1, their tiles at U + k pass_bytes.
      auto panel = [&](int64_t p, int j) { return P + uint64_t(p + j) * uint64_t(nb) * F::kBytes; };
      for (int64_t p = g0; p < g1; p += kPanels)
        for (int64_t b = b0; b < b1; ++b)
          for (int j = 0; j < int(std::min<int64_t>(kPanels, g1 - p)); ++j)
            F::unpack(panel(p, j) + b * F::kBytes,
                      U + (p - g0) / kPanels * pass_bytes + ((b - b0) * 2 + j) * kPlane);
      for (int64_t t = 0; t < n; t += 32) {
        TokenTile A[2];
        int na = 0;
        for (int64_t t0 = t; t0 < std::min(n, t + 32); t0 += 16)
          A[na++] = t0 < whole ? TokenTile{x[t0].q + off, cols, 16, x + t0}
                               : TokenTile{tail, kb * F::kValues, tail_nt, x + t0};
        for (int64_t p = g0; p < g1; p += kPanels) {
          const int np = int(std::min<int64_t>(kPanels, g1 - p));
          const uint8_t* pan[2] = {panel(p, 0), panel(p, np - 1)};
          float* y[2] = {Y + t * ldy + 16 * p, Y + t * ldy + 16 * (p + np - 1)};
          const uint8_t* Up = U + (p - g0) / kPanels * pass_bytes;
          const int nbt = F::kPlanes == 2 ? 2 : np;
          if (na == 2)
            tile_blocks_nb<Tl, F, 2>(nbt, A, Up, pan, y, ldy, b0, b1);
          else
            tile_blocks_nb<Tl, F, 1>(nbt, A, Up, pan, y, ldy, b0, b1);
        }
      }
    }
  }
  Tl::release();
}

// The format's kernel over panels [p0, p1), on the tile unit Tl.
template <class Tl>
void run(DType t, const uint8_t* P, int64_t nb, const Acts* x, int64_t n, float* Y, int64_t ldy,
         int64_t p0, int64_t p1) {
  switch (t) {
    case DType::Q4_K:
      return matmul_t<Tl, Q45K<false>>(P, nb, x, n, Y, ldy, p0, p1);
    case DType::Q5_K:
      return matmul_t<Tl, Q45K<true>>(P, nb, x, n, Y, ldy, p0, p1);
    case DType::Q6_K:
      return matmul_t<Tl, Q6K>(P, nb, x, n, Y, ldy, p0, p1);
    case DType::Q4_0:
      return matmul_t<Tl, Small<DType::Q4_0>>(P, nb, x, n, Y, ldy, p0, p1);
    case DType::Q4_1:
      return matmul_t<Tl, Small<DType::Q4_1>>(P, nb, x, n, Y, ldy, p0, p1);
    case DType::Q5_0:
      return matmul_t<Tl, Small<DType::Q5_0>>(P, nb, x, n, Y, ldy, p0, p1);
    default:
      return matmul_t<Tl, Small<DType::Q5_1>>(P, nb, x, n, Y, ldy, p0, p1);
  }
}

}  // namespace
LR_END_AVX512VNNI

// Compiled for the baseline: nothing here runs an AVX-512 or tile
// instruction before the checks.
namespace {
// Whether the kernel takes this call: its format, whole panels, the tokens'
// values cols bytes apart (as quantize_block_inputs lays them out).
bool takes(DType t, const Acts* x, int64_t n, int64_t cols, int64_t r0, int64_t r1) {
  if (!amx_has_format(t) || n <= 0 || r0 % kPanelRows || r1 % kPanelRows) return false;
  for (int64_t k = 1; k < n; ++k)
    if (x[k].q != x[0].q + k * cols) return false;
  return true;
}
}  // namespace

bool matmul_panels_amx(DType t, const uint8_t* P, const Acts* x, int64_t n, float* Y, int64_t ldy,
                       int64_t cols, int64_t r0, int64_t r1) {
  if (!amx_prompts_ready() || !takes(t, x, n, cols, r0, r1)) return false;
  if (r1 > r0)
    run<HwTiles>(t, P, cols / int64_t(dtype_info(t).block_elems), x, n, Y, ldy, r0 / kPanelRows,
                 r1 / kPanelRows);
  return true;
}

bool matmul_panels_amx_emulated(DType t, const uint8_t* P, const Acts* x, int64_t n, float* Y,
                                int64_t ldy, int64_t cols, int64_t r0, int64_t r1) {
  if (!cpu_supports(Isa::Avx512Vnni) || !takes(t, x, n, cols, r0, r1)) return false;
  if (r1 > r0)
    run<EmuTiles>(t, P, cols / int64_t(dtype_info(t).block_elems), x, n, Y, ldy, r0 / kPanelRows,
                  r1 / kPanelRows);
  return true;
}

}  // namespace lr::cpu::detail
