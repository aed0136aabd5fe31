// The emulator's runner of one launch (emu/grid.cpp).
#pragma once

#include <functional>
#include <string>

#include "backend/cuda/emu/cuda_emu.h"

namespace lr::cuda_emu {

// Runs `body` as every thread of every block of the grid; returns "" or what
// went wrong (a deadlock, a shuffle with a missing lane), naming the block.
std::string run_grid(dim3 grid, dim3 block, size_t smem, const std::function<void()>& body);

}  // namespace lr::cuda_emu
