// Which kernels OpenBLAS uses. It picks them for the CPU once, when it is
// loaded, and Debian 12's OpenBLAS (0.3.21) does not know recent Intel Xeons
// (family 6 model 207 here): it falls back to its generic Prescott (SSE3)
// kernels, and dsyrk ran at 8 GFLOP/s instead of 40 with its SkylakeX
// kernels (whitened compression's calibration). The variable
// OPENBLAS_CORETYPE overrides the choice, but only if it is set before the
// library is loaded.
#pragma once

#include <string>

namespace lr::cli {

// When OpenBLAS fell back to Prescott on a CPU that runs its SkylakeX (AVX-512
// F/BW/VL/DQ/CD) or Haswell (AVX2+FMA) kernels and OPENBLAS_CORETYPE is unset,
// sets it and re-executes the program (/proc/self/exe, same arguments).
// Returns when nothing needs changing or the re-execution fails. Not
// OpenBLAS (no openblas_get_corename): nothing to do.
void fix_openblas_core(char** argv);

// "OpenBLAS, Haswell kernels" (+ " (OPENBLAS_CORETYPE=...)" when set), or
// "not OpenBLAS".
std::string blas_description();

}  // namespace lr::cli
