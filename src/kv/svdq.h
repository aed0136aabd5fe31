// SVDq building blocks: the basis fit, the rank rule, the latent channel
// groups, and the per-channel block quantizer with its bit packing. The key
// cache (key_stream.h) strings them together; KIVI-2 reuses the quantizer
// with the identity basis.
#pragma once

#include <cstdint>
#include <vector>

#include "kv/key_config.h"

namespace lr::kv {

// A contiguous run of latent channels quantized at one width.
struct ChannelGroup {
  int begin = 0, count = 0, bits = 0;
};

// Splits r channels into min(schedule.size(), r) contiguous groups, the first
// r mod n one channel wider; group i gets schedule[i] bits. r = 5 with the
// default schedule: five one-channel groups at 8, 4, 2, 1, 1 bits.
std::vector<ChannelGroup> group_slices(int r, const std::vector<int>& schedule);

// Streamed first and second moments of keys [n, d] in double precision.
struct KeyMoments {
  int d = 0;
  int64_t n = 0;
  std::vector<double> sum;    // [d]
  std::vector<double> outer;  // [d, d] sum of k k^T (lower triangle filled)
  explicit KeyMoments(int d_ = 0);
  void add(const float* k, int64_t n_rows, int64_t stride);
};

// RoPE turns pair i = (x[2i], x[2i+1]) of a key at position p by p * freq[i].
// Post-RoPE keys seen at positions [0, S) do not span what keys at later
// positions will: the slow pairs have barely turned. rope_spread takes the
// moments of keys rotated back to position 0 (rope_unrotate) and returns the
// mean and second moment they would have if each key appeared at every
// position of [0, n_pos) alike (closed form per 2x2 block), which is what a
// cache of n_pos positions holds.
void rope_unrotate(float* x, int d, const std::vector<double>& freq, int64_t pos);
KeyMoments rope_spread(const KeyMoments& unrotated, const std::vector<double>& freq, int64_t n_pos);

// The smallest r whose cumulative energy of `sigma` (descending) reaches
// `energy`; Sigma2 mode measures sigma^2. All-zero spectrum: r = 1.
int rank_for_energy(const std::vector<double>& sigma, double energy, EnergyMode mode);

struct SvdqBasis {
  int d = 0;
  int rank = 0;                     // channels kept before dropping 0-bit groups
  std::vector<ChannelGroup> groups; // of the effective schedule, over [0, rank)
  std::vector<int> schedule;        // effective widths (0s turned to 1s when degraded)
  bool degraded = false;            // automatic rank below min_safe_rank: no 0-bit groups
  std::vector<double> sigma;        // singular values of the centred keys, descending [d]
  std::vector<float> mean;          // [d] K-bar
  std::vector<float> v;             // [rank, d]: row c = direction c of the reconstruction
                                    // k^ = mean + sum_c l_c v_c (key metric: right singular vector c)
  std::vector<float> p;             // [rank, d] projection rows, l_c = p_c . (k - mean);
                                    // empty: p = v (the key metric's orthonormal basis)
  int stored_channels() const;      // channels in groups with bits > 0 (a prefix of groups)
};

// Fits mean and basis from the moments: covariance C = sum kk^T - n mean mean^T,
// eigenvectors of C (LAPACK dsyevd) with sigma = sqrt(eigenvalue), signs
// fixed so each vector's largest-magnitude component is positive. Rank from
// cfg (explicit, clamped to min(n - 1, d)) or the energy rule, at most
// min(n - 1, d). Throws lr::Error for an explicit rank too small for a
// truncating schedule (the message names the rank and min_safe_rank).
SvdqBasis fit_basis(const KeyMoments& m, const SvdqConfig& cfg);

// The full eigen-system of a fit, as `lowrank calibrate-kv` stores it:
// vectors [d, d] (row c = direction c), sigma [d] descending, mean [d], and
// the number of keys it was fitted on.
struct KeyEigen {
  int d = 0;
  int64_t n_keys = 0;
  std::vector<float> mean, vectors;
  std::vector<float> proj;  // [d, d] query metric: projection rows (empty: = vectors)
  std::vector<double> sigma;
};
KeyEigen fit_eigen(const KeyMoments& m);
// Query-aware: with Q = E[q q^T] (from `queries`, lightly regularized) = L L^T,
// the eigenvectors u_c of L^T C L give projection rows p_c = L u_c and
// reconstruction directions v_c = L^-T u_c, so that the score error
// E[(q.(k - k^))^2] is the sum of the latent channels' squared errors, each
// weighted alike, and sigma_c^2 is channel c's share of the score variance.
KeyEigen fit_eigen_weighted(const KeyMoments& keys, const KeyMoments& queries);
// Rank, schedule and guard rail of cfg applied to an eigen-system.
SvdqBasis make_basis(const KeyEigen& e, const SvdqConfig& cfg);

// --- quantizer ----------------------------------------------------------------

// Bit streams: codes of `bits` bits, least significant bit first, code i at
// bit offset bit0 + i * bits of `words` (codes may straddle words).
void pack_codes(const uint8_t* codes, int n, int bits, uint32_t* words, uint64_t bit0);
void unpack_codes(const uint32_t* words, uint64_t bit0, int n, int bits, uint8_t* codes);

// One quantized block of `tokens` tokens x C channels, channel c at width
// bits[c] (1..8; channels of width 0 are not stored). Per channel an f16 min
// m (rounded down) and f16 scale s (rounded up) with every value inside
// [m, m + (2^b - 1) s]; codes round((x - m) / s), half to even; x^ = code s + m,
// so |x - x^| <= s / 2 + rounding.
struct BlockLayout {
  int tokens = 0;
  std::vector<int> bits;          // [C] width of channel c
  std::vector<uint64_t> bit_off;  // [C] where channel c's codes start in the block's stream
  int code_words = 0;             // 32-bit words of codes per block
  BlockLayout() = default;
  BlockLayout(int tokens, std::vector<int> bits);
  int channels() const { return int(bits.size()); }
  // Bytes of one block: codes plus an f16 scale and min per channel.
  uint64_t bytes() const { return uint64_t(code_words) * 4 + uint64_t(channels()) * 4; }
};

// X [tokens, C] (row stride ldx) -> scale_min [2][C] (f16 scales, then f16 mins) and
// codes [code_words] (zeroed here).
void quantize_block(const BlockLayout& lay, const float* X, int64_t ldx, uint16_t* scale_min,
                    uint32_t* codes);
// The inverse: L [tokens, C] (row stride ldl).
void dequantize_block(const BlockLayout& lay, const uint16_t* scale_min, const uint32_t* codes,
                      float* L, int64_t ldl);

// f16 rounding that never goes up (min) or down (scale) (helpers of the above).
uint16_t f16_round_down(float x);
uint16_t f16_round_up(float x);

}  // namespace lr::kv
