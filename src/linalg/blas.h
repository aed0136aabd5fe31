// CBLAS and LAPACKE, or, in a build without them (LOWRANK_NO_LAPACK: a
// LOWRANK_DEPS build on a machine that has none, the GPU check's), stand-ins with the same names
// that fail with a clear message when called. Only the compressor and the SVDq key-basis fits call
// these.
#pragma once

#ifndef LOWRANK_NO_LAPACK
#include <cblas.h>
#include <lapacke.h>
#else
#include "core/error.h"

enum CBLAS_ORDER { CblasRowMajor = 101, CblasColMajor = 102 };
enum CBLAS_TRANSPOSE { CblasNoTrans = 111, CblasTrans = 112 };
enum CBLAS_UPLO { CblasUpper = 121, CblasLower = 122 };
enum CBLAS_DIAG { CblasNonUnit = 131, CblasUnit = 132 };
enum CBLAS_SIDE { CblasLeft = 141, CblasRight = 142 };
using lapack_int = int;
constexpr int LAPACK_ROW_MAJOR = 101, LAPACK_COL_MAJOR = 102;

[[noreturn]] inline void lowrank_no_lapack(const char* routine) {
  lr::fail(
      "{}: this lowrank was built without BLAS/LAPACK (none were found for this LOWRANK_DEPS "
      "build); compression and SVDq key fits need them",
      routine);
}
#define LOWRANK_NO_LAPACK_STUB(ret, name) \
  template <typename... A>                \
  ret name(A...) {                        \
    lowrank_no_lapack(#name);             \
  }
LOWRANK_NO_LAPACK_STUB(void, cblas_dgemm)
LOWRANK_NO_LAPACK_STUB(void, cblas_dsyrk)
LOWRANK_NO_LAPACK_STUB(void, cblas_dtrmm)
LOWRANK_NO_LAPACK_STUB(void, cblas_dtrsm)
LOWRANK_NO_LAPACK_STUB(lapack_int, LAPACKE_dgesdd)
LOWRANK_NO_LAPACK_STUB(lapack_int, LAPACKE_dgesvd)
LOWRANK_NO_LAPACK_STUB(lapack_int, LAPACKE_dgelsd)
LOWRANK_NO_LAPACK_STUB(lapack_int, LAPACKE_dgeqp3)
LOWRANK_NO_LAPACK_STUB(lapack_int, LAPACKE_dpocon)
LOWRANK_NO_LAPACK_STUB(lapack_int, LAPACKE_dpotrf)
LOWRANK_NO_LAPACK_STUB(lapack_int, LAPACKE_dsyevd)
#undef LOWRANK_NO_LAPACK_STUB
#endif
