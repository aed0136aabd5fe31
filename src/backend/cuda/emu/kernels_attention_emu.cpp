// The attention kernels (backend/cuda/kernels_attention.cu), compiled by the
// C++ compiler over the emulator.
#include "backend/cuda/kernels_attention.cu"  // NOLINT(bugprone-suspicious-include)
