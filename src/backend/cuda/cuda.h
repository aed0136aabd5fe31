// The CUDA backends: the session and the batch, on the device; what the
// device is and how fast it reads.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"
#include "backend/batch.h"

namespace lr {

// The CUDA path (src/backend/cuda): bf16 weights on the device, f32
// accumulation, f16 KV cache; opt.exec picks the ablation rung, with
// per-layer and per-token units as captured CUDA graphs. Throws lr::Error in a
// build without CUDA (LOWRANK_CUDA=OFF) or on a machine without a device.
std::unique_ptr<Backend> make_cuda_backend(std::shared_ptr<const Weights> w,
                                           const BackendOptions& opt);
// "NVIDIA H200, 139 GiB, sm_90, driver 12.8" or why there is none.
std::string cuda_device_info(bool* available = nullptr);
// The GPU's read bandwidth in GB/s: a kernel summing a 2 GiB buffer, best of 5.
double cuda_read_bandwidth_gbs();

// The CUDA batch (backend/cuda/backend_cuda.cpp): every slot's f16 cache on
// the device, each step the unfused plan over all its rows, products on the
// own GEMM (batch-invariant); decode-only steps of up to 16 rows padded to a
// bucket of 1, 2, 4, 8 or 16 rows and run as that bucket's CUDA graph
// (captured at its first use; padded rows run in a spare slot). Dense KV,
// f16 cache; at most 512 tokens per step. Throws lr::Error without a GPU.
std::unique_ptr<BatchBackend> make_cuda_batch_backend(std::shared_ptr<const Weights> w,
                                                      const BackendOptions& opt, int slots,
                                                      int max_step_tokens);

}  // namespace lr
