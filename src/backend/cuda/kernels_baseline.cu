// CUDA kernels of the research baselines only (model/plan_transforms.h): the
// static rung's RoPE, scores, softmax and weighted sum over a materialized
// score row, and the legacy rung's latent cache and history reconstruction.
#include <algorithm>

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.cuh"

namespace lr::cuda {

namespace {

constexpr int kReconPositions = 4;

__global__ void rope_kernel(const int* pos0, RopeArgs r, DevVec q, DevVec k) {
  const int t = blockIdx.x, pos = *pos0 + t, half = r.head_dim / 2;
  const int heads = r.n_heads + (k.p ? r.n_kv_heads : 0);
  for (int e = threadIdx.x; e < heads * half; e += blockDim.x) {
    const int h = e / half, i = e % half;
    float* x = h < r.n_heads ? q.p + t * q.stride + h * r.head_dim
                             : k.p + t * k.stride + (h - r.n_heads) * r.head_dim;
    rotate(x, i, pos, r.inv_freq, r.mscale);
  }
}

// The first key a static-KV query at pos sees (a windowed layer's window).
__device__ __forceinline__ int first_key(const StaticArgs& a, int pos) {
  return a.window > 0 ? max(0, pos - a.window + 1) : 0;
}

// Static: one warp per key, every query head's score (keys before the window: none).
__global__ void scores_kernel(const int* pos0, StaticArgs a, DevVec q) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int j = blockIdx.x * (blockDim.x / kWarp) + warp, pos = *pos0;
  if (j > pos || j < first_key(a, pos)) return;
  const int G = a.n_heads / a.n_kv_heads;
  const float scale = a.scale > 0.f ? a.scale : rsqrtf(float(a.head_dim));
  for (int h = 0; h < a.n_heads; ++h) {
    const __half* k = a.k + int64_t(j) * a.kv_dim + (h / G) * a.head_dim;
    float s = 0.f;
    for (int d = lane; d < a.head_dim; d += kWarp)
      s += q.p[h * a.head_dim + d] * __half2float(k[d]);
    s = warp_sum(s);
    if (lane == 0) a.scores[int64_t(h) * a.ctx + j] = s * scale;
  }
}

__global__ void softmax_kernel(const int* pos0, StaticArgs a) {
  float* s = a.scores + int64_t(blockIdx.x) * a.ctx;
  const int n = *pos0 + 1, j0 = first_key(a, *pos0);
  float mx = -INFINITY;
  for (int j = j0 + threadIdx.x; j < n; j += blockDim.x) mx = fmaxf(mx, s[j]);
  mx = block_max(mx);
  float sum = 0.f;
  for (int j = j0 + threadIdx.x; j < n; j += blockDim.x) sum += (s[j] = __expf(s[j] - mx));
  sum = block_sum(sum);
  for (int j = j0 + threadIdx.x; j < n; j += blockDim.x) s[j] /= sum;
}

__global__ void mix_kernel(const int* pos0, StaticArgs a, DevVec att) {
  LR_DYNAMIC_SHARED(float, part);  // [groups, head_dim] (blockDim.x = groups * head_dim)
  const int h = blockIdx.x, G = a.n_heads / a.n_kv_heads, D = a.head_dim;
  const int groups = blockDim.x / D, grp = threadIdx.x / D, d = threadIdx.x % D, n = *pos0 + 1;
  const float* s = a.scores + int64_t(h) * a.ctx;
  float acc = 0.f;
  for (int j = first_key(a, *pos0) + grp; j < n; j += groups)
    acc += s[j] * __half2float(a.v[int64_t(j) * a.kv_dim + (h / G) * D + d]);
  part[grp * D + d] = acc;
  __syncthreads();
  if (grp == 0) {
    for (int g = 1; g < groups; ++g) acc += part[g * D + d];
    att.p[h * D + d] = acc;
  }
}

// --- legacy KV -----------------------------------------------------------------

__global__ void latent_append_kernel(const int* pos0, DevVec p, LatentRef l) {
  const int t = blockIdx.x, pos = *pos0 + t;
  const float* x = p.p + t * p.stride;
  for (int64_t i = threadIdx.x; i < l.k_rank; i += blockDim.x)
    l.k[pos * l.k_ld + i] = __float2half(x[l.k_off + i]);
  for (int64_t i = threadIdx.x; i < l.v_rank; i += blockDim.x)
    l.v[pos * l.v_ld + i] = __float2half(x[l.v_off + i]);
}

// Positions [j0, j0 + kReconPositions) of one side: out[j] = U L[j] (roped for k).
__device__ void reconstruct_side(int j0, int last, const __half* lat, int64_t lat_ld, int64_t rank,
                                 DevMatrix u, float* out, int64_t kv_dim, const RopeArgs* rope,
                                 float* ls) {
  const int np = min(kReconPositions, last - j0 + 1);
  __syncthreads();  // ls may still be read for the other side
  for (int64_t e = threadIdx.x; e < int64_t(np) * rank; e += blockDim.x)
    ls[e] = __half2float(lat[(j0 + e / rank) * lat_ld + e % rank]);
  __syncthreads();
  for (int64_t r = threadIdx.x; r < kv_dim; r += blockDim.x) {
    const __nv_bfloat16* row = u.w + r * u.ld;
    float acc[kReconPositions] = {};
    for (int64_t i = 0; i < rank; ++i) {
      const float w = __bfloat162float(row[i]);
#pragma unroll
      for (int p = 0; p < kReconPositions; ++p)
        if (p < np) acc[p] += w * ls[p * rank + i];
    }
    for (int p = 0; p < np; ++p) out[(j0 + p) * kv_dim + r] = acc[p];
  }
  if (!rope) return;
  __syncthreads();
  const int half = rope->head_dim / 2;
  for (int64_t e = threadIdx.x; e < int64_t(np) * (kv_dim / 2); e += blockDim.x) {
    const int p = int(e / (kv_dim / 2));
    const int64_t pair = e % (kv_dim / 2);
    rotate(out + (j0 + p) * kv_dim + (pair / half) * rope->head_dim, int(pair % half), j0 + p,
           rope->inv_freq, rope->mscale);
  }
}

__global__ void reconstruct_kernel(const int* pos0, int n, LatentRef l, DevMatrix uk, DevMatrix uv,
                                   RopeArgs r, float* k_all, float* v_all, int64_t kv_dim) {
  LR_DYNAMIC_SHARED(float, ls);  // [kReconPositions, max rank]
  const int last = *pos0 + n - 1, j0 = blockIdx.x * kReconPositions;
  if (j0 > last) return;
  reconstruct_side(j0, last, l.k, l.k_ld, l.k_rank, uk, k_all, kv_dim, &r, ls);
  reconstruct_side(j0, last, l.v, l.v_ld, l.v_rank, uv, v_all, kv_dim, nullptr, ls);
}

}  // namespace

