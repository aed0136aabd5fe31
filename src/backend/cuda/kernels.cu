// CUDA kernels of the forward pass (see kernels.cuh for the conventions).
// Each runs one kind of step of the model's plan (model/plan.h): linear ->
// gemv/gemm, rms_norm, head_norm, act * mul, residual add, embed. Attention
// (rope + append, attend, merge) is in kernels_attention.cu, the research
// baselines' kernels (static and legacy KV) in kernels_baseline.cu.
#include <algorithm>

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.cuh"

namespace lr::cuda {

namespace {

constexpr int kGemvRows = 8;  // rows per GEMV block (one warp each)
constexpr int kTile = 64;     // GEMM tile: rows x tokens
constexpr int kTileK = 32;

// Element c = h * head_dim + d of the decode token's attention output (a fused GEMV input).
__device__ __forceinline__ float merged(const MergeRef& r, int64_t c) {
  const int h = int(c / r.head_dim), d = int(c % r.head_dim);
  const int pos = *r.pos0, first = first_chunk(pos, r.window);
  return merge_partials(r.m, r.l, r.acc, int64_t(h) * r.chunks + first,
                        pos / kAttendChunk + 1 - first, r.head_dim, d);
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
      if (J.in2.p) x = gate_act(J.act, x) * J.in2.p[J.in_off + c];
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
    out[r] = (J.accumulate ? out[r] + acc : acc) * J.scale;
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
      out[r] = (J.accumulate ? out[r] + y : y) * J.scale;
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
      *out = (J.accumulate ? *out + y : y) * J.scale;
    }
}

// --- elementwise ---------------------------------------------------------------

__global__ void embed_kernel(const int32_t* tokens, DevMatrix emb, DevVec x, float scale) {
  const int t = blockIdx.x;
  const __nv_bfloat16* row = emb.w + int64_t(tokens[t]) * emb.ld;
  for (int64_t c = threadIdx.x; c < emb.cols; c += blockDim.x)
    x.p[t * x.stride + c] = __bfloat162float(row[c]) * scale;
}

__global__ void rms_norm_kernel(DevVec a, DevVec b, const float* norm, int64_t width, float eps) {
  const int t = blockIdx.x;
  const float* x = a.p + t * a.stride;
  float* y = b.p + t * b.stride;
  if (!norm) {  // no norm: a copy
    for (int64_t c = threadIdx.x; c < width; c += blockDim.x) y[c] = x[c];
    return;
  }
  float ss = 0.f;
  for (int64_t c = threadIdx.x; c < width; c += blockDim.x) ss += x[c] * x[c];
  const float inv = rsqrtf(block_sum(ss) / float(width) + eps);
  for (int64_t c = threadIdx.x; c < width; c += blockDim.x) y[c] = x[c] * inv * norm[c];
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

__global__ void add_kernel(int n, DevVec x, DevVec y, int64_t width, float scale) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(n) * width) return;
  const int64_t t = i / width, c = i % width;
  x.p[t * x.stride + c] += scale * y.p[t * y.stride + c];
}

__global__ void silu_mul_kernel(int n, DevVec g, DevVec u, int64_t width, Gate act) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(n) * width) return;
  const int64_t t = i / width, c = i % width;
  float& x = g.p[t * g.stride + c];
  x = gate_act(act, x) * u.p[t * u.stride + c];
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

cudaError_t launch_embed(cudaStream_t s, const int32_t* tokens, int n, DevMatrix emb, DevVec x,
                         float scale) {
  LR_LAUNCH(n, 256, 0, s, embed_kernel)(tokens, emb, x, scale);
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

cudaError_t launch_add(cudaStream_t s, int n, DevVec x, DevVec y, int64_t width, float scale) {
  const int64_t total = int64_t(n) * width;
  LR_LAUNCH(int((total + 255) / 256), 256, 0, s, add_kernel)(n, x, y, width, scale);
  return cudaGetLastError();
}

cudaError_t launch_silu_mul(cudaStream_t s, int n, DevVec g, DevVec u, int64_t width, Gate act) {
  const int64_t total = int64_t(n) * width;
  LR_LAUNCH(int((total + 255) / 256), 256, 0, s, silu_mul_kernel)(n, g, u, width, act);
  return cudaGetLastError();
}

}  // namespace lr::cuda
