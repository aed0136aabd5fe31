// The baselines' CUDA kernels (backend/cuda/kernels_baseline.cu), compiled by
// the C++ compiler over the emulator.
#include "backend/cuda/kernels_baseline.cu"  // NOLINT(bugprone-suspicious-include)
