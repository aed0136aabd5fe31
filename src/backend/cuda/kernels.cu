// CUDA kernels of the forward pass (see kernels.cuh for the conventions).
// Each runs one kind of step of the model's plan (model/plan.h): linear ->
// gemv/gemm, rms_norm, rope + append, attend (split-K online softmax), merge,
// silu * mul, residual add. The research baselines' kernels (static and
// legacy KV) are in kernels_baseline.cu.
#include <algorithm>

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.cuh"

namespace lr::cuda {

namespace {

constexpr int kGemvRows = 8;  // rows per GEMV block (one warp each)
constexpr int kTile = 64;     // GEMM tile: rows x tokens
constexpr int kTileK = 32;
constexpr int kAttendWarps = 4;
constexpr int kMaxGroup = 8;  // query heads per KV head

__device__ __forceinline__ float silu(float x) {
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

// Element c = h * head_dim + d of the decode token's attention output (a fused GEMV input).
__device__ __forceinline__ float merged(const MergeRef& r, int64_t c) {
  const int h = int(c / r.head_dim), d = int(c % r.head_dim);
  return merge_partials(r.m, r.l, r.acc, int64_t(h) * r.chunks, *r.pos0 / kAttendChunk + 1,
                        r.head_dim, d);
}

// Which job of a multi-job launch block `b` belongs to, given `per` rows per block.
__device__ __forceinline__ int job_of(const GemvArgs& a, int& b, int per) {
  int j = 0;
  for (; j + 1 < a.n_jobs; ++j) {
    const int nb = int((rows_of(a.job[j]) + per - 1) / per);
    if (b < nb) break;
    b -= nb;
  }
  return j;
}

int blocks_of(const GemvArgs& a, int per) {
  int n = 0;
  for (int j = 0; j < a.n_jobs; ++j) n += int((rows_of(a.job[j]) + per - 1) / per);
  return n;
}

// --- matrix products -----------------------------------------------------------

// The GEMVs' arithmetic, one place: 8 bf16 weights (one 16-byte load) as
// floats, and their products with x[0..8) summed in this order.
struct W8 {
  float2 f0, f1, f2, f3;
};
__device__ __forceinline__ W8 unpack8(const uint4& raw) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
  return {__bfloat1622float2(h[0]), __bfloat1622float2(h[1]), __bfloat1622float2(h[2]),
          __bfloat1622float2(h[3])};
}
__device__ __forceinline__ float dot8(const W8& w, const float4& x0, const float4& x1) {
  return w.f0.x * x0.x + w.f0.y * x0.y + w.f1.x * x0.z + w.f1.y * x0.w + w.f2.x * x1.x +
         w.f2.y * x1.y + w.f3.x * x1.z + w.f3.y * x1.w;
}

// Decode: the input (normed, or SiLU*mul'd) staged in shared memory, padded
// with zeros to the matrix's ld; one warp per row, 8 bf16 per lane per load.
__global__ void gemv_kernel(GemvArgs a) {
  LR_DYNAMIC_SHARED(float4, xs_vec);  // 16-byte aligned: read as float4 below
  float* xs = reinterpret_cast<float*>(xs_vec);
  int b = blockIdx.x;
  const int j = job_of(a, b, kGemvRows);
  const GemvJob& J = a.job[j];
  const int64_t cols = J.m.cols, ld = J.m.ld;
  const float* in = J.in.p + J.in_off;
  float inv = 1.f;
  if (J.norm) {
    float ss = 0.f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) ss += in[c] * in[c];
    ss = block_sum(ss);
    inv = rsqrtf(ss / float(cols) + a.eps);
  }
  for (int64_t c = threadIdx.x; c < ld; c += blockDim.x) {
    float x = 0.f;
    if (c < cols) {
      x = J.merge ? merged(a.merge, c) : in[c];
      if (J.norm) x = x * inv * J.norm[c];
      if (J.in2.p) x = silu(x) * J.in2.p[J.in_off + c];
    }
    xs[c] = x;
  }
  __syncthreads();
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t r = int64_t(b) * kGemvRows + warp;
  if (r >= rows_of(J)) return;
  // Pivoted: row r of the output is M's row source[r], or a latent copied.
  const int32_t src = J.source ? J.source[r] : int32_t(r);
  const __nv_bfloat16* row = J.m.w + int64_t(src >= 0 ? src : 0) * ld;
  float acc = 0.f;
  // Unrolled so that several of the row's 16-byte loads per lane are in flight (the sums
  // keep their order).
#pragma unroll 4
  for (int64_t c = int64_t(lane) * 8; src >= 0 && c < ld; c += kWarp * 8) {
    const uint4 raw = *reinterpret_cast<const uint4*>(row + c);
    acc += dot8(unpack8(raw), *reinterpret_cast<const float4*>(xs + c),
                *reinterpret_cast<const float4*>(xs + c + 4));
  }
  acc = src >= 0 ? warp_sum(acc) : xs[-1 - src];
  if (lane == 0) {
    float* out = J.out.p + J.out_off;
    if (J.bias) acc += J.bias[r];
    out[r] = J.accumulate ? out[r] + acc : acc;
  }
}

// The decode rows of a batch step (launch_batch_products): one warp per output
// row r reads M[r] once for the n <= kBatchRows rows t and computes M[r] . x_t
// as the one-row GEMV does (lane-strided 8-term partial sums, then the warp
// sum), x_t read from global memory. Row t's arithmetic does not depend on n.
__global__ void gemv_rows_kernel(GemvArgs a, int n) {
  int b = blockIdx.x;
  const int j = job_of(a, b, kGemvRows);
  const GemvJob& J = a.job[j];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t r = int64_t(b) * kGemvRows + warp;
  if (r >= rows_of(J)) return;
  const int64_t cols = J.m.cols, ld = J.m.ld;
  const int32_t src = J.source ? J.source[r] : int32_t(r);  // < 0: a pivot row (x copied)
  const __nv_bfloat16* row = J.m.w + int64_t(src >= 0 ? src : 0) * ld;
  float acc[kBatchRows] = {};
  for (int64_t c = int64_t(lane) * 8; src >= 0 && c < ld; c += kWarp * 8) {
    const W8 w = unpack8(*reinterpret_cast<const uint4*>(row + c));
#pragma unroll
    for (int t = 0; t < kBatchRows; ++t) {
      if (t >= n) break;
      const float* in = J.in.p + t * J.in.stride + J.in_off + c;
      float x[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) x[i] = c + i < cols ? in[i] : 0.f;  // zeros past cols, as staged
      acc[t] += dot8(w, make_float4(x[0], x[1], x[2], x[3]), make_float4(x[4], x[5], x[6], x[7]));
    }
  }
#pragma unroll
  for (int t = 0; t < kBatchRows; ++t) {
    if (t >= n) break;
    float y = src >= 0 ? warp_sum(acc[t]) : J.in.p[t * J.in.stride + J.in_off + (-1 - src)];
    if (lane == 0) {
      float* out = J.out.p + t * J.out.stride + J.out_off;
      if (J.bias) y += J.bias[r];
      out[r] = J.accumulate ? out[r] + y : y;
    }
  }
}

// Prefill: Y[t, r] over a 64-row x 64-token tile per block, 4 x 4 per thread.
__global__ void gemm_kernel(GemvArgs a, int n) {
  __shared__ float ws[kTileK][kTile + 1];
  __shared__ float xs[kTileK][kTile + 1];
  int b = blockIdx.x;
  const int j = job_of(a, b, kTile);
  const GemvJob& J = a.job[j];
  const int64_t r0 = int64_t(b) * kTile, t0 = int64_t(blockIdx.y) * kTile;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  float acc[4][4] = {};
  for (int64_t k0 = 0; k0 < J.m.cols; k0 += kTileK) {
    for (int e = threadIdx.x; e < kTile * kTileK; e += blockDim.x) {
      const int rr = e / kTileK, kk = e % kTileK;
      const int64_t r = r0 + rr, k = k0 + kk, t = t0 + rr;
      // A pivot row (source < 0) is the one-hot row of its latent: 1 . x[k] exactly.
      float w = 0.f;
      if (r < rows_of(J) && k < J.m.cols) {
        const int32_t src = J.source ? J.source[r] : int32_t(r);
        w = src >= 0 ? __bfloat162float(J.m.w[int64_t(src) * J.m.ld + k]) : float(k == -1 - src);
      }
      ws[kk][rr] = w;
      xs[kk][rr] = t < n && k < J.m.cols ? J.in.p[t * J.in.stride + J.in_off + k] : 0.f;
    }
    __syncthreads();
#pragma unroll 8
    for (int kk = 0; kk < kTileK; ++kk) {
      float wv[4], xv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) wv[i] = ws[kk][tx + 16 * i];
#pragma unroll
      for (int i = 0; i < 4; ++i) xv[i] = xs[kk][ty + 16 * i];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int q = 0; q < 4; ++q) acc[i][q] += wv[i] * xv[q];
    }
    __syncthreads();
  }
  for (int i = 0; i < 4; ++i)
    for (int q = 0; q < 4; ++q) {
      const int64_t r = r0 + tx + 16 * i, t = t0 + ty + 16 * q;
      if (r >= rows_of(J) || t >= n) continue;
      float* out = J.out.p + t * J.out.stride + J.out_off + r;
      const float y = J.bias ? acc[i][q] + J.bias[r] : acc[i][q];
      *out = J.accumulate ? *out + y : y;
    }
}

