// CUDA kernels of attention (see kernels.cuh for the conventions): RoPE and
// the cache append as a step of their own, the split-K attention of the
// queries over the cache (RoPE and the append fused into it, decode), and
// the merge of its partials. A head is 32, 64, 96, 128 or 256 values, each
// a template instance of the one attention kernel (attend_head_dim).
#include <algorithm>

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.cuh"

namespace lr::cuda {

namespace {

constexpr int kAttendWarps = 4;
constexpr int kMaxGroup = 8;  // query heads per KV head

// q and k heads turned at the rows' positions (angle in double, as the
// reference), then the k and v rows written into the cache.
__global__ void rope_append_kernel(Rows rows, RopeArgs r, DevVec q, DevVec k, DevVec v, CacheRef c,
                                   bool rope) {
  const int t = blockIdx.x, pos = rows.at(t), half = r.head_dim / 2;
  c.k += rows.cache_off(t);
  c.v += rows.cache_off(t);
  if (rope) {
    for (int e = threadIdx.x; e < r.n_heads * half; e += blockDim.x)
      rotate(q.p + t * q.stride + (e / half) * r.head_dim, e % half, pos, r.inv_freq, r.mscale);
    for (int e = threadIdx.x; e < r.n_kv_heads * half; e += blockDim.x) {
      float* x = k.p + t * k.stride + (e / half) * r.head_dim;
      rotate(x, e % half, pos, r.inv_freq, r.mscale);
    }
    __syncthreads();  // the roped k row is read below by other threads
  }
  for (int64_t e = threadIdx.x; e < c.kv_dim; e += blockDim.x) {
    c.k[int64_t(pos) * c.kv_dim + e] = __float2half(k.p[t * k.stride + e]);
    c.v[int64_t(pos) * c.kv_dim + e] = __float2half(v.p[t * v.stride + e]);
  }
}

template <typename T>
__device__ __forceinline__ float load_f(const T* p) {
  if constexpr (sizeof(T) == 2)
    return __half2float(*p);
  else
    return *p;
}

// The G query heads a warp holds (lane: elements lane * E .. lane * E + E - 1
// of each) turned at pos, as rotate() turns them. With E even a lane holds
// whole pairs; with E odd (head_dim 32, 96) a lane's edge element pairs with
// the neighbouring lane's (lane ^ 1), exchanged by a shuffle. Every lane of
// the warp calls this.
template <int E>
__device__ __forceinline__ void rope_lanes(float (&qr)[kMaxGroup][E], int G, int lane, int pos,
                                           const double* inv_freq, double mscale) {
  // An odd lane's first element (E odd) is the second of a pair.
  const bool odd = E % 2 == 1 && lane % 2 == 1;
  double cs[E], sn[E];
  bool turns[E];
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const int prev = e > 0 ? e - 1 : 0;
    if (E % 2 == 0 && e % 2 == 1) {  // the pair of element e - 1
      cs[e] = cs[prev];
      sn[e] = sn[prev];
      turns[e] = turns[prev];
      continue;
    }
    turns[e] = pair_angle((lane * E + e) / 2, pos, inv_freq, mscale, &cs[e], &sn[e]);
  }
#pragma unroll
  for (int g = 0; g < kMaxGroup; ++g) {
    if (g >= G) break;
    float edge = 0.f;
    if constexpr (E % 2 == 1) edge = __shfl_xor_sync(0xffffffffu, odd ? qr[g][0] : qr[g][E - 1], 1);
    float y[E];
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const float x = qr[g][e];
      const float next = e + 1 < E ? qr[g][e + 1 < E ? e + 1 : e] : edge;
      const float prev = e > 0 ? qr[g][e > 0 ? e - 1 : e] : edge;
      const bool second = (e % 2 == 1) != odd;
      y[e] = !turns[e] ? x
             : second  ? turned(prev, x, cs[e], sn[e], 1)
                       : turned(x, next, cs[e], sn[e], 0);
    }
#pragma unroll
    for (int e = 0; e < E; ++e) qr[g][e] = y[e];
  }
}

