// The CPU emulator of CUDA (backend/cuda/emu): what kernels see (indices,
// barriers, shuffles, shared memory), the faults it reports instead of
// computing garbage, and the runtime's memory, copy, capture and graph rules.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend/cuda/cuda_api.h"
#include "backend/cuda/emu/cublas_emu.h"
#include "core/half.h"

namespace {

// out[block * blockDim + t] = the block's sum of (t + 1) reduced through shared
// memory and shuffles, plus the thread's own indices packed.
__global__ void sum_kernel(int* out) {
  __shared__ int part[32];
  const int t = int(threadIdx.x), lane = t % 32, warp = t / 32;
  int v = t + 1;
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (lane == 0) part[warp] = v;
  __syncthreads();
  int s = 0;
  for (int w = 0; w < int(blockDim.x) / 32; ++w) s += part[w];
  out[blockIdx.x * blockDim.x + t] = s * 1000 + int(blockIdx.x);
}

// Half a warp waits at __syncthreads, the other half at a shuffle: never met.
__global__ void divergent_kernel(int* out) {
  if (threadIdx.x < 16) {
    __syncthreads();
  } else {
    out[0] = __shfl_xor_sync(0xffffffffu, int(threadIdx.x), 1);
  }
}

// Lane 1 exits before the shuffle lane 0 reads it in.
__global__ void exited_lane_kernel(int* out) {
  if (threadIdx.x == 1) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, int(threadIdx.x), 1);
}

// Dynamic shared memory: written by thread t, read back reversed.
__global__ void reverse_kernel(float* x, int n) {
  LR_DYNAMIC_SHARED(float, s);
  const int t = int(threadIdx.x);
  if (t < n) s[t] = x[t];
  __syncthreads();
  if (t < n) x[t] = s[n - 1 - t];
}

// Reads a neighbour's shared write without a barrier in between.
__global__ void racy_kernel(int* out) {
  __shared__ int s[64];
  const int t = int(threadIdx.x);
  s[t] = t + 100 * int(blockIdx.x);
  out[blockIdx.x * 64 + t] = s[(t + 1) % 64];  // __syncthreads() missing
}

__global__ void add_one_kernel(int* x, const int* by) {
  x[threadIdx.x] += *by;
}

template <typename T>
T* dev(size_t n) {
  T* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, n * sizeof(T)), cudaSuccess);
  return p;
}

std::string last_error_text() {
  return cudaGetErrorString(cudaGetLastError());
}