cudaError_t prepare_reconstruct(int64_t max_latent) {
  static size_t recon_limit = 0;  // per process, only ever raised
  const size_t r = size_t(std::max<int64_t>(max_latent, 1)) * kReconPositions * sizeof(float);
  if (r > recon_limit) {
    const cudaError_t e = cudaFuncSetAttribute(reconstruct_kernel,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize, int(r));
    if (e != cudaSuccess) return e;
    recon_limit = r;
  }
  return cudaSuccess;
}

cudaError_t launch_rope(cudaStream_t s, int n, const int* pos0, RopeArgs r, DevVec q, DevVec k) {
  LR_LAUNCH(n, 128, 0, s, rope_kernel)(pos0, r, q, k);
  return cudaGetLastError();
}

cudaError_t launch_scores(cudaStream_t s, const int* pos0, const StaticArgs& a, DevVec q) {
  LR_LAUNCH((a.ctx + 7) / 8, 8 * kWarp, 0, s, scores_kernel)(pos0, a, q);
  return cudaGetLastError();
}

cudaError_t launch_softmax(cudaStream_t s, const int* pos0, const StaticArgs& a) {
  LR_LAUNCH(a.n_heads, 256, 0, s, softmax_kernel)(pos0, a);
  return cudaGetLastError();
}

cudaError_t launch_mix(cudaStream_t s, const int* pos0, const StaticArgs& a, DevVec att) {
  const int threads = std::max(1, 256 / a.head_dim) * a.head_dim;  // whole groups of a head
  LR_LAUNCH(a.n_heads, threads, size_t(threads) * sizeof(float), s, mix_kernel)(pos0, a, att);
  return cudaGetLastError();
}

cudaError_t launch_latent_append(cudaStream_t s, int n, const int* pos0, DevVec p, LatentRef l) {
  LR_LAUNCH(n, 256, 0, s, latent_append_kernel)(pos0, p, l);
  return cudaGetLastError();
}

cudaError_t launch_reconstruct(cudaStream_t s, int n, const int* pos0, int ctx, LatentRef l,
                               DevMatrix uk, DevMatrix uv, RopeArgs r, float* k_all, float* v_all,
                               int64_t kv_dim) {
  const size_t smem =
      size_t(std::max<int64_t>(std::max(l.k_rank, l.v_rank), 1)) * kReconPositions * sizeof(float);
  LR_LAUNCH((ctx + kReconPositions - 1) / kReconPositions, 256, smem, s, reconstruct_kernel)
  (pos0, n, l, uk, uv, r, k_all, v_all, kv_dim);
  return cudaGetLastError();
}

}  // namespace lr::cuda
