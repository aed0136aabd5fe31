// A CUDA emulator on the CPU (LOWRANK_CUDA_EMU=ON): the part of the CUDA
// runtime, device intrinsics and 16-bit float types that the CUDA backend
// uses, so that kernels.cu and backend_cuda.cpp compile unchanged with the C++
// compiler and run on a machine without a GPU, under the sanitizers too.
//
// Execution model: a launch runs its blocks one after another; the threads of
// a block run as fibers on the calling thread (emu/grid.cpp), switching at
// __syncthreads and at every warp shuffle. A barrier some live thread of the
// block never reaches, a shuffle with a lane that has exited, an oversized
// block or dynamic shared memory past the kernel's limit all fail the launch
// with the reason (cudaGetErrorString says it). Streams are synchronous (work
// runs when issued, or is recorded while the stream captures a graph). It
// checks the kernels' logic and the host's use of the runtime, not speed or
// concurrency: a missing stream synchronisation goes unnoticed here.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

#include "core/half.h"

// --- vector types and launch geometry --------------------------------------------

struct float2 {
  float x, y;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
inline float4 make_float4(float x, float y, float z, float w) {
  return {x, y, z, w};
}
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

// --- 16-bit floats (raw bits; conversions round to nearest even, as CUDA's) ----------

struct __nv_bfloat16 {
  uint16_t bits;
};
struct __nv_bfloat162 {
  __nv_bfloat16 x, y;
};
struct __half {
  uint16_t bits;
};

inline float __bfloat162float(__nv_bfloat16 h) {
  return lr::bf16_to_f32(h.bits);
}
inline float2 __bfloat1622float2(__nv_bfloat162 h) {
  return {lr::bf16_to_f32(h.x.bits), lr::bf16_to_f32(h.y.bits)};
}
inline __nv_bfloat16 __float2bfloat16(float f) {
  return {lr::f32_to_bf16(f)};
}
inline float __half2float(__half h) {
  return lr::f16_to_f32(h.bits);
}
inline __half __float2half(float f) {
  return {lr::f32_to_f16(f)};
}

// --- device qualifiers and intrinsics ----------------------------------------------

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
// Static shared memory: one copy per OS thread, which runs one block at a time.
#define __shared__ static thread_local

#define threadIdx (::lr::cuda_emu::thread_index())
#define blockIdx (::lr::cuda_emu::block_index())
#define blockDim (::lr::cuda_emu::block_dim())
#define gridDim (::lr::cuda_emu::grid_dim())

// As the GPU's fast exp: 2^(x log2 e), the product rounded to f32 first (its
// main error, growing with |x|); the GPU's ex2.approx adds about 2 ulp more.
inline float __expf(float x) {
  return std::exp2(x * 1.44269504088896341f);
}
inline float rsqrtf(float x) {
  return 1.f / std::sqrt(x);
}
inline int min(int a, int b) {
  return a < b ? a : b;
}
inline int max(int a, int b) {
  return a > b ? a : b;
}

namespace lr::cuda_emu {

const uint3& thread_index();
const uint3& block_index();
const dim3& block_dim();
const dim3& grid_dim();
void sync_threads();
// Every live lane of the calling warp exchanges 4 bytes; returns those of the
// lane (lane ^ lane_mask) within the lane's group of `width`.
uint32_t shuffle_xor(uint32_t v, int lane_mask, int width);
// The block's dynamic shared memory (the launch's size, 16-byte aligned).
void* dynamic_shared();

}  // namespace lr::cuda_emu

inline void __syncthreads() {
  ::lr::cuda_emu::sync_threads();
}
template <typename T>
T __shfl_xor_sync(unsigned /*mask: all lanes*/, T v, int lane_mask, int width = 32) {
  static_assert(sizeof(T) == 4 && std::is_trivially_copyable_v<T>, "4-byte shuffles only");
  uint32_t u;
  std::memcpy(&u, &v, 4);
  u = ::lr::cuda_emu::shuffle_xor(u, lane_mask, width);
  std::memcpy(&v, &u, 4);
  return v;
}

// --- runtime API ---------------------------------------------------------------------

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevicePointer = 17,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorLaunchFailure = 719,
  cudaErrorStreamCaptureUnsupported = 900,
  cudaErrorStreamCaptureInvalidated = 901,
};
const char* cudaGetErrorString(cudaError_t e);
cudaError_t cudaGetLastError();

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
};
cudaError_t cudaMalloc(void** p, size_t bytes);
template <typename T>
cudaError_t cudaMalloc(T** p, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(p), bytes);
}
cudaError_t cudaFree(void* p);
cudaError_t cudaMallocHost(void** p, size_t bytes);
template <typename T>
cudaError_t cudaMallocHost(T** p, size_t bytes) {
  return cudaMallocHost(reinterpret_cast<void**>(p), bytes);
}
cudaError_t cudaFreeHost(void* p);
cudaError_t cudaMemset(void* p, int value, size_t bytes);