// --- elementwise ---------------------------------------------------------------

__global__ void embed_kernel(const int32_t* tokens, DevMatrix emb, DevVec x) {
  const int t = blockIdx.x;
  const __nv_bfloat16* row = emb.w + int64_t(tokens[t]) * emb.ld;
  for (int64_t c = threadIdx.x; c < emb.cols; c += blockDim.x)
    x.p[t * x.stride + c] = __bfloat162float(row[c]);
}

__global__ void rms_norm_kernel(DevVec a, DevVec b, const float* norm, int64_t width, float eps) {
  const int t = blockIdx.x;
  const float* x = a.p + t * a.stride;
  float ss = 0.f;
  for (int64_t c = threadIdx.x; c < width; c += blockDim.x) ss += x[c] * x[c];
  const float inv = rsqrtf(block_sum(ss) / float(width) + eps);
  for (int64_t c = threadIdx.x; c < width; c += blockDim.x)
    b.p[t * b.stride + c] = x[c] * inv * norm[c];
}

// Head blockIdx.x of row blockIdx.y of a normalized in place (q/k norms).
__global__ void head_norm_kernel(DevVec a, const float* norm, int64_t hd, float eps) {
  float* x = a.p + int64_t(blockIdx.y) * a.stride + int64_t(blockIdx.x) * hd;
  float ss = 0.f;
  for (int64_t c = threadIdx.x; c < hd; c += blockDim.x) ss += x[c] * x[c];
  const float inv = rsqrtf(block_sum(ss) / float(hd) + eps);
  for (int64_t c = threadIdx.x; c < hd; c += blockDim.x) x[c] = x[c] * inv * norm[c];
}