// Fused decode: the block whose chunk holds the position ropes its KV head's
// k row and writes it and the v row into the cache.
template <int D>
__device__ void append_row(const AttendArgs& a, int t, int kvh, int pos) {
  __half* kc = static_cast<__half*>(const_cast<void*>(a.k)) + int64_t(pos) * a.kv_dim + kvh * D;
  __half* vc = static_cast<__half*>(const_cast<void*>(a.v)) + int64_t(pos) * a.kv_dim + kvh * D;
  const float* kn = a.new_k.p + t * a.new_k.stride + kvh * D;
  const float* vn = a.new_v.p + t * a.new_v.stride + kvh * D;
  for (int i = threadIdx.x; i < D / 2; i += blockDim.x) {
    float pair[2] = {kn[2 * i], kn[2 * i + 1]};
    rotate(pair, 0, pos, a.inv_freq + i, a.mscale);
    kc[2 * i] = __float2half(pair[0]);
    kc[2 * i + 1] = __float2half(pair[1]);
    vc[2 * i] = __float2half(vn[2 * i]);
    vc[2 * i + 1] = __float2half(vn[2 * i + 1]);
  }
}

// One block: token t, KV head kvh, keys [c * chunk, ...) up to its position
// (from its window's first, a windowed layer); its kAttendWarps warps take
// every 4th key, each with an online softmax per query head of the group,
// merged at the end into one partial per head. A chunk wholly outside the
// token's keys writes nothing (merge reads its keys' chunks only).
template <int D, typename T>
__global__ void attend_kernel(AttendArgs a, DevVec q, Rows rows) {
  constexpr int E = D / kWarp;
  const int c = blockIdx.x, kvh = blockIdx.y, t = blockIdx.z;
  const int pos = rows.at(t);
  const int start = c * kAttendChunk;
  const int from = a.window > 0 ? max(0, pos - a.window + 1) : 0;
  if (rows.slot) {  // this row's slot's cache (f16)
    a.k = static_cast<const __half*>(a.k) + rows.cache_off(t);
    a.v = static_cast<const __half*>(a.v) + rows.cache_off(t);
  }
  if (start > pos || start + kAttendChunk <= from) return;
  const int end = min(start + kAttendChunk, pos + 1);
  const int G = a.n_heads / a.n_kv_heads;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const float scale = a.scale > 0.f ? a.scale : rsqrtf(float(D));
  float qr[kMaxGroup][E], acc[kMaxGroup][E], m[kMaxGroup], l[kMaxGroup];
#pragma unroll
  for (int g = 0; g < kMaxGroup; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.f;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      qr[g][e] = g < G ? q.p[t * q.stride + (kvh * G + g) * D + lane * E + e] : 0.f;
      acc[g][e] = 0.f;
    }
  }
  if (a.inv_freq) {  // fused: rope q here, and (the position's chunk) k, then append k and v
    rope_lanes<E>(qr, G, lane, pos, a.inv_freq, a.mscale);
    if (pos < start + kAttendChunk) {
      append_row<D>(a, t, kvh, pos);
      __syncthreads();  // the row is read below by every warp
    }
  }
#pragma unroll
  for (int g = 0; g < kMaxGroup; ++g)
#pragma unroll
    for (int e = 0; e < E; ++e) qr[g][e] *= scale;
  const T* K = static_cast<const T*>(a.k);
  const T* V = static_cast<const T*>(a.v);
  for (int j = max(start, from) + warp; j < end; j += kAttendWarps) {
    float kv[E], vv[E];
#pragma unroll
    for (int e = 0; e < E; ++e) {
      kv[e] = load_f(K + int64_t(j) * a.kv_dim + kvh * D + lane * E + e);
      vv[e] = load_f(V + int64_t(j) * a.kv_dim + kvh * D + lane * E + e);
    }
#pragma unroll
    for (int g = 0; g < kMaxGroup; ++g) {
      if (g >= G) break;
      float s = 0.f;
#pragma unroll
      for (int e = 0; e < E; ++e) s += qr[g][e] * kv[e];
      s = warp_sum(s);
      const float mn = fmaxf(m[g], s), corr = __expf(m[g] - mn), p = __expf(s - mn);
      l[g] = l[g] * corr + p;
#pragma unroll
      for (int e = 0; e < E; ++e) acc[g][e] = acc[g][e] * corr + p * vv[e];
      m[g] = mn;
    }
  }
  __shared__ float sm[kAttendWarps][kMaxGroup], sl[kAttendWarps][kMaxGroup];
  __shared__ float sacc[kAttendWarps][kMaxGroup][D];