TEST(CudaEmu, ShufflesBarriersAndIndicesAsOnAGpu) {
  const int blocks = 3, threads = 96;
  int* d = dev<int>(blocks * threads);
  LR_LAUNCH(blocks, threads, 0, nullptr, sum_kernel)(d);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  std::vector<int> h(blocks * threads);
  ASSERT_EQ(cudaMemcpy(h.data(), d, h.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  for (int b = 0; b < blocks; ++b)
    for (int t = 0; t < threads; ++t)
      EXPECT_EQ(h[size_t(b * threads + t)], (96 * 97 / 2) * 1000 + b) << b << " " << t;
  cudaFree(d);
}

TEST(CudaEmu, ADeadlockOrAShuffleWithAnExitedLaneFailsTheLaunch) {
  int* d = dev<int>(64);
  LR_LAUNCH(1, 32, 0, nullptr, divergent_kernel)(d);
  const std::string e = last_error_text();
  EXPECT_NE(e.find("unspecified launch failure"), std::string::npos) << e;
  EXPECT_NE(e.find("deadlock: 16 of 32 live threads wait at __syncthreads"), std::string::npos)
      << e;
  LR_LAUNCH(1, 32, 0, nullptr, exited_lane_kernel)(d);
  const std::string x = last_error_text();
  EXPECT_NE(x.find("thread 0 reads lane 1, which did not take part"), std::string::npos) << x;
  LR_LAUNCH(2, 32, 0, nullptr, sum_kernel)(d);  // the emulator recovers for the next launch
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  cudaFree(d);
}

TEST(CudaEmu, AMissingBarrierShows) {
  int* d = dev<int>(2 * 64);
  LR_LAUNCH(2, 64, 0, nullptr, racy_kernel)(d);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  std::vector<int> h(2 * 64);
  ASSERT_EQ(cudaMemcpy(h.data(), d, h.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  // Block 0 runs its threads upwards, so each reads its neighbour before it writes;
  // block 1 downwards, so the last thread reads s[0] before thread 0 has run.
  int wrong0 = 0, wrong1 = 0;
  for (int t = 0; t < 64; ++t) {
    wrong0 += h[size_t(t)] != (t + 1) % 64;
    wrong1 += h[size_t(64 + t)] != (t + 1) % 64 + 100;
  }
  EXPECT_EQ(wrong0, 63);
  EXPECT_EQ(wrong1, 1);
  cudaFree(d);
}

TEST(CudaEmu, LaunchGeometryAndTheSharedMemoryLimitAreChecked) {
  int* d = dev<int>(4096);
  LR_LAUNCH(1, 2048, 0, nullptr, sum_kernel)(d);
  EXPECT_NE(last_error_text().find("a block of 2048x1x1 threads"), std::string::npos);
  LR_LAUNCH(dim3(1, 70000), 32, 0, nullptr, sum_kernel)(d);
  EXPECT_NE(last_error_text().find("a grid of 1x70000x1 blocks"), std::string::npos);

  const int n = 256;
  float* x = dev<float>(n);
  std::vector<float> h(n);
  for (int i = 0; i < n; ++i) h[size_t(i)] = float(i);
  ASSERT_EQ(cudaMemcpy(x, h.data(), n * 4, cudaMemcpyHostToDevice), cudaSuccess);
  const size_t big = 64 << 10;  // past the 48 KiB a kernel gets without opting in
  LR_LAUNCH(1, n, big, nullptr, reverse_kernel)(x, n);
  EXPECT_NE(last_error_text().find("65536 bytes of dynamic shared memory, past the kernel's limit "
                                   "of 49152"),
            std::string::npos);
  ASSERT_EQ(
      cudaFuncSetAttribute(reverse_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(big)),
      cudaSuccess);
  LR_LAUNCH(1, n, big, nullptr, reverse_kernel)(x, n);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(h.data(), x, n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  for (int i = 0; i < n; ++i) EXPECT_EQ(h[size_t(i)], float(n - 1 - i));
  EXPECT_EQ(
      cudaFuncSetAttribute(reverse_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 300 << 10),
      cudaErrorInvalidValue);
  cudaFree(x);
  cudaFree(d);
}

TEST(CudaEmu, CopiesAreCheckedAgainstTheirAllocations) {
  float* d = dev<float>(16);
  std::vector<float> h(32);
  EXPECT_EQ(cudaMemcpy(d, h.data(), 16 * 4, cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(d, h.data(), 17 * 4, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_NE(std::string(cudaGetErrorString(cudaErrorInvalidValue))
                .find("the destination is not inside a device allocation"),
            std::string::npos);
  EXPECT_EQ(cudaMemcpy(h.data(), d + 8, 8 * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(h.data(), h.data() + 16, 4, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(d, h.data(), 4, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFree(h.data()), cudaErrorInvalidDevicePointer);
  EXPECT_EQ(cudaFree(d), cudaSuccess);
}

TEST(CudaEmu, AGraphRecordsLaunchesAndCopiesAndReplaysThemWithTodaysValues) {
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  int* x = dev<int>(32);
  int* by = dev<int>(1);
  ASSERT_EQ(cudaMemset(x, 0, 32 * 4), cudaSuccess);
  int* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(&pinned, 4), cudaSuccess);

  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(by, pinned, 4, cudaMemcpyHostToDevice, s), cudaSuccess);
  LR_LAUNCH(1, 32, 0, s, add_one_kernel)(x, by);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(s),
            cudaErrorStreamCaptureUnsupported);  // refused while capturing
  cudaGraph_t g = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
  size_t nodes = 0;
  ASSERT_EQ(cudaGraphGetNodes(g, nullptr, &nodes), cudaSuccess);
  ASSERT_EQ(nodes, 2u);
  std::vector<cudaGraphNode_t> list(nodes);
  ASSERT_EQ(cudaGraphGetNodes(g, list.data(), &nodes), cudaSuccess);
  cudaGraphNodeType t0, t1;
  ASSERT_EQ(cudaGraphNodeGetType(list[0], &t0), cudaSuccess);
  ASSERT_EQ(cudaGraphNodeGetType(list[1], &t1), cudaSuccess);
  EXPECT_EQ(t0, cudaGraphNodeTypeMemcpy);
  EXPECT_EQ(t1, cudaGraphNodeTypeKernel);
  cudaGraphExec_t e = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&e, g, 0), cudaSuccess);
  cudaGraphDestroy(g);

  int h = -1;
  ASSERT_EQ(cudaMemcpy(&h, x, 4, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(h, 0);  // nothing ran while capturing
  for (int step = 1; step <= 3; ++step) {
    *pinned = step;  // read by the graph's copy when it replays
    ASSERT_EQ(cudaGraphLaunch(e, s), cudaSuccess);
  }
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  std::vector<int> out(32);
  ASSERT_EQ(cudaMemcpy(out.data(), x, 32 * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  for (int v : out) EXPECT_EQ(v, 1 + 2 + 3);
  cudaGraphExecDestroy(e);
  cudaFreeHost(pinned);
  cudaFree(x);
  cudaFree(by);
  cudaStreamDestroy(s);
}

// cuBLAS's column-major semantics, worked by hand: A is 2 x 3 stored with lda 4,
// op(A) = A^T is 3 x 2; B is 2 x 2; C = 2 A^T B + C is 3 x 2 with ldc 3.
TEST(CudaEmu, CublasGemmExIsColumnMajorAndChecksItsArguments) {
  const float a_host[8] = {1, 2, 0, 0, 3, 4, 0, 0};  // columns (1,2) (3,4), and (5,6) below
  std::vector<__nv_bfloat16> a(12), b(4);
  for (int i = 0; i < 8; ++i) a[size_t(i)] = __float2bfloat16(a_host[i]);
  a[8] = __float2bfloat16(5);
  a[9] = __float2bfloat16(6);
  const float b_host[4] = {1, 1, 2, -1};  // columns (1,1) and (2,-1)
  for (int i = 0; i < 4; ++i) b[size_t(i)] = __float2bfloat16(b_host[i]);
  __nv_bfloat16* da = dev<__nv_bfloat16>(a.size());
  __nv_bfloat16* db = dev<__nv_bfloat16>(b.size());
  float* dc = dev<float>(6);
  ASSERT_EQ(cudaMemcpy(da, a.data(), a.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(db, b.data(), b.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  const std::vector<float> c0 = {10, 20, 30, 40, 50, 60};
  ASSERT_EQ(cudaMemcpy(dc, c0.data(), 24, cudaMemcpyHostToDevice), cudaSuccess);
  cublasHandle_t h = nullptr;
  ASSERT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
  const float alpha = 2, beta = 1;
  auto gemm = [&](int lda, int ldc, cudaDataType ta) {
    return cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, 3, 2, 2, &alpha, da, ta, lda, db, CUDA_R_16BF,
                        2, &beta, dc, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  };
  ASSERT_EQ(gemm(4, 3, CUDA_R_16BF), CUBLAS_STATUS_SUCCESS);
  std::vector<float> c(6);
  ASSERT_EQ(cudaMemcpy(c.data(), dc, 24, cudaMemcpyDeviceToHost), cudaSuccess);
  // A^T = [[1,2],[3,4],[5,6]]; A^T B = [[3,0],[7,2],[11,4]], column-major (3,7,11),(0,2,4).
  const std::vector<float> want = {10 + 6, 20 + 14, 30 + 22, 40 + 0, 50 + 4, 60 + 8};
  EXPECT_EQ(c, want);
  EXPECT_EQ(gemm(1, 3, CUDA_R_16BF), CUBLAS_STATUS_INVALID_VALUE);  // lda < k
  EXPECT_EQ(gemm(4, 2, CUDA_R_16BF), CUBLAS_STATUS_INVALID_VALUE);  // ldc < m
  EXPECT_EQ(gemm(8, 3, CUDA_R_16BF),
            CUBLAS_STATUS_INVALID_VALUE);  // A's extent past its allocation
  EXPECT_EQ(gemm(4, 3, CUDA_R_32F), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(cublasDestroy(h), CUBLAS_STATUS_SUCCESS);
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
}

TEST(CudaEmu, SixteenBitFloatsRoundToNearestEven) {
  // 1 + 2^-8 lies halfway between two bf16 values and rounds to the even one (1.0);
  // 1 + 3 * 2^-8 rounds up to 1 + 2^-6.
  EXPECT_EQ(__bfloat162float(__float2bfloat16(1.f + 1.f / 256)), 1.f);
  EXPECT_EQ(__bfloat162float(__float2bfloat16(1.f + 3.f / 256)), 1.f + 1.f / 64);
  EXPECT_EQ(__half2float(__float2half(1.f + 1.f / 2048)), 1.f);
  EXPECT_EQ(__half2float(__float2half(65504.f)), 65504.f);
  const __nv_bfloat162 p{__float2bfloat16(-2.5f), __float2bfloat16(0.75f)};
  const float2 f = __bfloat1622float2(p);
  EXPECT_EQ(f.x, -2.5f);
  EXPECT_EQ(f.y, 0.75f);
}

}  // namespace
