// Device helpers shared by the CUDA kernel files: warp and block reductions,
// the RoPE rotation of one pair, the gate's activation and the merge of
// split-K attention partials.
#pragma once

#include "backend/cuda/cuda_api.h"
#include "backend/cuda/kernels.cuh"

namespace lr::cuda {

constexpr int kWarp = 32;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum of v over the block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
__device__ inline float block_sum(float v) {
  __shared__ float part[32];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  v = warp_sum(v);
  __syncthreads();  // part[] may still be read by a previous call
  if (lane == 0) part[warp] = v;
  __syncthreads();
  const int nw = blockDim.x / kWarp;
  float t = lane < nw ? part[lane] : 0.f;
  return warp_sum(t);
}
__device__ inline float block_max(float v) {
  __shared__ float part[32];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) part[warp] = v;
  __syncthreads();
  const int nw = blockDim.x / kWarp;
  float t = lane < nw ? part[lane] : -INFINITY;
  return warp_max(t);
}

// The cosine and sine of pair i's angle at pos (in double, as the
// reference), scaled by mscale; false for a pair of frequency 0, which does
// not turn (model/scalar_ops.h rope).
__device__ __forceinline__ bool pair_angle(int i, int pos, const double* inv_freq, double mscale,
                                           double* cs, double* sn) {
  const double f = inv_freq[i];
  if (f == 0) return false;
  sincos(double(pos) * f, sn, cs);
  *cs *= mscale;
  *sn *= mscale;
  return true;
}
// Element `second` (0 or 1) of the pair (a, b) turned by (cs, sn).
__device__ __forceinline__ float turned(double a, double b, double cs, double sn, int second) {
  return second ? float(a * sn + b * cs) : float(a * cs - b * sn);
}
__device__ __forceinline__ void rotate(float* x, int i, int pos, const double* inv_freq,
                                       double mscale) {
  double sn, cs;
  if (!pair_angle(i, pos, inv_freq, mscale, &cs, &sn)) return;
  const double a = x[2 * i], b = x[2 * i + 1];
  x[2 * i] = turned(a, b, cs, sn, 0);
  x[2 * i + 1] = turned(a, b, cs, sn, 1);
}

// act(x) of a gated FFN: SiLU, or GELU's tanh form.
__device__ __forceinline__ float gate_act(Gate g, float x) {
  if (g == Gate::GeluTanh)
    return 0.5f * x * (1.f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
  return x / (1.f + __expf(-x));
}

// Element d of one token's and head's attention output: its split-K partials
// base .. base + nc - 1 merged (the online softmax's rescaling).
__device__ __forceinline__ float merge_partials(const float* pm, const float* pl, const float* pacc,
                                                int64_t base, int nc, int head_dim, int d) {
  float M = -INFINITY;
  for (int i = 0; i < nc; ++i) M = fmaxf(M, pm[base + i]);
  float L = 0.f, A = 0.f;
  for (int i = 0; i < nc; ++i) {
    const float f = __expf(pm[base + i] - M);
    L += pl[base + i] * f;
    A += pacc[(base + i) * head_dim + d] * f;
  }
  return A / L;
}

}  // namespace lr::cuda
