// Prefill products on tensor cores through cuBLAS: each f32 input row split
// in two bf16 parts, hi = bf16(x) and lo = bf16(x - hi), and every product
// done as W hi + W lo (cublasGemmEx, bf16 inputs, f32 accumulation and
// output), which keeps 16 of the input's 24 mantissa bits.
#pragma once

#include <memory>
#include <string>

#include "backend/cuda/kernels.cuh"

namespace lr::cuda {

class BlasPrefill {
 public:
  // Null (prefill then runs on the own tiled GEMM) with LOWRANK_CUDA_PREFILL=own,
  // in a build without cuBLAS, or when cuBLAS does not start (a warning says so).
  // Throws lr::Error on any other LOWRANK_CUDA_PREFILL value.
  static std::unique_ptr<BlasPrefill> create(cudaStream_t s, int max_tokens, int64_t max_cols);
  ~BlasPrefill();
  BlasPrefill(const BlasPrefill&) = delete;
  BlasPrefill& operator=(const BlasPrefill&) = delete;

  // The jobs of one prefill GEMV launch for n <= max_tokens tokens (unfused
  // jobs only); throws lr::Error naming `name` when a call fails.
  void products(const GemvArgs& a, int n, const std::string& name);

 private:
  BlasPrefill() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lr::cuda
