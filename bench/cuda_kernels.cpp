// bench_cuda_kernels: the decode products of one layer, kernel by kernel, on
// the GPU. For each matrix of a shape (dense, and its two factors at keep
// 0.5 by lowrank's rank rule) it times the one-row GEMV, the batched GEMV of
// a batch's decode rows (launch_batch_products) at 1, 8 and 16 rows, and the
// tiled GEMM at 16 rows, each as one CUDA graph of `reps` launches (so the
// host's launch cost is not in the figure), and reports microseconds and
// the weight bytes read per second against the read bandwidth. Weights and
// inputs are constant (their values do not change a kernel's time).
// A research tool for a GPU session (scripts/gpu-check step 5), not a test:
// over the emulator (LOWRANK_CUDA_EMU) its timings are the CPU's.
//
//   bench_cuda_kernels [--shape llama-7b|smollm2-135m|tiny] [--reps N]
#include <fmt/core.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/kernels.cuh"

namespace lr::cuda {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(fmt::format("{}: {}", what, cudaGetErrorString(e)));
}

struct Shape {
  const char* name;
  int64_t dim, ffn;
};
const Shape kShapes[] = {
    {"llama-7b", 4096, 11008}, {"smollm2-135m", 576, 1536}, {"tiny", 256, 384}};

// lowrank's rank for keep (compress/factorize.h): floor(m n keep / (m + n)).
int64_t rank_for(int64_t m, int64_t n, double keep) {
  return std::max<int64_t>(
      1, std::min<int64_t>(std::min(m, n), int64_t(double(m * n) * keep / double(m + n))));
}

struct Buffers {
  std::vector<void*> owned;
  template <typename T>
  T* alloc(size_t n, int byte) {
    void* p = nullptr;
    check(cudaMalloc(&p, n * sizeof(T)), "cudaMalloc");
    check(cudaMemset(p, byte, n * sizeof(T)), "cudaMemset");
    owned.push_back(p);
    return static_cast<T*>(p);
  }
  ~Buffers() {
    for (void* p : owned) cudaFree(p);
  }
};

// Microseconds per launch of `launch`, timed as a graph of reps launches (best of 3 replays).
template <typename F>
double time_us(cudaStream_t s, int reps, F&& launch) {
  cudaGraph_t g = nullptr;
  check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "capture");
  for (int i = 0; i < reps; ++i) check(launch(), "launch");
  check(cudaStreamEndCapture(s, &g), "end capture");
  cudaGraphExec_t e = nullptr;
  check(cudaGraphInstantiate(&e, g, 0), "instantiate");
  cudaGraphDestroy(g);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  check(cudaGraphLaunch(e, s), "warm-up");
  double best = 1e30;
  for (int k = 0; k < 3; ++k) {
    cudaEventRecord(a, s);
    check(cudaGraphLaunch(e, s), "replay");
    cudaEventRecord(b, s);
    check(cudaEventSynchronize(b), "sync");
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    best = std::min(best, double(ms) * 1e3 / reps);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaGraphExecDestroy(e);
  return best;
}

int run(int argc, char** argv) {
  std::string shape = "llama-7b";
  int reps = 100;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--shape" && i + 1 < argc)
      shape = argv[++i];
    else if (a == "--reps" && i + 1 < argc)
      reps = std::max(1, std::atoi(argv[++i]));
    else
      throw std::runtime_error(
          "usage: bench_cuda_kernels [--shape llama-7b|smollm2-135m|tiny] [--reps N]");
  }
  const Shape* sh = nullptr;
  for (const Shape& s : kShapes)
    if (shape == s.name) sh = &s;
  if (!sh) throw std::runtime_error(fmt::format("bench_cuda_kernels: unknown --shape {}", shape));
  bool ok = false;
  const std::string info = cuda_device_info(&ok);
  if (!ok) throw std::runtime_error("bench_cuda_kernels: " + info);
  const double gbs = cuda_read_bandwidth_gbs();
  fmt::print(
      "bench_cuda_kernels: {}; read bandwidth {:.1f} GB/s; shape {}, {} launches per graph\n", info,
      gbs, sh->name, reps);

  struct Mat {
    std::string name;
    int64_t rows, cols;
  };
  std::vector<Mat> mats;
  auto add = [&](const std::string& n, int64_t m, int64_t k) {
    mats.push_back({n, m, k});
    const int64_t r = rank_for(m, k, 0.5);
    mats.push_back({n + " V (keep 0.5)", r, k});
    mats.push_back({n + " U (keep 0.5)", m, r});
  };
  add("q / o", sh->dim, sh->dim);
  add("gate / up", sh->ffn, sh->dim);
  add("down", sh->dim, sh->ffn);
  int64_t widest = 0;
  for (const Mat& m : mats) widest = std::max({widest, m.cols, m.rows});
  check(prepare_kernels(widest, 0), "prepare_kernels");

  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
  constexpr int kRows = 16;
  fmt::print(
      "| matrix | rows x cols | weight MB | GEMV 1 row us | GB/s | % | batch GEMV 1 / 8 / 16 rows "
      "us "
      "| GB/s at 16 | tiled GEMM 16 rows us |\n");
  fmt::print("| --- | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: |\n");
  for (const Mat& m : mats) {
    Buffers b;
    const int64_t ld = (m.cols + 7) / 8 * 8;
    GemvArgs a;
    GemvJob& j = a.job[a.n_jobs++];
    j.m = {b.alloc<__nv_bfloat16>(size_t(m.rows * ld), 0x3c), m.rows, m.cols, ld};
    j.in = {b.alloc<float>(size_t(kRows * ld), 0), ld};
    j.out = {b.alloc<float>(size_t(kRows * m.rows), 0), m.rows};
    const double mb = double(m.rows * ld * 2) / 1e6;
    const double one = time_us(s, reps, [&] { return launch_gemv(s, a, 1); });
    double rows[3];
    const int ns[3] = {1, 8, 16};
    for (int k = 0; k < 3; ++k)
      rows[k] = time_us(s, reps, [&] { return launch_batch_products(s, a, ns[k], ns[k]); });
    const double gemm = time_us(s, reps, [&] { return launch_gemv(s, a, kRows, true); });
    fmt::print(
        "| {} | {} x {} | {:.2f} | {:.1f} | {:.0f} | {:.0f}% | {:.1f} / {:.1f} / {:.1f} | {:.0f} | "
        "{:.1f} |\n",
        m.name, m.rows, m.cols, mb, one, mb * 1e3 / one, 100 * mb * 1e3 / one / gbs, rows[0],
        rows[1], rows[2], mb * 1e3 / rows[2], gemm);
  }
  cudaStreamDestroy(s);
  return 0;
}

}  // namespace
}  // namespace lr::cuda

int main(int argc, char** argv) {
  try {
    return lr::cuda::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
