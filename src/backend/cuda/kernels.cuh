// CUDA kernels of the forward pass, one launcher per operation of the plan
// (backend/cuda/plan.h). Matrices are bf16, row-major with rows padded to
// kRowPad elements (zeros in the padding); activations f32, [n_tokens, width]
// with a per-buffer row stride; the KV cache f16 [layer][ctx][kv_dim].
// Every kernel that depends on the position reads the first position of the
// call from device memory (*pos0; token t is at *pos0 + t), so a captured
// graph replays for every decode step. Launchers return the launch's error.
#pragma once

#include <cstdint>

#include "backend/cuda/cuda_api.h"

namespace lr::cuda {

struct DevMatrix {
  const __nv_bfloat16* w = nullptr;
  int64_t rows = 0, cols = 0, ld = 0;  // ld: padded row length (elements)
};

// Activation row i of a buffer: p + i * stride.
struct DevVec {
  float* p = nullptr;
  int64_t stride = 0;
};

constexpr int kMaxJobs = 6;  // backend/cuda/plan.h kMaxStepJobs
constexpr int kAttendChunk = 256;  // keys per split-K attention block

// The gate's activation of a gated FFN, act(g) * u (model/config.h Activation).
enum class Gate : int { Silu, GeluTanh };

// The first split-K chunk a query at `pos` reads: its window's (a windowed
// layer, whose query sees [pos - window + 1, pos]), else 0. The last is pos's.
__host__ __device__ inline int first_chunk(int pos, int window) {
  return window > 0 && pos >= window ? (pos - window + 1) / kAttendChunk : 0;
}

// One matrix of a GEMV/GEMM launch: out[t, out_off + r] (+)= sum_c M[r, c] x[t, c],
// x = in[t, in_off + c], or rms_norm(in[t, :]) * norm, or act(in) * in2.
struct GemvJob {
  DevMatrix m;
  DevVec in, in2, out;    // in2.p null: no act*mul
  Gate act = Gate::Silu;  // with in2
  int64_t in_off = 0, out_off = 0;
  const float* norm = nullptr;  // fused RMSNorm weight [cols] (in_off must be 0)
  int merge = 0;                // fused: x = the split-K partials of GemvArgs::merge, merged
  int accumulate = 0;
  const float* bias = nullptr;  // [rows]: out[t, out_off + r] gets M x + bias[r] (+ out if accumulate)
  float scale = 1.f;            // ... all of it times scale (the output head's logit scale)
  // Pivoted storage (model/weights.h Pivots): output row i is M[source[i]] . x,
  // or x[-1 - source[i]] itself (a pivot row: the latent copied). Null: row i
  // is M[i] . x. source has out_rows entries (device memory).
  const int32_t* source = nullptr;
  int64_t out_rows = 0;
};
// Output rows of a job.
__host__ __device__ inline int64_t rows_of(const GemvJob& j) {
  return j.source ? j.out_rows : j.m.rows;
}
// The split-K attention partials a merging job reads (decode: token 0 at *pos0).
struct MergeRef {
  const float* m = nullptr;    // [n_heads, chunks]
  const float* l = nullptr;    // [n_heads, chunks]
  const float* acc = nullptr;  // [n_heads, chunks, head_dim]
  int chunks = 0, head_dim = 0;
  const int* pos0 = nullptr;
  int window = 0;  // the layer's (first_chunk)
};
struct GemvArgs {
  GemvJob job[kMaxJobs];
  int n_jobs = 0;
  float eps = 1e-5f;
  MergeRef merge;
};

// Shared memory the GEMV needs for inputs of `cols` columns (bytes).
inline size_t gemv_smem(int64_t cols) {
  return size_t((cols + 7) / 8 * 8) * sizeof(float);
}

// x[t] = scale * emb[tokens[t]]
cudaError_t launch_embed(cudaStream_t s, const int32_t* tokens, int n, DevMatrix emb, DevVec x,
                         float scale = 1.f);
// b = rms_norm(a) * norm, or (norm null: a block without a pre-norm) b = a; b may be a.
cudaError_t launch_rms_norm(cudaStream_t s, int n, DevVec a, DevVec b, const float* norm,
                            int64_t width, float eps);
// Each of the `heads` heads of a's n rows rms-normalized in place by norm [head_dim]
// (a "head" may span all of q or k: OLMo 2).
cudaError_t launch_head_norm(cudaStream_t s, int n, DevVec a, int heads, const float* norm,
                             int64_t head_dim, float eps);
// n == 1: one warp per row (decode); n > 1 or tiles: tiled GEMM (prefill, no fused input
// transforms), whose every output's arithmetic is the same for any n (a batch's rows).
// x = in[t, in_off + c], or rms_norm(in[t, :]) * norm, or act(in) * in2, or the merged
// attention partials (merge).
cudaError_t launch_gemv(cudaStream_t s, const GemvArgs& a, int n, bool tiles = false);
// The products of a batch step (backend/batch.h), no fused input transforms:
// rows [0, n_decode) are decoded tokens, kBatchRows per launch of a GEMV that
// reads each weight once for them all; rows [n_decode, n) are prompt tokens,
// on the tiled GEMM. A row's kind (decode or prompt) picks its kernel; given
// the kind, its arithmetic is the same for any n and n_decode and whatever
// other rows share the launch (batch invariance).
constexpr int kBatchRows = 16;
cudaError_t launch_batch_products(cudaStream_t s, const GemvArgs& a, int n, int n_decode);
int batch_product_launches(int n, int n_decode);  // the kernels launch_batch_products launches
// Raises the kernels' dynamic shared memory limits for the widest GEMV input
// and the widest legacy latent (call once before launching or capturing).
cudaError_t prepare_kernels(int64_t max_cols, int64_t max_latent);
cudaError_t prepare_reconstruct(int64_t max_latent);  // the legacy part (kernels_baseline.cu)
// x = in[t, in_off + c] split in two bf16 parts for c < cols, rows `ld` apart:
// hi = bf16(x), lo = bf16(x - hi), so hi + lo carries 16 of x's 24 mantissa
// bits (the prefill products' inputs for cuBLAS: W hi + W lo).
cudaError_t launch_split_bf16(cudaStream_t s, int n, DevVec in, int64_t in_off, int64_t cols,
                              __nv_bfloat16* hi, __nv_bfloat16* lo, int64_t ld);
// x[t, c] += scale * y[t, c] for c < width (y.stride 0: the same row, a bias, for every token).
cudaError_t launch_add(cudaStream_t s, int n, DevVec x, DevVec y, int64_t width, float scale = 1.f);
// g = act(g) * u
cudaError_t launch_silu_mul(cudaStream_t s, int n, DevVec g, DevVec u, int64_t width,
                            Gate act = Gate::Silu);

// Where each token (row) of a call sits: one sequence, token t at position
// *pos0 + t in the session's one cache; or a batch of slots (backend/batch.h),
// row t at pos[t] in the cache of slot[t], slot_stride elements per slot
// (every layer's cache pointer is slot 0's).
struct Rows {
  const int* pos0 = nullptr;
  const int* pos = nullptr;  // null: one sequence
  const int* slot = nullptr;
  int64_t slot_stride = 0;
  __host__ __device__ int at(int t) const { return pos ? pos[t] : *pos0 + t; }
  __host__ __device__ int64_t cache_off(int t) const {
    return slot ? int64_t(slot[t]) * slot_stride : 0;
  }
};

// The heads turn by the layer's RoPE set (model/scalar_ops.h rope_inv_freq):
// pair i by pos * inv_freq[i], scaled by mscale (LongRoPE's attention
// factor); a pair of frequency 0 (past the rotary dims, or a layer without
// RoPE) stays as it is.
struct RopeArgs {
  const double* inv_freq = nullptr;  // [head_dim / 2]
  int head_dim = 0, n_heads = 0, n_kv_heads = 0;
  double mscale = 1.0;
};
// rope(q) (and rope(k) when k.p) at positions *pos0 + t.
cudaError_t launch_rope(cudaStream_t s, int n, const int* pos0, RopeArgs r, DevVec q, DevVec k);
// K, V rows -> cache rows at the rows' positions (f16), k roped first when `rope`; q roped
// too when `rope`.
struct CacheRef {
  __half* k = nullptr;  // this layer's [ctx, kv_dim]
  __half* v = nullptr;
  int64_t kv_dim = 0;
};
cudaError_t launch_rope_append(cudaStream_t s, int n, Rows rows, RopeArgs r, DevVec q,
                               DevVec k, DevVec v, CacheRef c, bool rope);

// Split-K attention of n query tokens (token t sees keys 0..its position, or
// its window of them) over keys and values either f16 (the cache) or f32
// (legacy reconstruction). head_dim 32, 64, 96, 128 or 256 (attend_head_dim).
struct AttendArgs {
  const void* k = nullptr;
  const void* v = nullptr;
  bool f32 = false;    // k, v are float (else __half)
  int64_t kv_dim = 0;  // row stride of k and v
  int head_dim = 0, n_heads = 0, n_kv_heads = 0;
  int chunks = 0;             // split-K blocks per (token, KV head), covering the context
  float scale = 0.f;          // of q.k (0: 1 / sqrt(head_dim))
  int window = 0;             // > 0: a query at p sees keys [p - window + 1, p] (a mask)
  float* part_m = nullptr;    // [n, n_heads, chunks]
  float* part_l = nullptr;    // [n, n_heads, chunks]
  float* part_acc = nullptr;  // [n, n_heads, chunks, head_dim]
  // Fused rope and append (decode, f16 cache; k, v then point at the cache):
  // q is roped as it is loaded, and the block whose chunk holds the position
  // ropes its head's k row, writes it and the v row into the cache, then attends.
  const double* inv_freq = nullptr;  // null: q is roped and the cache written already
  double mscale = 1.0;               // (RopeArgs)
  DevVec new_k, new_v;               // the token's k and v rows (f32, unroped)
};
// The head widths the attention kernels are instantiated for.
constexpr bool attend_head_dim(int d) {
  return d == 32 || d == 64 || d == 96 || d == 128 || d == 256;
}
// (Rows with slots need the f16 cache, k and v then being slot 0's.)
cudaError_t launch_attend(cudaStream_t s, int n, Rows rows, const AttendArgs& a, DevVec q);
cudaError_t launch_merge(cudaStream_t s, int n, Rows rows, const AttendArgs& a, DevVec att);

// Static (eager baseline) decode attention: scores [n_heads, ctx], softmax, mix.
struct StaticArgs {
  const __half* k = nullptr;
  const __half* v = nullptr;
  int64_t kv_dim = 0;
  int head_dim = 0, n_heads = 0, n_kv_heads = 0, ctx = 0;
  float* scores = nullptr;  // [n_heads, ctx]
  float scale = 0.f;        // of q.k (0: 1 / sqrt(head_dim))
  int window = 0;           // as AttendArgs
};
cudaError_t launch_scores(cudaStream_t s, const int* pos0, const StaticArgs& a, DevVec q);
cudaError_t launch_softmax(cudaStream_t s, const int* pos0, const StaticArgs& a);
cudaError_t launch_mix(cudaStream_t s, const int* pos0, const StaticArgs& a, DevVec att);

// Legacy KV: latents P[t, off .. off + rank) -> latent cache rows *pos0 + t
// (f16, row stride `ld`), for k and v.
struct LatentRef {
  __half* k = nullptr;
  __half* v = nullptr;
  int64_t k_ld = 0, v_ld = 0;
  int64_t k_off = 0, v_off = 0, k_rank = 0, v_rank = 0;
};
cudaError_t launch_latent_append(cudaStream_t s, int n, const int* pos0, DevVec p, LatentRef l);
// K_all[j] = rope(Uk L_k[j], j), V_all[j] = Uv L_v[j] for j <= *pos0 + n - 1
// (grid over `ctx` positions; blocks past the last position exit).
cudaError_t launch_reconstruct(cudaStream_t s, int n, const int* pos0, int ctx, LatentRef l,
                               DevMatrix uk, DevMatrix uv, RopeArgs r, float* k_all, float* v_all,
                               int64_t kv_dim);

// out[block] = sum of the block's share of x (a read-bandwidth probe).
cudaError_t launch_read_sum(cudaStream_t s, const float4* x, int64_t n, float* out, int blocks);

}  // namespace lr::cuda
