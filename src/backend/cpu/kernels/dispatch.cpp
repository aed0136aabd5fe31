// Kernel dispatch by a matrix's form: its panels when the CPU backend
// prepared them, else the kernel of the stored weight type.
#include "backend/cpu/kernels/dispatch.h"

#include <algorithm>

#include "backend/cpu/kernels/kernels.h"
#include "backend/cpu/kernels/panels.h"
#include "core/error.h"

namespace lr::cpu {

void matvec(const Matrix& W, const Panels& P, const float* x, float* y, int64_t r0, int64_t r1) {
  if (P) return matvec_panels_n(W.dtype, P.data, x, W.cols, y, 0, 1, W.cols, r0, r1);
  switch (W.dtype) {
    case DType::BF16:
      return matvec_bf16(W.half(), x, y, W.cols, r0, r1);
    case DType::F16:
      return matvec_f16(W.half(), x, y, W.cols, r0, r1);
    case DType::Q8_0:
      return matvec_q8_0(W.q8(), W.scales.get(), x, y, W.cols, r0, r1);
    case DType::F32:
      return matvec_f32(W.f32(), x, y, W.cols, r0, r1);
    default:
      return matvec_blocks(W.dtype, W.ptr(), W.row_bytes(), x, y, W.cols, r0, r1);
  }
}

void matmul(const Matrix& W, const Panels& P, const float* X, int64_t ldx, float* Y, int64_t ldy,
            int64_t n, int64_t r0, int64_t r1, MatmulPath path) {
  if (n == 1 && path == MatmulPath::Any) return matvec(W, P, X, Y, r0, r1);
  if (P) return matmul_panels(W.dtype, P.data, X, Y, n, W.cols, ldx, ldy, r0, r1, path);
  switch (W.dtype) {
    case DType::BF16:
      return matmul_bf16(W.half(), X, Y, n, W.cols, ldx, ldy, r0, r1, path);
    case DType::F16:
      return matmul_f16(W.half(), X, Y, n, W.cols, ldx, ldy, r0, r1, path);
    case DType::Q8_0:
      return matmul_q8_0(W.q8(), W.scales.get(), X, Y, n, W.cols, ldx, ldy, r0, r1, path);
    case DType::F32:
      return matmul_f32(W.f32(), X, Y, n, W.cols, ldx, ldy, r0, r1, path);
    default:
      return matmul_blocks(W.dtype, W.ptr(), W.row_bytes(), X, Y, n, W.cols, ldx, ldy, r0, r1,
                           path);
  }
}

void matvec_rows(const Matrix& W, const Panels& P, const float* X, int64_t ldx, float* Y,
                 int64_t ldy, int64_t n, int64_t r0, int64_t r1) {
  LR_ASSERT(r0 % 8 == 0);
  if (P) return matvec_panels_n(W.dtype, P.data, X, ldx, Y, ldy, n, W.cols, r0, r1);
  if (is_block_format(W.dtype))
    return matvec_blocks_n(W.dtype, W.ptr(), W.row_bytes(), X, ldx, Y, ldy, n, W.cols, r0, r1);
  if (W.dtype == DType::Q8_0)
    return matvec_q8_0_n(W.q8(), W.scales.get(), X, ldx, Y, ldy, n, W.cols, r0, r1);
  // Blocks of 64 rows (in L2) against every x in turn.
  constexpr int64_t kBlockRows = 64;
  for (int64_t r = r0; r < r1; r += kBlockRows)
    for (int64_t t = 0; t < n; ++t)
      matvec(W, P, X + t * ldx, Y + t * ldy, r, std::min(r1, r + kBlockRows));
}

}  // namespace lr::cpu