struct CUstream_st;
using cudaStream_t = CUstream_st*;  // nullptr: the legacy default stream
constexpr unsigned cudaStreamNonBlocking = 1;
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t s = nullptr);

struct CUgraph_st;
struct CUgraphExec_st;
struct CUgraphNode_st;
using cudaGraph_t = CUgraph_st*;
using cudaGraphExec_t = CUgraphExec_st*;
using cudaGraphNode_t = CUgraphNode_st*;
enum cudaGraphNodeType { cudaGraphNodeTypeKernel = 0, cudaGraphNodeTypeMemcpy = 1 };
enum cudaStreamCaptureMode {
  cudaStreamCaptureModeGlobal = 0,
  cudaStreamCaptureModeThreadLocal = 1,
  cudaStreamCaptureModeRelaxed = 2,
};
enum cudaStreamCaptureStatus {
  cudaStreamCaptureStatusNone = 0,
  cudaStreamCaptureStatusActive = 1,
  cudaStreamCaptureStatusInvalidated = 2,
};
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* g);
cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus* st);
cudaError_t cudaGraphGetNodes(cudaGraph_t g, cudaGraphNode_t* nodes, size_t* n);
cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, cudaGraphNodeType* type);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* e, cudaGraph_t g, unsigned long long flags = 0);
cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e);
cudaError_t cudaGraphDestroy(cudaGraph_t g);

struct CUevent_st;
using cudaEvent_t = CUevent_st*;
cudaError_t cudaEventCreate(cudaEvent_t* e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b);
cudaError_t cudaEventDestroy(cudaEvent_t e);

struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  int major, minor, multiProcessorCount;
};
enum cudaDeviceAttr { cudaDevAttrMultiProcessorCount = 16 };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
cudaError_t cudaGetDeviceCount(int* n);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device);
cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr attr, int device);
cudaError_t cudaDriverGetVersion(int* v);
cudaError_t cudaRuntimeGetVersion(int* v);

namespace lr::cuda_emu {

constexpr size_t kDefaultSharedLimit = 48 << 10;  // dynamic shared memory without opting in
constexpr size_t kMaxSharedLimit = 227 << 10;     // the most a kernel may opt in to (sm_90)

cudaError_t set_shared_limit(const void* kernel, int bytes);
// Whether [p, p + bytes) lies inside one device allocation.
bool on_device(const void* p, size_t bytes);
// Runs `work` now, or records it as a graph node while `s` captures.
cudaError_t enqueue(cudaStream_t s, cudaGraphNodeType type, std::function<cudaError_t()> work);

struct LaunchConfig {
  dim3 grid, block;
  size_t smem = 0;
  cudaStream_t stream = nullptr;
  const void* kernel = nullptr;  // identifies the kernel (its shared memory limit)
};
// Runs (or, while the stream captures, records) one launch; the result is the
// launch's error, which cudaGetLastError returns next.
void submit(const LaunchConfig& c, std::function<void()> body);

// kernel<<<grid, block, smem, stream>>>(args...): the arguments are converted to
// the kernel's parameter types and copied, as a launch does.
template <typename... P>
struct Launcher {
  LaunchConfig c;
  void (*kernel)(P...);
  template <typename... A>
  void operator()(A&&... a) const {
    std::tuple<std::decay_t<P>...> args(std::forward<A>(a)...);
    auto k = kernel;
    submit(c, [k, args]() { std::apply(k, args); });
  }
};
template <typename... P>
Launcher<P...> launch(dim3 grid, dim3 block, size_t smem, cudaStream_t s, void (*kernel)(P...)) {
  return {{grid, block, smem, s, reinterpret_cast<const void*>(kernel)}, kernel};
}

}  // namespace lr::cuda_emu

template <typename... P>
cudaError_t cudaFuncSetAttribute(void (*kernel)(P...), cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaErrorInvalidValue;
  return ::lr::cuda_emu::set_shared_limit(reinterpret_cast<const void*>(kernel), value);
}

#define LR_LAUNCH(grid, block, smem, stream, ...) \
  ::lr::cuda_emu::launch((grid), (block), (smem), (stream), __VA_ARGS__)
#define LR_DYNAMIC_SHARED(T, name) T* name = static_cast<T*>(::lr::cuda_emu::dynamic_shared())
