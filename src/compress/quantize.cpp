#include "compress/quantize.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "core/quants.h"

namespace lr::compress {

namespace {

using quants::BlockCodes;

// Steps tried per block: range / (levels + delta), delta in [-0.5, 1.5].
constexpr int kDeltas = 21;
float delta(int i) {
  return -0.5f + 0.1f * float(i);
}

float as_f16(float v) {
  return f16_to_f32(f32_to_f16(v));
}

int round_clamp(float v, int lo, int hi) {
  return std::clamp(int(std::lround(v)), lo, hi);
}

// x[0, len) ~ s q with q in [qlo, qhi] (qlo < 0 < qhi): the s with the least
// weighted squared error among the candidates; q is left unset.
float fit_symmetric(const float* x, const float* w, int len, int qlo, int qhi) {
  float v = 0;  // the value of largest magnitude
  for (int i = 0; i < len; ++i)
    if (std::fabs(x[i]) > std::fabs(v)) v = x[i];
  if (v == 0) return 0;
  float best_s = v / float(qhi), best_err = std::numeric_limits<float>::infinity();
  for (int target : {qlo, qhi}) {
    for (int k = 0; k < kDeltas; ++k) {
      const float s0 = v / (float(target) + (target < 0 ? -delta(k) : delta(k)));
      double sxq = 0, sqq = 0;
      for (int i = 0; i < len; ++i) {
        const int q = round_clamp(x[i] / s0, qlo, qhi);
        sxq += double(w[i]) * x[i] * q;
        sqq += double(w[i]) * q * q;
      }
      const float s = sqq > 0 ? float(sxq / sqq) : s0;
      if (s == 0) continue;
      double err = 0;
      for (int i = 0; i < len; ++i) {
        const float e = x[i] - s * float(round_clamp(x[i] / s, qlo, qhi));
        err += double(w[i]) * e * e;
      }
      if (err < best_err) best_err = float(err), best_s = s;
    }
  }
  return best_s;
}

// x[0, len) ~ d q + lo with q in [0, qmax], d >= 0 (and lo <= 0 when
// `lo_at_most_zero`, as the K-quants store a non-negative min to subtract).
struct Affine {
  float d = 0, lo = 0;
};
Affine fit_affine(const float* x, const float* w, int len, int qmax, bool lo_at_most_zero) {
  float mn = x[0], mx = x[0];
  for (int i = 1; i < len; ++i) mn = std::min(mn, x[i]), mx = std::max(mx, x[i]);
  if (lo_at_most_zero) mn = std::min(mn, 0.f);
  if (mx <= mn) return {0, mn};
  Affine best{(mx - mn) / float(qmax), mn};
  double best_err = std::numeric_limits<double>::infinity();
  for (int k = 0; k < kDeltas; ++k) {
    const float d0 = (mx - mn) / (float(qmax) + delta(k));
    double sw = 0, sq = 0, sqq = 0, sx = 0, sxq = 0;
    for (int i = 0; i < len; ++i) {
      const double q = round_clamp((x[i] - mn) / d0, 0, qmax);
      sw += w[i], sq += w[i] * q, sqq += w[i] * q * q, sx += w[i] * x[i], sxq += w[i] * x[i] * q;
    }
    // Weighted least squares for (d, lo) given q; lo pinned to 0 when it must not be positive.
    Affine a{d0, mn};
    const double det = sqq * sw - sq * sq;
    if (det > 0) {
      a.d = float((sxq * sw - sq * sx) / det);
      a.lo = float((sqq * sx - sq * sxq) / det);
      if (lo_at_most_zero && a.lo > 0) a.lo = 0, a.d = sqq > 0 ? float(sxq / sqq) : d0;
    }
    if (!(a.d > 0)) a = {d0, mn};
    double err = 0;
    for (int i = 0; i < len; ++i) {
      const float e = x[i] - (a.d * float(round_clamp((x[i] - a.lo) / a.d, 0, qmax)) + a.lo);
      err += double(w[i]) * e * e;
    }
    if (err < best_err) best_err = err, best = a;
  }
  return best;
}

// Q8_0, Q4_0, Q5_0: one f16 scale per 32.
void block_symmetric(DType t, const float* x, const float* w, uint8_t* blk) {
  const int qlo = t == DType::Q8_0 ? -127 : t == DType::Q4_0 ? -8 : -16;
  const int qhi = t == DType::Q8_0 ? 127 : -qlo - 1;
  BlockCodes c;
  c.d = as_f16(fit_symmetric(x, w, quants::kQK, qlo, qhi));
  for (int i = 0; i < quants::kQK; ++i)
    c.q[i] = int16_t(c.d != 0 ? round_clamp(x[i] / c.d, qlo, qhi) : 0);
  quants::pack_block(t, c, blk);
}

// Q4_1, Q5_1: f16 step and offset per 32.
void block_affine(DType t, const float* x, const float* w, uint8_t* blk) {
  const int qmax = t == DType::Q4_1 ? 15 : 31;
  const Affine a = fit_affine(x, w, quants::kQK, qmax, false);
  BlockCodes c;
  c.d = as_f16(a.d);
  c.m = as_f16(a.lo);
  for (int i = 0; i < quants::kQK; ++i)
    c.q[i] = int16_t(c.d > 0 ? round_clamp((x[i] - c.m) / c.d, 0, qmax) : 0);
  quants::pack_block(t, c, blk);
}

// Q2_K, Q4_K, Q5_K: sub-blocks x ~ d sc q - m mn, with unsigned integer
// scales and mins against the super-block's f16 d and m.
void block_k_affine(DType t, const float* x, const float* w, uint8_t* blk) {
  const bool two = t == DType::Q2_K;
  const int len = two ? 16 : 32, subs = quants::kQKK / len;
  const int qmax = two ? 3 : t == DType::Q4_K ? 15 : 31, smax = two ? 15 : 63;
  Affine a[16];
  float top_d = 0, top_m = 0;
  for (int s = 0; s < subs; ++s) {
    a[s] = fit_affine(x + s * len, w + s * len, len, qmax, true);
    top_d = std::max(top_d, a[s].d);
    top_m = std::max(top_m, -a[s].lo);
  }
  BlockCodes c;
  c.d = as_f16(top_d / float(smax));
  c.m = as_f16(top_m / float(smax));
  for (int s = 0; s < subs; ++s) {
    c.sc[s] = int16_t(c.d > 0 ? round_clamp(a[s].d / c.d, 0, smax) : 0);
    c.mn[s] = int16_t(c.m > 0 ? round_clamp(-a[s].lo / c.m, 0, smax) : 0);
    const float step = c.d * float(c.sc[s]), off = c.m * float(c.mn[s]);
    for (int i = s * len; i < (s + 1) * len; ++i)
      c.q[i] = int16_t(step > 0 ? round_clamp((x[i] + off) / step, 0, qmax) : 0);
  }
  quants::pack_block(t, c, blk);
}

// Q3_K, Q6_K: sub-blocks of 16, x ~ d sc q with signed integer scales.
void block_k_symmetric(DType t, const float* x, const float* w, uint8_t* blk) {
  const bool three = t == DType::Q3_K;
  const int qlo = three ? -4 : -32, qhi = -qlo - 1;
  const int slo = three ? -32 : -128, shi = -slo - 1;
  float s[16], v = 0;  // v: the sub-block scale of largest magnitude
  for (int b = 0; b < 16; ++b) {
    s[b] = fit_symmetric(x + 16 * b, w + 16 * b, 16, qlo, qhi);
    if (std::fabs(s[b]) > std::fabs(v)) v = s[b];
  }
  BlockCodes c;
  c.d = as_f16(v / float(slo));  // v maps to the longer side of the integer range
  for (int b = 0; b < 16; ++b) {
    c.sc[b] = int16_t(c.d != 0 ? round_clamp(s[b] / c.d, slo, shi) : 0);
    const float step = c.d * float(c.sc[b]);
    for (int i = 16 * b; i < 16 * (b + 1); ++i)
      c.q[i] = int16_t(step != 0 ? round_clamp(x[i] / step, qlo, qhi) : 0);
  }
  quants::pack_block(t, c, blk);
}

}  // namespace

bool can_quantize(DType t) {
  switch (t) {
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
      return true;
    default:
      return false;
  }
}

void quantize_row(DType t, const float* x, const float* importance, uint8_t* dst, int64_t n) {
  LR_ASSERT(can_quantize(t));
  const DTypeInfo info = dtype_info(t);
  LR_ASSERT(n % info.block_elems == 0);
  // Uniform weights, or the importance with a floor so that a block whose
  // columns all have zero importance still gets a fit.
  std::vector<float> w(size_t(n), 1.f);
  if (importance != nullptr) {
    double mean = 0;
    for (int64_t i = 0; i < n; ++i) mean += importance[i];
    mean /= double(n);
    const float floor = float(mean > 0 ? 1e-6 * mean : 1.0);
    for (int64_t i = 0; i < n; ++i) w[size_t(i)] = importance[i] + floor;
  }
  for (int64_t b = 0; b < n / info.block_elems; ++b) {
    const float* xb = x + b * info.block_elems;
    const float* wb = w.data() + b * info.block_elems;
    uint8_t* blk = dst + b * info.block_bytes;
    switch (t) {
      case DType::Q8_0:
      case DType::Q4_0:
      case DType::Q5_0:
        block_symmetric(t, xb, wb, blk);
        break;
      case DType::Q4_1:
      case DType::Q5_1:
        block_affine(t, xb, wb, blk);
        break;
      case DType::Q2_K:
      case DType::Q4_K:
      case DType::Q5_K:
        block_k_affine(t, xb, wb, blk);
        break;
      default:
        block_k_symmetric(t, xb, wb, blk);
        break;
    }
  }
}

void quantize_rows(DType t, int64_t rows, int64_t cols,
                   const std::function<void(int64_t, float*)>& row_of, const float* importance,
                   uint8_t* dst, int threads) {
  const uint64_t rb = *row_bytes(t, uint64_t(cols));
  auto work = [&](int64_t r0, int64_t r1) {
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = r0; r < r1; ++r) {
      row_of(r, row.data());
      quantize_row(t, row.data(), importance, dst + uint64_t(r) * rb, cols);
    }
  };
  const int n = std::max(1, threads);
  std::vector<std::thread> pool;
  for (int i = 1; i < n; ++i) pool.emplace_back(work, rows * i / n, rows * (i + 1) / n);
  work(0, rows / n);
  for (std::thread& th : pool) th.join();
}

}  // namespace lr::compress
