// bench_cuda_kernels: the decode products of one layer, kernel by kernel, on
// the GPU. For each matrix of a shape (dense, and its two factors at keep
// 0.5 by lowrank's rank rule) it times the one-row GEMV, the batched GEMV of
// a batch's decode rows (launch_batch_products) at 1, 8 and 16 rows, and the
// tiled GEMM at 16 rows, each as one CUDA graph of `reps` launches (so the
// host's launch cost is not in the figure), and reports microseconds and
// the weight bytes read per second against the read bandwidth. Weights and
// inputs are constant (their values do not change a kernel's time). Then
// one layer's prefill of a block of TOKENS: each product on the own tiled
// GEMM and on cuBLAS, and the block's attention, with their FLOP rates.
// A research tool for a GPU session (scripts/gpu-check step 5), not a test:
// over the emulator (LOWRANK_CUDA_EMU) its timings are the CPU's.
//
//   bench_cuda_kernels [--shape llama-7b|smollm2-135m|tiny] [--reps N] [--prefill TOKENS]
#include <fmt/core.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda.h"
#include "backend/cuda/kernels.cuh"
#include "backend/cuda/plan.h"
#include "backend/cuda/prefill_blas.h"

namespace lr::cuda {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(fmt::format("{}: {}", what, cudaGetErrorString(e)));
}

struct Shape {
  const char* name;
  int64_t dim, ffn;
  int heads, kv_heads, head_dim;
};
const Shape kShapes[] = {{"llama-7b", 4096, 11008, 32, 32, 128},
                         {"smollm2-135m", 576, 1536, 9, 3, 64},
                         {"tiny", 256, 384, 4, 2, 64}};

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

// Microseconds per call of `launch` (long work: direct launches, best of 3 runs of reps).
template <typename F>
double time_direct_us(cudaStream_t s, int reps, F&& launch) {
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "event");
  check(cudaEventCreate(&b), "event");
  check(launch(), "warm-up");
  double best = 1e30;
  for (int k = 0; k < 3; ++k) {
    check(cudaEventRecord(a, s), "event");
    for (int i = 0; i < reps; ++i) check(launch(), "launch");
    check(cudaEventRecord(b, s), "event");
    check(cudaEventSynchronize(b), "sync");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, a, b), "event");
    best = std::min(best, double(ms) * 1e3 / reps);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return best;
}

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
  // One replay is reps launches.
  const double us = time_direct_us(s, 1, [&] { return cudaGraphLaunch(e, s); }) / reps;
  cudaGraphExecDestroy(e);
  return us;
}

struct Mat {
  std::string name;
  int64_t rows, cols;
};

// A launch's one job: m (bf16, constant) times `tokens` input rows.
GemvArgs product(Buffers& b, const Mat& m, int tokens) {
  const int64_t ld = (m.cols + 7) / 8 * 8;
  GemvArgs a;
  GemvJob& j = a.job[a.n_jobs++];
  j.m = {b.alloc<__nv_bfloat16>(size_t(m.rows * ld), 0x3c), m.rows, m.cols, ld};
  j.in = {b.alloc<float>(size_t(tokens * ld), 0), ld};
  j.out = {b.alloc<float>(size_t(tokens * m.rows), 0), m.rows};
  check(cudaDeviceSynchronize(), "setup");  // the memsets, before the timed stream's work
  return a;
}

