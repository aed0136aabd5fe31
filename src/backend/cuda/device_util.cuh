// Device helpers shared by the CUDA kernel files: warp and block reductions
// and the RoPE rotation of one pair.
#pragma once

#include "backend/cuda/cuda_api.h"

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

__device__ __forceinline__ void rotate(float* x, int i, int pos, const double* inv_freq) {
  double sn, cs;
  sincos(double(pos) * inv_freq[i], &sn, &cs);
  const double a = x[2 * i], b = x[2 * i + 1];
  x[2 * i] = float(a * cs - b * sn);
  x[2 * i + 1] = float(a * sn + b * cs);
}

}  // namespace lr::cuda