__global__ void split_bf16_kernel(DevVec in, int64_t in_off, int64_t cols, __nv_bfloat16* hi,
                                  __nv_bfloat16* lo, int64_t ld) {
  const int t = blockIdx.x;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float x = in.p[t * in.stride + in_off + c];
    const __nv_bfloat16 h = __float2bfloat16(x);
    hi[t * ld + c] = h;
    lo[t * ld + c] = __float2bfloat16(x - __bfloat162float(h));
  }
}

__global__ void add_kernel(int n, DevVec x, DevVec y, int64_t width) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(n) * width) return;
  const int64_t t = i / width, c = i % width;
  x.p[t * x.stride + c] += y.p[t * y.stride + c];
}

__global__ void silu_mul_kernel(int n, DevVec g, DevVec u, int64_t width) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(n) * width) return;
  const int64_t t = i / width, c = i % width;
  float& x = g.p[t * g.stride + c];
  x = silu(x) * u.p[t * u.stride + c];
}

// Rotates the pair (x[2i], x[2i+1]) by pos * inv_freq[i] (angle in double, as the reference).
__global__ void rope_append_kernel(Rows rows, RopeArgs r, DevVec q, DevVec k, DevVec v,
                                   CacheRef c, bool rope) {
  const int t = blockIdx.x, pos = rows.at(t), half = r.head_dim / 2;
  c.k += rows.cache_off(t);
  c.v += rows.cache_off(t);
  if (rope) {
    for (int e = threadIdx.x; e < r.n_heads * half; e += blockDim.x)
      rotate(q.p + t * q.stride + (e / half) * r.head_dim, e % half, pos, r.inv_freq);
    for (int e = threadIdx.x; e < r.n_kv_heads * half; e += blockDim.x) {
      float* x = k.p + t * k.stride + (e / half) * r.head_dim;
      rotate(x, e % half, pos, r.inv_freq);
    }
    __syncthreads();  // the roped k row is read below by other threads
  }
  for (int64_t e = threadIdx.x; e < c.kv_dim; e += blockDim.x) {
    c.k[int64_t(pos) * c.kv_dim + e] = __float2half(k.p[t * k.stride + e]);
    c.v[int64_t(pos) * c.kv_dim + e] = __float2half(v.p[t * v.stride + e]);
  }
}