// One layer's prefill of an n-token block at positions 3n..4n-1 (n = 512: the
// last block of a 2048-token prompt): each product on the own tiled GEMM and on
// cuBLAS (bf16 hi + lo, as the backend runs it), and the attention (split-K
// attend + merge) of the block over the f16 cache, f32 FLOP/s of each.
void prefill(cudaStream_t s, const Shape& sh, const std::vector<Mat>& mats, int n, int reps) {
  const int pos = 3 * n, ctx = 4 * n;
  int64_t widest = 0;
  for (const Mat& m : mats) widest = std::max(widest, (m.cols + 7) / 8 * 8);
  auto blas = BlasPrefill::create(s, n, widest);
  fmt::print("\nprefill of {} tokens at positions {}..{} (one layer's parts; {} runs each)\n", n,
             pos, pos + n - 1, reps);
  fmt::print("| part | own tiled GEMM ms | TFLOP/s | cuBLAS hi + lo ms | TFLOP/s |\n");
  fmt::print("| --- | ---: | ---: | ---: | ---: |\n");
  for (const Mat& m : mats) {
    Buffers b;
    const GemvArgs a = product(b, m, n);
    const double tflop = 2.0 * double(n) * double(m.rows * m.cols) / 1e12;
    const double own = time_direct_us(s, reps, [&] { return launch_gemv(s, a, n, true); }) / 1e3;
    double cub = 0;
    if (blas)
      cub = time_direct_us(s, reps,
                           [&] {
                             blas->products(a, n, m.name);
                             return cudaGetLastError();
                           }) /
            1e3;
    fmt::print("| {} | {:.3f} | {:.1f} | {} | {} |\n", m.name, own, tflop / own * 1e3,
               blas ? fmt::format("{:.3f}", cub) : "(no cuBLAS)",
               blas ? fmt::format("{:.1f}", tflop / cub * 1e3) : "");
  }
  Buffers b;
  const int64_t q_dim = int64_t(sh.heads) * sh.head_dim,
                kv_dim = int64_t(sh.kv_heads) * sh.head_dim;
  AttendArgs at;
  at.k = b.alloc<__half>(size_t(ctx * kv_dim), 0x2c);
  at.v = b.alloc<__half>(size_t(ctx * kv_dim), 0x2c);
  at.kv_dim = kv_dim;
  at.head_dim = sh.head_dim;
  at.n_heads = sh.heads;
  at.n_kv_heads = sh.kv_heads;
  at.chunks = attend_chunks(ctx);
  const size_t parts = size_t(n) * size_t(sh.heads) * size_t(at.chunks);
  at.part_m = b.alloc<float>(parts, 0);
  at.part_l = b.alloc<float>(parts, 0);
  at.part_acc = b.alloc<float>(parts * size_t(sh.head_dim), 0);
  const DevVec q{b.alloc<float>(size_t(n * q_dim), 0), q_dim},
      out{b.alloc<float>(size_t(n * q_dim), 0), q_dim};
  int* pos0 = b.alloc<int>(1, 0);
  check(cudaMemcpy(pos0, &pos, sizeof(int), cudaMemcpyHostToDevice), "copy");
  check(cudaDeviceSynchronize(), "setup");
  const Rows rows{pos0};
  const double ms =
      time_direct_us(s, reps,
                     [&] {
                       const cudaError_t e = launch_attend(s, n, rows, at, q);
                       return e != cudaSuccess ? e : launch_merge(s, n, rows, at, out);
                     }) /
      1e3;
  // q.k and p.v over the keys each token sees: 2 * 2 * head_dim flops per (head, key).
  double keys = 0;
  for (int t = 0; t < n; ++t) keys += pos + t + 1;
  const double tflop = 4.0 * double(sh.head_dim) * double(sh.heads) * keys / 1e12;
  fmt::print("| attention (attend + merge), {} heads x {} | {:.3f} | {:.1f} | | |\n", sh.heads,
             sh.head_dim, ms, tflop / ms * 1e3);
}

int run(int argc, char** argv) {
  std::string shape = "llama-7b";
  int reps = 100, prefill_tokens = 512;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--shape" && i + 1 < argc)
      shape = argv[++i];
    else if (a == "--reps" && i + 1 < argc)
      reps = std::max(1, std::atoi(argv[++i]));
    else if (a == "--prefill" && i + 1 < argc)
      prefill_tokens = std::clamp(std::atoi(argv[++i]), 0, 512);
    else
      throw std::runtime_error(
          "usage: bench_cuda_kernels [--shape llama-7b|smollm2-135m|tiny] [--reps N] "
          "[--prefill TOKENS (512; 0: none)]");
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
    const GemvArgs a = product(b, m, kRows);
    const double mb = double(m.rows * a.job[0].m.ld * 2) / 1e6;
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
  if (prefill_tokens > 0) prefill(s, *sh, mats, prefill_tokens, std::max(1, reps / 10));
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