#pragma unroll
  for (int g = 0; g < kMaxGroup; ++g) {
    if (g >= G) break;
    if (lane == 0) {
      sm[warp][g] = m[g];
      sl[warp][g] = l[g];
    }
#pragma unroll
    for (int e = 0; e < E; ++e) sacc[warp][g][lane * E + e] = acc[g][e];
  }
  __syncthreads();
  for (int e = threadIdx.x; e < G * D; e += blockDim.x) {
    const int g = e / D, d = e % D;
    float M = -INFINITY;
    for (int w = 0; w < kAttendWarps; ++w) M = fmaxf(M, sm[w][g]);
    float L = 0.f, A = 0.f;
    for (int w = 0; w < kAttendWarps; ++w) {
      const float f = sm[w][g] == -INFINITY ? 0.f : __expf(sm[w][g] - M);
      L += sl[w][g] * f;
      A += sacc[w][g][d] * f;
    }
    const int64_t slot = (int64_t(t) * a.n_heads + kvh * G + g) * a.chunks + c;
    a.part_acc[slot * D + d] = A;
    if (d == 0) {
      a.part_m[slot] = M;
      a.part_l[slot] = L;
    }
  }
}

// att[t, h] = the token's chunks' partials (those of its keys), renormalized.
__global__ void merge_kernel(AttendArgs a, DevVec att, Rows rows) {
  const int h = blockIdx.x, t = blockIdx.y, d = threadIdx.x;
  const int pos = rows.at(t), first = first_chunk(pos, a.window);
  const int64_t base = (int64_t(t) * a.n_heads + h) * a.chunks + first;
  att.p[t * att.stride + h * a.head_dim + d] = merge_partials(
      a.part_m, a.part_l, a.part_acc, base, pos / kAttendChunk + 1 - first, a.head_dim, d);
}

template <int D>
cudaError_t launch_attend_d(cudaStream_t s, int n, Rows rows, const AttendArgs& a, DevVec q) {
  static_assert(attend_head_dim(D) && D % kWarp == 0, "a head is whole lanes of a warp");
  const dim3 grid(a.chunks, a.n_kv_heads, n);
  const int threads = kAttendWarps * kWarp;
  if (a.f32)
    LR_LAUNCH(grid, threads, 0, s, attend_kernel<D, float>)(a, q, rows);
  else
    LR_LAUNCH(grid, threads, 0, s, attend_kernel<D, __half>)(a, q, rows);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_rope_append(cudaStream_t s, int n, Rows rows, RopeArgs r, DevVec q, DevVec k,
                               DevVec v, CacheRef c, bool rope) {
  LR_LAUNCH(n, 128, 0, s, rope_append_kernel)(rows, r, q, k, v, c, rope);
  return cudaGetLastError();
}

cudaError_t launch_attend(cudaStream_t s, int n, Rows rows, const AttendArgs& a, DevVec q) {
  if (rows.slot && a.f32) return cudaErrorInvalidValue;  // slots: the f16 cache only
  if (a.n_heads > kMaxGroup * a.n_kv_heads) return cudaErrorInvalidValue;
  switch (a.head_dim) {
    case 32:
      return launch_attend_d<32>(s, n, rows, a, q);
    case 64:
      return launch_attend_d<64>(s, n, rows, a, q);
    case 96:
      return launch_attend_d<96>(s, n, rows, a, q);
    case 128:
      return launch_attend_d<128>(s, n, rows, a, q);
    case 256:
      return launch_attend_d<256>(s, n, rows, a, q);
    default:
      return cudaErrorInvalidValue;
  }
}

cudaError_t launch_merge(cudaStream_t s, int n, Rows rows, const AttendArgs& a, DevVec att) {
  LR_LAUNCH(dim3(a.n_heads, n), a.head_dim, 0, s, merge_kernel)(a, att, rows);
  return cudaGetLastError();
}

}  // namespace lr::cuda
