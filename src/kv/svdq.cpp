#include "kv/svdq.h"

#include <algorithm>
#include <cmath>

#include "linalg/blas.h"

#include "linalg/linalg.h"
#include "core/error.h"
#include "core/half.h"

namespace lr::kv {

std::vector<ChannelGroup> group_slices(int r, const std::vector<int>& schedule) {
  LR_ASSERT(r >= 0 && !schedule.empty());
  const int n = std::min(int(schedule.size()), r);
  std::vector<ChannelGroup> g;
  if (n == 0) return g;
  const int base = r / n, extra = r % n;
  int at = 0;
  for (int i = 0; i < n; ++i) {
    const int count = base + (i < extra ? 1 : 0);
    g.push_back({at, count, schedule[size_t(i)]});
    at += count;
  }
  return g;
}

KeyMoments::KeyMoments(int d_) : d(d_), sum(size_t(d_), 0.0), outer(size_t(d_) * size_t(d_), 0.0) {}

void KeyMoments::add(const float* k, int64_t n_rows, int64_t stride) {
  // Chunks of rows widened to double; outer += X^T X on the lower triangle (dsyrk).
  constexpr int64_t kChunk = 256;
  std::vector<double> X(size_t(std::min(n_rows, kChunk)) * size_t(d));
  for (int64_t t0 = 0; t0 < n_rows; t0 += kChunk) {
    const int64_t m = std::min(kChunk, n_rows - t0);
    for (int64_t t = 0; t < m; ++t)
      for (int i = 0; i < d; ++i) {
        const double x = k[(t0 + t) * stride + i];
        X[size_t(t) * size_t(d) + size_t(i)] = x;
        sum[size_t(i)] += x;
      }
    // Row-major outer[i][j], j <= i, is column-major's upper triangle.
    cblas_dsyrk(CblasColMajor, CblasUpper, CblasNoTrans, d, int(m), 1.0, X.data(), d, 1.0,
                outer.data(), d);
  }
  n += n_rows;
}

void rope_unrotate(float* x, int d, const std::vector<double>& freq, int64_t pos) {
  LR_ASSERT(int(freq.size()) * 2 == d);
  for (int i = 0; i < d / 2; ++i) {
    const double a = -double(pos) * freq[size_t(i)], c = std::cos(a), s = std::sin(a);
    const double x0 = x[2 * i], x1 = x[2 * i + 1];
    x[2 * i] = float(x0 * c - x1 * s);
    x[2 * i + 1] = float(x0 * s + x1 * c);
  }
}

namespace {
// The mean over p in [0, n) of the rotation by p * phi: [[c, -s], [s, c]].
void mean_rotation(double phi, int64_t n, double& c, double& s) {
  const double h = std::sin(phi / 2);
  if (std::fabs(h) < 1e-12) {  // phi a multiple of 2 pi: every rotation is the identity
    c = 1;
    s = 0;
    return;
  }
  // sum_p e^{i phi p} = e^{i phi (n-1)/2} sin(n phi / 2) / sin(phi / 2)
  const double mag = std::sin(double(n) * phi / 2) / h / double(n), arg = phi * double(n - 1) / 2;
  c = mag * std::cos(arg);
  s = mag * std::sin(arg);
}
}  // namespace

KeyMoments rope_spread(const KeyMoments& m, const std::vector<double>& freq, int64_t n_pos) {
  const int d = m.d, half = d / 2;
  LR_ASSERT(int(freq.size()) == half && m.n > 0 && n_pos > 0);
  const double inv = 1.0 / double(m.n);
  auto M = [&](int i, int j) {  // second moment, both triangles from the lower one
    return (i >= j ? m.outer[size_t(i) * size_t(d) + size_t(j)] : m.outer[size_t(j) * size_t(d) + size_t(i)]) * inv;
  };
  KeyMoments out(d);
  out.n = m.n;
  for (int i = 0; i < half; ++i) {  // mean: the averaged rotation applied to each pair's mean
    double c, s;
    mean_rotation(freq[size_t(i)], n_pos, c, s);
    const double x0 = m.sum[size_t(2 * i)] * inv, x1 = m.sum[size_t(2 * i + 1)] * inv;
    out.sum[size_t(2 * i)] = double(m.n) * (c * x0 - s * x1);
    out.sum[size_t(2 * i + 1)] = double(m.n) * (s * x0 + c * x1);
  }
  // Block (i, j) of R_p M R_p^T: with X = a I + b J + g K + e L (J a quarter
  // turn, K and L reflections), the rotation part turns by p (f_i - f_j) and
  // the reflection part by -p (f_i + f_j).
  for (int i = 0; i < half; ++i)
    for (int j = 0; j <= i; ++j) {
      const double x00 = M(2 * i, 2 * j), x01 = M(2 * i, 2 * j + 1), x10 = M(2 * i + 1, 2 * j),
                   x11 = M(2 * i + 1, 2 * j + 1);
      const double a = (x00 + x11) / 2, b = (x10 - x01) / 2, g = (x00 - x11) / 2, e = (x01 + x10) / 2;
      double c1, s1, c2, s2;
      mean_rotation(freq[size_t(i)] - freq[size_t(j)], n_pos, c1, s1);
      mean_rotation(-(freq[size_t(i)] + freq[size_t(j)]), n_pos, c2, s2);
      // (a I + b J) [[c1, -s1], [s1, c1]] + (g K + e L) [[c2, -s2], [s2, c2]]
      const double y00 = (a * c1 - b * s1) + (g * c2 + e * s2);
      const double y01 = (-a * s1 - b * c1) + (-g * s2 + e * c2);
      const double y10 = (b * c1 + a * s1) + (e * c2 - g * s2);
      const double y11 = (-b * s1 + a * c1) + (-e * s2 - g * c2);
      const double y[2][2] = {{y00, y01}, {y10, y11}};
      for (int r = 0; r < 2; ++r)
        for (int q = 0; q < 2; ++q) {
          const int row = 2 * i + r, col = 2 * j + q;
          const double v = double(m.n) * y[r][q];
          if (row >= col) out.outer[size_t(row) * size_t(d) + size_t(col)] = v;
          else out.outer[size_t(col) * size_t(d) + size_t(row)] = v;  // i == j: the block's upper entry
        }
    }
  return out;
}

int rank_for_energy(const std::vector<double>& sigma, double energy, EnergyMode mode) {
  auto e = [&](double s) { return mode == EnergyMode::Sigma ? s : s * s; };
  double total = 0;
  for (double s : sigma) total += e(s);
  if (!(total > 1e-12)) return 1;
  double run = 0;
  for (size_t i = 0; i < sigma.size(); ++i) {
    run += e(sigma[i]);
    // A relative tolerance so an energy of exactly 1 is reached at full rank.
    if (run >= energy * total * (1 - 1e-12)) return int(i + 1);
  }
  return int(sigma.size());
}

int SvdqBasis::stored_channels() const {
  int n = 0;
  for (const ChannelGroup& g : groups)
    if (g.bits > 0) n += g.count;
  return n;
}

KeyEigen fit_eigen(const KeyMoments& m) {
  const int d = m.d;
  if (m.n < 2) fail("svdq: a basis needs at least 2 keys, got {}", m.n);
  KeyEigen out;
  out.d = d;
  out.n_keys = m.n;
  std::vector<double> mean(static_cast<size_t>(d));
  for (int i = 0; i < d; ++i) mean[size_t(i)] = m.sum[size_t(i)] / double(m.n);
  linalg::MatD C(d, d);
  for (int i = 0; i < d; ++i)
    for (int j = 0; j <= i; ++j)
      C(i, j) = m.outer[size_t(i) * size_t(d) + size_t(j)] - double(m.n) * mean[size_t(i)] * mean[size_t(j)];
  linalg::Eigh e = linalg::eigh(C);  // descending, deterministic signs
  out.mean.assign(mean.begin(), mean.end());
  out.sigma.resize(size_t(d));
  out.vectors.resize(size_t(d) * size_t(d));
  for (int c = 0; c < d; ++c) {
    out.sigma[size_t(c)] = std::sqrt(std::max(e.values[size_t(c)], 0.0));
    for (int i = 0; i < d; ++i) out.vectors[size_t(c) * size_t(d) + size_t(i)] = float(e.vectors(i, c));
  }
  return out;
}

KeyEigen fit_eigen_weighted(const KeyMoments& keys, const KeyMoments& queries) {
  KeyEigen plain = fit_eigen(keys);
  const int d = keys.d;
  if (queries.n < 1) fail("svdq: the query metric needs queries to fit on");
  linalg::MatD Q(d, d), C(d, d);
  double trace = 0;
  for (int i = 0; i < d; ++i) trace += queries.outer[size_t(i) * size_t(d) + size_t(i)] / double(queries.n);
  for (int i = 0; i < d; ++i)
    for (int j = 0; j <= i; ++j) {
      Q(i, j) = Q(j, i) = queries.outer[size_t(i) * size_t(d) + size_t(j)] / double(queries.n);
      double cij = keys.outer[size_t(i) * size_t(d) + size_t(j)] -
                   double(keys.n) * double(plain.mean[size_t(i)]) * double(plain.mean[size_t(j)]);
      C(i, j) = C(j, i) = cij;
    }
  // Regularized so that directions no query uses keep a little weight.
  for (int i = 0; i < d; ++i) Q(i, i) += 1e-3 * trace / d + 1e-12;
  const linalg::MatD L = linalg::cholesky(Q);
  const linalg::MatD M = linalg::matmul(linalg::matmul(L, C, true, false), L);  // L^T C L
  const linalg::Eigh e = linalg::eigh(M);
  const linalg::MatD P = linalg::matmul(L, e.vectors);  // columns L u_c
  linalg::MatD B = e.vectors;
  linalg::trsm(linalg::Side::Left, linalg::Uplo::Lower, true, L, B);  // columns L^-T u_c
  KeyEigen out = plain;
  out.proj.resize(size_t(d) * size_t(d));
  for (int c = 0; c < d; ++c) {
    out.sigma[size_t(c)] = std::sqrt(std::max(e.values[size_t(c)], 0.0));
    for (int i = 0; i < d; ++i) {
      out.proj[size_t(c) * size_t(d) + size_t(i)] = float(P(i, c));
      out.vectors[size_t(c) * size_t(d) + size_t(i)] = float(B(i, c));
    }
  }
  return out;
}

SvdqBasis make_basis(const KeyEigen& e, const SvdqConfig& cfg) {
  cfg.validate();
  const int d = e.d;
  SvdqBasis b;
  b.d = d;
  b.mean = e.mean;
  b.sigma = e.sigma;
  // Centring removes one dimension: at most n - 1 directions carry energy.
  const int cap = int(std::min<int64_t>(e.n_keys - 1, d));
  int r = cfg.rank > 0 ? std::min(cfg.rank, cap)
                       : std::min(rank_for_energy(b.sigma, cfg.energy, cfg.energy_mode), cap);
  r = std::max(r, 1);
  b.rank = r;
  b.schedule = cfg.schedule;
  const bool truncating = std::find(cfg.schedule.begin(), cfg.schedule.end(), 0) != cfg.schedule.end();
  if (truncating && r < cfg.min_safe_rank()) {
    if (cfg.rank > 0)
      fail("svdq: rank {} (of {} requested, {} keys to fit) is too small for the schedule's 0-bit "
           "groups: below rank {} (4 channels per group) they drop channels that still carry "
           "signal; fit on more keys or use a schedule without zeros",
           r, cfg.rank, e.n_keys, cfg.min_safe_rank());
    for (int& w : b.schedule) w = std::max(w, 1);
    b.degraded = true;
  }
  b.groups = group_slices(r, b.schedule);
  b.v.assign(e.vectors.begin(), e.vectors.begin() + ptrdiff_t(r) * d);
  if (!e.proj.empty()) b.p.assign(e.proj.begin(), e.proj.begin() + ptrdiff_t(r) * d);
  return b;
}

SvdqBasis fit_basis(const KeyMoments& m, const SvdqConfig& cfg) {
  cfg.validate();
  return make_basis(fit_eigen(m), cfg);
}

// --- quantizer ----------------------------------------------------------------

void pack_codes(const uint8_t* codes, int n, int bits, uint32_t* words, uint64_t bit0) {
  LR_ASSERT(bits >= 1 && bits <= 8);
  for (int i = 0; i < n; ++i) {
    const uint64_t at = bit0 + uint64_t(i) * uint64_t(bits);
    const uint64_t w = at / 32, sh = at % 32;
    const uint32_t c = codes[i] & ((1u << bits) - 1u);
    words[w] |= c << sh;
    if (sh + uint64_t(bits) > 32) words[w + 1] |= c >> (32 - sh);
  }
}

void unpack_codes(const uint32_t* words, uint64_t bit0, int n, int bits, uint8_t* codes) {
  LR_ASSERT(bits >= 1 && bits <= 8);
  const uint32_t mask = (1u << bits) - 1u;
  for (int i = 0; i < n; ++i) {
    const uint64_t at = bit0 + uint64_t(i) * uint64_t(bits);
    const uint64_t w = at / 32, sh = at % 32;
    uint32_t c = words[w] >> sh;
    if (sh + uint64_t(bits) > 32) c |= words[w + 1] << (32 - sh);
    codes[i] = uint8_t(c & mask);
  }
}

uint16_t f16_round_down(float x) {
  uint16_t h = f32_to_f16(x);
  if (f16_to_f32(h) <= x) return h;
  // One step toward -inf: magnitude up for negatives, down for positives.
  if (h == 0x0000) return 0x8001;
  return (h & 0x8000) ? uint16_t(h + 1) : uint16_t(h - 1);
}

uint16_t f16_round_up(float x) {
  uint16_t h = f32_to_f16(x);
  if (f16_to_f32(h) >= x) return h;
  if (h == 0x8000) return 0x0001;
  return (h & 0x8000) ? uint16_t(h - 1) : uint16_t(h + 1);
}

BlockLayout::BlockLayout(int tokens_, std::vector<int> bits_) : tokens(tokens_), bits(std::move(bits_)) {
  uint64_t at = 0;
  for (int b : bits) {
    LR_ASSERT(b >= 1 && b <= 8);
    bit_off.push_back(at);
    at += uint64_t(tokens) * uint64_t(b);
  }
  code_words = int((at + 31) / 32);
}

void quantize_block(const BlockLayout& lay, const float* X, int64_t ldx, uint16_t* scale_min,
                    uint32_t* codes) {
  std::fill_n(codes, lay.code_words, 0u);
  uint8_t q[256];
  LR_ASSERT(lay.tokens <= 256);
  for (int c = 0; c < lay.channels(); ++c) {
    float lo = INFINITY, hi = -INFINITY;
    for (int t = 0; t < lay.tokens; ++t) {
      lo = std::min(lo, X[t * ldx + c]);
      hi = std::max(hi, X[t * ldx + c]);
    }
    const int levels = (1 << lay.bits[size_t(c)]) - 1;
    const uint16_t mh = f16_round_down(lo);
    const float m = f16_to_f32(mh);
    const uint16_t sh = f16_round_up((hi - m) / float(levels));
    const float s = f16_to_f32(sh);
    scale_min[c] = sh;
    scale_min[lay.channels() + c] = mh;
    for (int t = 0; t < lay.tokens; ++t) {
      const float v = s > 0 ? std::nearbyint((X[t * ldx + c] - m) / s) : 0.f;
      q[t] = uint8_t(std::clamp(v, 0.f, float(levels)));
    }
    pack_codes(q, lay.tokens, lay.bits[size_t(c)], codes, lay.bit_off[size_t(c)]);
  }
}

void dequantize_block(const BlockLayout& lay, const uint16_t* scale_min, const uint32_t* codes,
                      float* L, int64_t ldl) {
  uint8_t q[256];
  for (int c = 0; c < lay.channels(); ++c) {
    unpack_codes(codes, lay.bit_off[size_t(c)], lay.tokens, lay.bits[size_t(c)], q);
    const float s = f16_to_f32(scale_min[c]), m = f16_to_f32(scale_min[lay.channels() + c]);
    for (int t = 0; t < lay.tokens; ++t) L[t * ldl + c] = float(q[t]) * s + m;
  }
}

}  // namespace lr::kv