// --- attention -----------------------------------------------------------------

template <typename T>
__device__ __forceinline__ float load_f(const T* p) {
  if constexpr (sizeof(T) == 2)
    return __half2float(*p);
  else
    return *p;
}

// One block: token t, KV head kvh, keys [c * chunk, ...) up to its position;
// its kAttendWarps warps take every 4th key, each with an online softmax per
// query head of the group, merged at the end into one partial per head.
template <int D, typename T>
__global__ void attend_kernel(AttendArgs a, DevVec q, Rows rows) {
  constexpr int E = D / kWarp;
  const int c = blockIdx.x, kvh = blockIdx.y, t = blockIdx.z;
  const int pos = rows.at(t);
  const int start = c * kAttendChunk;
  if (rows.slot) {  // this row's slot's cache (f16)
    a.k = static_cast<const __half*>(a.k) + rows.cache_off(t);
    a.v = static_cast<const __half*>(a.v) + rows.cache_off(t);
  }
  if (start > pos) return;
  const int end = min(start + kAttendChunk, pos + 1);
  const int G = a.n_heads / a.n_kv_heads;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const float scale = rsqrtf(float(D));
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
  if (a.inv_freq) {  // fused: rope q here, and (last chunk) k, then append k and v
    static_assert(E % 2 == 0, "a lane holds whole rope pairs");
#pragma unroll
    for (int g = 0; g < kMaxGroup; ++g) {
      if (g >= G) break;
#pragma unroll
      for (int e = 0; e < E; e += 2) {
        float pair[2] = {qr[g][e], qr[g][e + 1]};
        rotate(pair, 0, pos, a.inv_freq + (lane * E + e) / 2);
        qr[g][e] = pair[0];
        qr[g][e + 1] = pair[1];
      }
    }
    if (pos < start + kAttendChunk) {  // this chunk holds the position: write its row
      __half* kc = static_cast<__half*>(const_cast<void*>(a.k)) + int64_t(pos) * a.kv_dim + kvh * D;
      __half* vc = static_cast<__half*>(const_cast<void*>(a.v)) + int64_t(pos) * a.kv_dim + kvh * D;
      const float* kn = a.new_k.p + t * a.new_k.stride + kvh * D;
      const float* vn = a.new_v.p + t * a.new_v.stride + kvh * D;
      for (int i = threadIdx.x; i < D / 2; i += blockDim.x) {
        float pair[2] = {kn[2 * i], kn[2 * i + 1]};
        rotate(pair, 0, pos, a.inv_freq + i);
        kc[2 * i] = __float2half(pair[0]);
        kc[2 * i + 1] = __float2half(pair[1]);
        vc[2 * i] = __float2half(vn[2 * i]);
        vc[2 * i + 1] = __float2half(vn[2 * i + 1]);
      }
      __syncthreads();  // the row is read below by every warp
    }
  }
#pragma unroll
  for (int g = 0; g < kMaxGroup; ++g)
#pragma unroll
    for (int e = 0; e < E; ++e) qr[g][e] *= scale;
  const T* K = static_cast<const T*>(a.k);
  const T* V = static_cast<const T*>(a.v);
  for (int j = start + warp; j < end; j += kAttendWarps) {
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

// att[t, h] = sum over the token's chunks of the partials, renormalized.
__global__ void merge_kernel(AttendArgs a, DevVec att, Rows rows) {
  const int h = blockIdx.x, t = blockIdx.y, d = threadIdx.x;
  const int pos = rows.at(t), nc = pos / kAttendChunk + 1;
  const int64_t base = (int64_t(t) * a.n_heads + h) * a.chunks;
  att.p[t * att.stride + h * a.head_dim + d] =
      merge_partials(a.part_m, a.part_l, a.part_acc, base, nc, a.head_dim, d);
}

__global__ void read_sum_kernel(const float4* x, int64_t n, float* out) {
  float acc = 0.f;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float4 v = x[i];
    acc += v.x + v.y + v.z + v.w;
  }
  acc = block_sum(acc);
  if (threadIdx.x == 0) out[blockIdx.x] = acc;
}

}  // namespace

