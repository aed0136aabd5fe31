// The CUDA kernels and their launchers (backend/cuda/kernels.cu), compiled by
// the C++ compiler over the emulator.
#include "backend/cuda/kernels.cu"  // NOLINT(bugprone-suspicious-include)
