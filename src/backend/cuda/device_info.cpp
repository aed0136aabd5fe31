// What the device is (cuda_device_info) and how fast it reads
// (cuda_read_bandwidth_gbs): the roofline the GPU figures are held to.
#include <algorithm>
#include <string>

#include "backend/cuda/cuda.h"
#include "backend/cuda/cuda_api.h"
#include "backend/cuda/device_weights.h"
#include "backend/cuda/kernels.cuh"
#include "core/error.h"

namespace lr {

std::string cuda_device_info(bool* available) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (available) *available = e == cudaSuccess && n > 0;
  if (e != cudaSuccess) return fmt::format("no CUDA device ({})", cudaGetErrorString(e));
  if (n == 0) return "no CUDA device";
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, 0) != cudaSuccess)
    return "a CUDA device whose properties cannot be read";
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  return fmt::format("{}, {:.0f} GiB, sm_{}{}, {} SMs, driver {}.{}, runtime {}.{}", p.name,
                     double(p.totalGlobalMem) / double(1ull << 30), p.major, p.minor,
                     p.multiProcessorCount, driver / 1000, driver % 1000 / 10, runtime / 1000,
                     runtime % 1000 / 10);
}

double cuda_read_bandwidth_gbs() {
  bool ok = false;
  const std::string info = cuda_device_info(&ok);
  if (!ok) fail("no GPU to measure: {}", info);
  using namespace cuda;
#ifdef LOWRANK_CUDA_EMU
  const int64_t n = (int64_t(64) << 20) / 16;  // the emulator measures the CPU: 64 MiB will do
#else
  const int64_t n = (int64_t(2) << 30) / 16;  // float4s in 2 GiB
#endif
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int blocks = sms * 4;
  float4* x = device_alloc<float4>(size_t(n));
  float* out = device_alloc<float>(size_t(blocks));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  double best = 0;
  for (int rep = 0; rep < 6; ++rep) {
    CK(cudaEventRecord(a));
    CK(launch_read_sum(nullptr, x, n, out, blocks));
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    if (rep > 0)
      best = std::max(best, double(n) * 16 / (double(ms) * 1e6));  // the first pass warms up
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaFree(x);
  cudaFree(out);
  return best;
}

}  // namespace lr