// --- launchers -----------------------------------------------------------------

cudaError_t prepare_kernels(int64_t max_cols, int64_t max_latent) {
  // The limits are per process: only ever raised, so an earlier session's launches stay valid.
  static size_t gemv_limit = 0;
  const size_t g = gemv_smem(max_cols);
  if (g > gemv_limit) {
    const cudaError_t e =
        cudaFuncSetAttribute(gemv_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(g));
    if (e != cudaSuccess) return e;
    gemv_limit = g;
  }
  return prepare_reconstruct(max_latent);
}

cudaError_t launch_read_sum(cudaStream_t s, const float4* x, int64_t n, float* out, int blocks) {
  LR_LAUNCH(blocks, 512, 0, s, read_sum_kernel)(x, n, out);
  return cudaGetLastError();
}

cudaError_t launch_embed(cudaStream_t s, const int32_t* tokens, int n, DevMatrix emb, DevVec x) {
  LR_LAUNCH(n, 256, 0, s, embed_kernel)(tokens, emb, x);
  return cudaGetLastError();
}

cudaError_t launch_rms_norm(cudaStream_t s, int n, DevVec a, DevVec b, const float* norm,
                            int64_t width, float eps) {
  LR_LAUNCH(n, 256, 0, s, rms_norm_kernel)(a, b, norm, width, eps);
  return cudaGetLastError();
}

cudaError_t launch_head_norm(cudaStream_t s, int n, DevVec a, int heads, const float* norm,
                             int64_t head_dim, float eps) {
  LR_LAUNCH(dim3(heads, n), 128, 0, s, head_norm_kernel)(a, norm, head_dim, eps);
  return cudaGetLastError();
}

cudaError_t launch_gemv(cudaStream_t s, const GemvArgs& a, int n, bool tiles) {
  if (n == 1 && !tiles) {
    size_t smem = 0;
    for (int j = 0; j < a.n_jobs; ++j) smem = std::max(smem, gemv_smem(a.job[j].m.cols));
    LR_LAUNCH(blocks_of(a, kGemvRows), kGemvRows * kWarp, smem, s, gemv_kernel)(a);
  } else {
    for (int j = 0; j < a.n_jobs; ++j)
      if (a.job[j].norm || a.job[j].in2.p || a.job[j].merge)
        return cudaErrorInvalidValue;  // prefill runs unfused
    LR_LAUNCH(dim3(blocks_of(a, kTile), (n + kTile - 1) / kTile), 256, 0, s, gemm_kernel)(a, n);
  }
  return cudaGetLastError();
}

