// Prefill products on cuBLAS (backend/cuda/prefill_blas.h).
#include "backend/cuda/prefill_blas.h"

#include <cstdio>
#include <cstdlib>

#include "backend/cuda/plan.h"
#include "core/error.h"

#ifdef LOWRANK_HAVE_CUBLAS
#ifdef LOWRANK_CUDA_EMU
#include "backend/cuda/emu/cublas_emu.h"
#else
#include <cublas_v2.h>
#endif
#endif

namespace lr::cuda {

#ifdef LOWRANK_HAVE_CUBLAS

struct BlasPrefill::Impl {
  cublasHandle_t handle = nullptr;
  cudaStream_t stream = nullptr;
  __nv_bfloat16* hi = nullptr;  // [max_tokens, ld]
  __nv_bfloat16* lo = nullptr;  // [max_tokens, ld]
  int max_tokens = 0;
  int64_t ld = 0;

  ~Impl() {
    if (handle) cublasDestroy(handle);
    cudaFree(hi);
    cudaFree(lo);
  }
};

#else

struct BlasPrefill::Impl {};

#endif

namespace {

// LOWRANK_CUDA_PREFILL: cublas (the default) or own.
bool wants_cublas() {
  const char* v = std::getenv("LOWRANK_CUDA_PREFILL");
  const std::string s = v ? v : "cublas";
  if (s != "cublas" && s != "own")
    fail("LOWRANK_CUDA_PREFILL={}: expected cublas (the default) or own", s);
  return s == "cublas";
}

}  // namespace

BlasPrefill::~BlasPrefill() = default;

std::unique_ptr<BlasPrefill> BlasPrefill::create(cudaStream_t s, int max_tokens, int64_t max_cols) {
  if (!wants_cublas()) return nullptr;
#ifdef LOWRANK_HAVE_CUBLAS
  auto impl = std::make_unique<Impl>();
  const cublasStatus_t st = cublasCreate(&impl->handle);
  if (st != CUBLAS_STATUS_SUCCESS) {
    impl->handle = nullptr;
    std::fprintf(stderr, "lowrank: cuBLAS did not start (%s); prefill uses the own GEMM\n",
                 cublasGetStatusString(st));
    return nullptr;
  }
  if (cublasSetStream(impl->handle, s) != CUBLAS_STATUS_SUCCESS)
    fail("cuBLAS: cublasSetStream failed");
  impl->stream = s;
  impl->max_tokens = max_tokens;
  impl->ld = padded_cols(max_cols);
  const size_t bytes = size_t(max_tokens) * size_t(impl->ld) * sizeof(__nv_bfloat16);
  for (__nv_bfloat16** p : {&impl->hi, &impl->lo}) {
    const cudaError_t e = cudaMalloc(reinterpret_cast<void**>(p), bytes);
    if (e != cudaSuccess)
      fail("CUDA: allocating {} bytes for the prefill inputs failed: {}", bytes,
           cudaGetErrorString(e));
  }
  std::unique_ptr<BlasPrefill> b(new BlasPrefill);
  b->impl_ = std::move(impl);
  return b;
#else
  (void)s, (void)max_tokens, (void)max_cols;
  return nullptr;  // built without cuBLAS: the own GEMM
#endif
}

// Y[t, r] (+)= sum_c W[r, c] (hi[t, c] + lo[t, c]). In cuBLAS's column-major
// terms: C = Y^T (rows x n, ldc the output's row stride) = op_T(A) B, where A
// is row-major W read as a cols x rows matrix (lda = its ld) and B a bf16
// part read as cols x n (ldb = ld). Jobs sharing an input split it once.
void BlasPrefill::products(const GemvArgs& a, int n, const std::string& name) {
#ifdef LOWRANK_HAVE_CUBLAS
  Impl& m = *impl_;
  LR_ASSERT(n <= m.max_tokens);
  for (int j = 0; j < a.n_jobs; ++j) {
    const GemvJob& g = a.job[j];
    LR_ASSERT(!g.norm && !g.in2.p);  // the prefill plan is unfused
    LR_ASSERT(g.m.cols <= m.ld);
    const GemvJob* prev = j > 0 ? &a.job[j - 1] : nullptr;
    if (!prev || prev->in.p != g.in.p || prev->in_off != g.in_off || prev->m.cols != g.m.cols) {
      const cudaError_t e =
          launch_split_bf16(m.stream, n, g.in, g.in_off, g.m.cols, m.hi, m.lo, m.ld);
      if (e != cudaSuccess)
        fail("CUDA: splitting the inputs of {} into bf16 failed: {}", name, cudaGetErrorString(e));
    }
    // Y = scale (W hi + W lo + bias (+ Y if accumulate)): the logit scale of an output head.
    const float alpha = g.scale;
    for (const __nv_bfloat16* part : {m.hi, m.lo}) {
      const float beta = part == m.lo ? 1.f : g.accumulate ? g.scale : 0.f;
      const cublasStatus_t st = cublasGemmEx(
          m.handle, CUBLAS_OP_T, CUBLAS_OP_N, int(g.m.rows), n, int(g.m.cols), &alpha, g.m.w,
          CUDA_R_16BF, int(g.m.ld), part, CUDA_R_16BF, int(m.ld), &beta, g.out.p + g.out_off,
          CUDA_R_32F, int(g.out.stride), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      if (st != CUBLAS_STATUS_SUCCESS)
        fail("cuBLAS: cublasGemmEx for {} (job {}: {} x {}, {} tokens) failed: {}", name, j,
             g.m.rows, g.m.cols, n, cublasGetStatusString(st));
    }
    if (g.bias) {  // every token's row gets the bias (a row of stride 0)
      const cudaError_t e = launch_add(m.stream, n, {g.out.p + g.out_off, g.out.stride},
                                       {const_cast<float*>(g.bias), 0}, g.m.rows, g.scale);
      if (e != cudaSuccess)
        fail("CUDA: adding the bias of {} (job {}) failed: {}", name, j, cudaGetErrorString(e));
    }
  }
#else
  (void)a, (void)n, (void)name;
  LR_ASSERT(false);  // create() returns no BlasPrefill without cuBLAS
#endif
}

}  // namespace lr::cuda
