// Device memory of the CUDA backend shared by its sessions: the weights of a
// model uploaded once per process (bf16, rows padded, backend/cuda/plan.h
// WeightLayout), its norms and biases in f32 and the pivoted products'
// source rows; and the error check and allocation every device buffer goes
// through. (The RoPE frequencies depend on a session's context, LongRoPE:
// each session has its own.)
#pragma once

#include <algorithm>
#include <map>
#include <memory>

#include "backend/cuda/cuda_api.h"
#include "backend/cuda/kernels.cuh"
#include "backend/cuda/plan.h"
#include "core/error.h"
#include "model/weights.h"

namespace lr::cuda {

inline void check(cudaError_t e, const char* what, const char* file, int line) {
  if (e != cudaSuccess)
    fail("CUDA: {} failed ({}:{}): {}", what, file, line, cudaGetErrorString(e));
}
#define CK(x) ::lr::cuda::check((x), #x, __FILE__, __LINE__)

// n zeroed elements of device memory.
template <typename T>
T* device_alloc(size_t n) {
  void* p = nullptr;
  CK(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)));
  CK(cudaMemset(p, 0, std::max<size_t>(n, 1) * sizeof(T)));
  return static_cast<T*>(p);
}

// Weights on the device, shared by every session of the process.
struct DeviceWeights {
  std::weak_ptr<const Weights> host;  // the cache entry is stale once these weights are gone
  WeightLayout layout;
  __nv_bfloat16* w = nullptr;
  float* vectors = nullptr;                          // the norms and the biases, f32
  std::map<const uint8_t*, const float*> vector_at;  // host vector -> device copy
  int32_t* sources = nullptr;  // the pivoted products' source rows (model/weights.h Pivots)
  std::map<const Pivots*, const int32_t*> source_at;

  ~DeviceWeights() {
    cudaFree(w);
    cudaFree(vectors);
    cudaFree(sources);
  }
  DevMatrix matrix(const Matrix& m) const {
    return {w + layout.offset_of(m), m.rows, m.cols, padded_cols(m.cols)};
  }
  const float* vector(const Matrix& m) const {  // a norm or a bias
    auto it = vector_at.find(m.ptr());
    LR_ASSERT(it != vector_at.end());
    return it->second;
  }
  const int32_t* source(const Pivots& p) const {
    auto it = source_at.find(&p);
    LR_ASSERT(it != source_at.end());
    return it->second;
  }
};

// The device copy of `w`: uploaded once and kept while the host weights live
// (sessions come and go: bench makes one per run), dropped once they are gone.
std::shared_ptr<const DeviceWeights> device_weights(const std::shared_ptr<const Weights>& w);

}  // namespace lr::cuda
