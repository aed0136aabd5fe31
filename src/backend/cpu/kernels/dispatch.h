// A product with a Matrix of any form: the kernel of its panels where the
// CPU backend prepared them (P; panels.h), else of its weight type (kernels.h).
#pragma once

#include <cstdint>

#include "backend/cpu/kernels/kernels.h"
#include "backend/cpu/kernels/panels.h"
#include "model/weights.h"

namespace lr::cpu {

// y[r] = W[r, :] x for r in [r0, r1); any weight type (F32, F16, BF16, Q8_0).
void matvec(const Matrix& W, const Panels& P, const float* x, float* y, int64_t r0, int64_t r1);
// Y[t, r] = W[r, :] X[t, :] for t < n, r in [r0, r1); X rows ldx apart, Y rows ldy apart.
// path: MatmulPath::Tiles for results that do not depend on n (kernels.h).
void matmul(const Matrix& W, const Panels& P, const float* X, int64_t ldx, float* Y, int64_t ldy,
            int64_t n, int64_t r0, int64_t r1, MatmulPath path = MatmulPath::Any);
// The same, every row of X as matvec computes it (the same bits), the
// weights read from memory once: a block of rows at a time for every x.
// r0 a multiple of 8, as the decode split gives matvec.
void matvec_rows(const Matrix& W, const Panels& P, const float* X, int64_t ldx, float* Y,
                 int64_t ldy, int64_t n, int64_t r0, int64_t r1);

}  // namespace lr::cpu