// The jobs' inputs and outputs moved down t rows.
static GemvArgs rows_from(GemvArgs a, int t) {
  for (int j = 0; j < a.n_jobs; ++j) {
    a.job[j].in.p += int64_t(t) * a.job[j].in.stride;
    a.job[j].out.p += int64_t(t) * a.job[j].out.stride;
  }
  return a;
}

int batch_product_launches(int n, int n_decode) {
  return (n_decode + kBatchRows - 1) / kBatchRows + (n > n_decode ? 1 : 0);
}

cudaError_t launch_batch_products(cudaStream_t s, const GemvArgs& a, int n, int n_decode) {
  for (int j = 0; j < a.n_jobs; ++j)
    if (a.job[j].norm || a.job[j].in2.p || a.job[j].merge) return cudaErrorInvalidValue;
  for (int t = 0; t < n_decode; t += kBatchRows) {
    LR_LAUNCH(blocks_of(a, kGemvRows), kGemvRows * kWarp, 0, s, gemv_rows_kernel)(
        rows_from(a, t), std::min(kBatchRows, n_decode - t));
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  return n > n_decode ? launch_gemv(s, rows_from(a, n_decode), n - n_decode, true) : cudaSuccess;
}

cudaError_t launch_split_bf16(cudaStream_t s, int n, DevVec in, int64_t in_off, int64_t cols,
                              __nv_bfloat16* hi, __nv_bfloat16* lo, int64_t ld) {
  LR_LAUNCH(n, 256, 0, s, split_bf16_kernel)(in, in_off, cols, hi, lo, ld);
  return cudaGetLastError();
}

cudaError_t launch_add(cudaStream_t s, int n, DevVec x, DevVec y, int64_t width) {
  const int64_t total = int64_t(n) * width;
  LR_LAUNCH(int((total + 255) / 256), 256, 0, s, add_kernel)(n, x, y, width);
  return cudaGetLastError();
}

cudaError_t launch_silu_mul(cudaStream_t s, int n, DevVec g, DevVec u, int64_t width) {
  const int64_t total = int64_t(n) * width;
  LR_LAUNCH(int((total + 255) / 256), 256, 0, s, silu_mul_kernel)(n, g, u, width);
  return cudaGetLastError();
}

cudaError_t launch_rope_append(cudaStream_t s, int n, Rows rows, RopeArgs r, DevVec q,
                               DevVec k, DevVec v, CacheRef c, bool rope) {
  LR_LAUNCH(n, 128, 0, s, rope_append_kernel)(rows, r, q, k, v, c, rope);
  return cudaGetLastError();
}

cudaError_t launch_attend(cudaStream_t s, int n, Rows rows, const AttendArgs& a, DevVec q) {
  if (rows.slot && a.f32) return cudaErrorInvalidValue;  // slots: the f16 cache only
  const dim3 grid(a.chunks, a.n_kv_heads, n);
  const int threads = kAttendWarps * kWarp;
  if (a.head_dim == 64 && a.f32)
    LR_LAUNCH(grid, threads, 0, s, attend_kernel<64, float>)(a, q, rows);
  else if (a.head_dim == 64)
    LR_LAUNCH(grid, threads, 0, s, attend_kernel<64, __half>)(a, q, rows);
  else if (a.head_dim == 128 && a.f32)
    LR_LAUNCH(grid, threads, 0, s, attend_kernel<128, float>)(a, q, rows);
  else if (a.head_dim == 128)
    LR_LAUNCH(grid, threads, 0, s, attend_kernel<128, __half>)(a, q, rows);
  else
    return cudaErrorInvalidValue;
  return cudaGetLastError();
}

cudaError_t launch_merge(cudaStream_t s, int n, Rows rows, const AttendArgs& a, DevVec att) {
  LR_LAUNCH(dim3(a.n_heads, n), a.head_dim, 0, s, merge_kernel)(a, att, rows);
  return cudaGetLastError();
}

}  // namespace lr::cuda
