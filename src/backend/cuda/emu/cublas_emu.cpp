// The emulator's cuBLAS (emu/cublas_emu.h).
#include "backend/cuda/emu/cublas_emu.h"

#include <algorithm>
#include <string>

struct cublasContext {
  cudaStream_t stream = nullptr;
};

cublasStatus_t cublasCreate(cublasHandle_t* h) {
  if (!h) return CUBLAS_STATUS_INVALID_VALUE;
  *h = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t h) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->stream = s;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusString(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
  }
  return "unknown cuBLAS status";
}

namespace {

// Bytes a column-major rows x cols matrix with leading dimension ld spans.
size_t extent(int rows, int cols, int ld, size_t elem) {
  if (rows == 0 || cols == 0) return 0;
  return (size_t(cols - 1) * size_t(ld) + size_t(rows)) * elem;
}

}  // namespace

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t transa, cublasOperation_t transb,
                            int m, int n, int k, const void* alpha, const void* A,
                            cudaDataType Atype, int lda, const void* B, cudaDataType Btype, int ldb,
                            const void* beta, void* C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (Atype != CUDA_R_16BF || Btype != CUDA_R_16BF || Ctype != CUDA_R_32F ||
      compute != CUBLAS_COMPUTE_32F)
    return CUBLAS_STATUS_NOT_SUPPORTED;  // the emulator has only the backend's combination
  const int a_rows = transa == CUBLAS_OP_N ? m : k, a_cols = transa == CUBLAS_OP_N ? k : m;
  const int b_rows = transb == CUBLAS_OP_N ? k : n, b_cols = transb == CUBLAS_OP_N ? n : k;
  if (m < 0 || n < 0 || k < 0 || lda < std::max(1, a_rows) || ldb < std::max(1, b_rows) ||
      ldc < std::max(1, m) || !alpha || !beta)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (!lr::cuda_emu::on_device(A, extent(a_rows, a_cols, lda, 2)) ||
      !lr::cuda_emu::on_device(B, extent(b_rows, b_cols, ldb, 2)) ||
      !lr::cuda_emu::on_device(C, extent(m, n, ldc, 4)))
    return CUBLAS_STATUS_INVALID_VALUE;  // a GPU would fault or read another buffer
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  const auto* a = static_cast<const __nv_bfloat16*>(A);
  const auto* b = static_cast<const __nv_bfloat16*>(B);
  auto* c = static_cast<float*>(C);
  const cudaError_t e = lr::cuda_emu::enqueue(h->stream, cudaGraphNodeTypeKernel, [=]() {
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) {
        float acc = 0.f;
        for (int p = 0; p < k; ++p) {
          const size_t ai =
              transa == CUBLAS_OP_N ? size_t(i) + size_t(p) * lda : size_t(p) + size_t(i) * lda;
          const size_t bi =
              transb == CUBLAS_OP_N ? size_t(p) + size_t(j) * ldb : size_t(j) + size_t(p) * ldb;
          acc += __bfloat162float(a[ai]) * __bfloat162float(b[bi]);
        }
        float& out = c[size_t(i) + size_t(j) * ldc];
        out = be == 0.f ? al * acc : al * acc + be * out;  // beta 0: C is not read
      }
    return cudaSuccess;
  });
  return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}
