// The CUDA headers (runtime, bf16/f16) the backend and its kernels use: the
// toolkit's, or the CPU emulator's (LOWRANK_CUDA_EMU, backend/cuda/emu).
// Kernels launch through LR_LAUNCH and declare dynamic shared memory with
// LR_DYNAMIC_SHARED, which are <<<...>>> and extern __shared__ under nvcc.
#pragma once

#ifdef LOWRANK_CUDA_EMU
#include "backend/cuda/emu/cuda_emu.h"
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

// LR_LAUNCH(grid, block, smem, stream, kernel)(args...)
#define LR_LAUNCH(grid, block, smem, stream, ...) __VA_ARGS__<<<grid, block, smem, stream>>>
#define LR_DYNAMIC_SHARED(T, name) extern __shared__ T name[]
#endif
