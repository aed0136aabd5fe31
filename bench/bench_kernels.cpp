// Kernel micro-benchmarks at the SmolLM2-135M shapes (hidden 576, kv 192,
// ffn 1536, vocab 49152).
//
//   matvec_*      bytes/s of weights streamed (decode path). The weights of
//                 one shape are reused each iteration, so they stay in cache
//                 (L2 / L3) unless the shape is large; *_cold rotates over
//                 512 MiB of copies to measure DRAM-bound streaming.
//   matmul_*      FLOP/s (2 * n * rows * cols per call) for n = 64 and 512.
//   *_2threads    the same work split over a 2-thread lr::ThreadPool.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include <immintrin.h>

#include "backend/cpu/kernels/kernels.h"
#include "backend/cpu/kernels/kernels_simd.h"
#include "backend/cpu/kernels/panels.h"
#include "core/cpu_features.h"
#include "core/half.h"
#include "core/thread_pool.h"

namespace {

namespace cpu = lr::cpu;

std::vector<float> rand_f32(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<uint16_t> rand_bf16(int64_t n, uint32_t seed) {
  std::vector<float> f = rand_f32(n, seed);
  std::vector<uint16_t> v(static_cast<size_t>(n));
  cpu::f32_to_bf16_row(f.data(), v.data(), n);
  return v;
}

// IEEE f16 weights (uniform in [-1, 1) rounded to f16).
std::vector<uint16_t> rand_f16(int64_t n, uint32_t seed) {
  std::vector<float> f = rand_f32(n, seed);
  std::vector<uint16_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = lr::f32_to_f16(f[size_t(i)]);
  return v;
}

// {rows, cols}
void matvec_shapes(benchmark::internal::Benchmark* b) {
  b->Args({576, 576})->Args({192, 576})->Args({1536, 576})->Args({576, 1536})->Args({49152, 576});
}

void BM_matvec_bf16(benchmark::State& st) {
  const int64_t rows = st.range(0), cols = st.range(1);
  const auto W = rand_bf16(rows * cols, 1);
  const auto x = rand_f32(cols, 2);
  std::vector<float> y(static_cast<size_t>(rows));
  for (auto _ : st) {
    cpu::matvec_bf16(W.data(), x.data(), y.data(), cols, 0, rows);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(int64_t(st.iterations()) * rows * cols * 2);
}
BENCHMARK(BM_matvec_bf16)->Apply(matvec_shapes);

void BM_matvec_f16(benchmark::State& st) {
  const int64_t rows = st.range(0), cols = st.range(1);
  const auto W = rand_f16(rows * cols, 1);
  const auto x = rand_f32(cols, 2);
  std::vector<float> y(static_cast<size_t>(rows));
  for (auto _ : st) {
    cpu::matvec_f16(W.data(), x.data(), y.data(), cols, 0, rows);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(int64_t(st.iterations()) * rows * cols * 2);
}
BENCHMARK(BM_matvec_f16)->Args({576, 576})->Args({1536, 576})->Args({49152, 576});

void BM_matvec_f32(benchmark::State& st) {
  const int64_t rows = st.range(0), cols = st.range(1);
  const auto W = rand_f32(rows * cols, 1);
  const auto x = rand_f32(cols, 2);
  std::vector<float> y(static_cast<size_t>(rows));
  for (auto _ : st) {
    cpu::matvec_f32(W.data(), x.data(), y.data(), cols, 0, rows);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(int64_t(st.iterations()) * rows * cols * 4);
}
BENCHMARK(BM_matvec_f32)->Apply(matvec_shapes);

// 1536 x 576 bf16 matrices (1.7 MiB each), rotating over 512 MiB of them so
// each call streams from DRAM.
void BM_matvec_bf16_cold(benchmark::State& st) {
  const int64_t rows = 1536, cols = 576, copies = (512 << 20) / (rows * cols * 2);
  std::vector<uint16_t> W(static_cast<size_t>(rows * cols * copies));
  const auto one = rand_bf16(rows * cols, 1);
  for (int64_t k = 0; k < copies; ++k)
    std::copy(one.begin(), one.end(), W.begin() + k * rows * cols);
  const auto x = rand_f32(cols, 2);
  std::vector<float> y(static_cast<size_t>(rows));
  int64_t k = 0;
  for (auto _ : st) {
    cpu::matvec_bf16(W.data() + k * rows * cols, x.data(), y.data(), cols, 0, rows);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
    k = (k + 1) % copies;
  }
  st.SetBytesProcessed(int64_t(st.iterations()) * rows * cols * 2);
}
BENCHMARK(BM_matvec_bf16_cold);

void BM_matvec_bf16_2threads(benchmark::State& st) {
  const int64_t rows = st.range(0), cols = st.range(1);
  const auto W = rand_bf16(rows * cols, 1);
  const auto x = rand_f32(cols, 2);
  std::vector<float> y(static_cast<size_t>(rows));
  lr::ThreadPool pool(2);
  for (auto _ : st) {
    pool.parallel_for(rows / 4, [&](int64_t b, int64_t e) {
      cpu::matvec_bf16(W.data(), x.data(), y.data(), cols, b * 4, e == rows / 4 ? rows : e * 4);
    });
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(int64_t(st.iterations()) * rows * cols * 2);
}
BENCHMARK(BM_matvec_bf16_2threads)->Args({576, 576})->Args({1536, 576})->Args({49152, 576})->UseRealTime();

// {rows, cols, n}
void matmul_shapes(benchmark::internal::Benchmark* b) {
  for (int64_t n : {64, 512})
    b->Args({576, 576, n})->Args({1536, 576, n})->Args({576, 1536, n})->Args({49152, 576, n});
}

template <class T>
using MatmulFn = void (*)(const T*, const float*, float*, int64_t, int64_t, int64_t, int64_t,
                          int64_t, int64_t, cpu::MatmulPath);

template <class T>
void run_matmul(benchmark::State& st, const std::vector<T>& W, MatmulFn<T> kernel,
                bool two_threads) {
  const int64_t rows = st.range(0), cols = st.range(1), n = st.range(2);
  const auto X = rand_f32(n * cols, 2);
  std::vector<float> Y(static_cast<size_t>(n * rows));
  lr::ThreadPool pool(two_threads ? 2 : 1);
  for (auto _ : st) {
    pool.parallel_for(rows / 16, [&](int64_t b, int64_t e) {
      const int64_t r1 = e == rows / 16 ? rows : e * 16;
      kernel(W.data(), X.data(), Y.data(), n, cols, cols, rows, b * 16, r1, cpu::MatmulPath::Any);
    });
    benchmark::DoNotOptimize(Y.data());
    benchmark::ClobberMemory();
  }
  st.counters["FLOP/s"] = benchmark::Counter(double(2 * n * rows * cols),
                                             benchmark::Counter::kIsIterationInvariantRate);
}

void BM_matmul_bf16(benchmark::State& st) {
  run_matmul(st, rand_bf16(st.range(0) * st.range(1), 1), cpu::matmul_bf16, false);
}
BENCHMARK(BM_matmul_bf16)->Apply(matmul_shapes)->Unit(benchmark::kMillisecond);

void BM_matmul_f16(benchmark::State& st) {
  run_matmul(st, rand_f16(st.range(0) * st.range(1), 1), cpu::matmul_f16, false);
}
BENCHMARK(BM_matmul_f16)
    ->Args({1536, 576, 4})  // inner-product path
    ->Args({1536, 576, 512})
    ->Unit(benchmark::kMillisecond);

void BM_matmul_f32(benchmark::State& st) {
  run_matmul(st, rand_f32(st.range(0) * st.range(1), 1), cpu::matmul_f32, false);
}
BENCHMARK(BM_matmul_f32)->Args({1536, 576, 64})->Args({1536, 576, 512})->Unit(benchmark::kMillisecond);

void BM_matmul_bf16_2threads(benchmark::State& st) {
  run_matmul(st, rand_bf16(st.range(0) * st.range(1), 1), cpu::matmul_bf16, true);
}
BENCHMARK(BM_matmul_bf16_2threads)
    ->Args({1536, 576, 512})
    ->Args({49152, 576, 64})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Small n (the inner-product path below 12 tokens, the packed path from 12).
void BM_matmul_bf16_small_n(benchmark::State& st) {
  run_matmul(st, rand_bf16(1536 * 576, 1), cpu::matmul_bf16, false);
}
BENCHMARK(BM_matmul_bf16_small_n)
    ->Args({1536, 576, 2})
    ->Args({1536, 576, 4})
    ->Args({1536, 576, 5})
    ->Args({1536, 576, 6})
    ->Args({1536, 576, 8})
    ->Args({1536, 576, 12})->Args({1536, 576, 16})->Args({1536, 576, 24});

void BM_rms_norm(benchmark::State& st) {
  const int64_t n = st.range(0);
  const auto x = rand_f32(n, 1);
  const auto w = rand_f32(n, 2);
  std::vector<float> y(static_cast<size_t>(n));
  for (auto _ : st) {
    cpu::rms_norm(x.data(), w.data(), y.data(), n, 1e-5f);
    benchmark::ClobberMemory();
  }
  st.SetItemsProcessed(int64_t(st.iterations()) * n);
}
BENCHMARK(BM_rms_norm)->Arg(576);

// Includes re-copying g each iteration (silu_mul works in place, and applying
// it repeatedly would drive g into denormals).
void BM_silu_mul(benchmark::State& st) {
  const int64_t n = st.range(0);
  const auto g0 = rand_f32(n, 1);
  const auto u = rand_f32(n, 2);
  std::vector<float> g(static_cast<size_t>(n));
  for (auto _ : st) {
    std::copy(g0.begin(), g0.end(), g.begin());
    cpu::silu_mul(g.data(), u.data(), n);
    benchmark::ClobberMemory();
  }
  st.SetItemsProcessed(int64_t(st.iterations()) * n);
}
BENCHMARK(BM_silu_mul)->Arg(1536);

void BM_f32_to_bf16_row(benchmark::State& st) {
  const int64_t n = st.range(0);
  const auto x = rand_f32(n, 1);
  std::vector<uint16_t> y(static_cast<size_t>(n));
  for (auto _ : st) {
    cpu::f32_to_bf16_row(x.data(), y.data(), n);
    benchmark::ClobberMemory();
  }
  st.SetItemsProcessed(int64_t(st.iterations()) * n);
}
BENCHMARK(BM_f32_to_bf16_row)->Arg(4096);

// Cost of one empty dispatch (parallel_for) on a 2-thread pool.
void BM_pool_dispatch(benchmark::State& st) {
  lr::ThreadPool pool(int(st.range(0)));
  std::vector<int64_t> sink(64);
  for (auto _ : st) {
    pool.parallel_for(2, [&](int64_t b, int64_t) { sink[size_t(b) * 8] += 1; });
  }
  benchmark::DoNotOptimize(sink.data());
}
BENCHMARK(BM_pool_dispatch)->Arg(1)->Arg(2)->UseRealTime();

}  // namespace

namespace {

// Block-format matvec and matmul (weights as GGUF stores them, random bits
// with small f16 scales) at the default model's and Qwen2.5-Coder's shapes;
// bytes/s of weight blocks. Arg 0: the ggml type id.
std::vector<uint8_t> random_blocks(lr::DType t, int64_t rows, int64_t cols) {
  const uint64_t rb = *lr::row_bytes(t, uint64_t(cols));
  std::vector<uint8_t> b(rb * uint64_t(rows));
  std::mt19937 rng(3);
  for (auto& v : b) v = uint8_t(rng() & 0x3b);  // keeps every f16 field small and finite
  return b;
}
void BM_matvec_blocks(benchmark::State& st) {
  const auto t = lr::DType(st.range(0));
  const int64_t rows = st.range(1), cols = st.range(2);
  const auto w = random_blocks(t, rows, cols);
  const auto x = rand_f32(cols, 8);
  std::vector<float> y(static_cast<size_t>(rows));
  const uint64_t rb = *lr::row_bytes(t, uint64_t(cols));
  for (auto _ : st) {
    lr::cpu::matvec_blocks(t, w.data(), rb, x.data(), y.data(), cols, 0, rows);
    benchmark::DoNotOptimize(y.data());
  }
  st.SetBytesProcessed(int64_t(st.iterations() * w.size()));
  st.SetLabel(std::string(lr::dtype_name(t)));
}
BENCHMARK(BM_matvec_blocks)
    ->Args({3, 1536, 576})->Args({3, 576, 1536})->Args({12, 896, 4864})->Args({14, 896, 4864})
    ->Args({6, 4864, 896})->Args({12, 8960, 1536})->Args({14, 1536, 8960})
    ->Args({10, 8960, 1536})->Args({11, 8960, 1536})->Args({13, 8960, 1536});  // Q2_K, Q3_K (the 1.5B frontier's)
// The same from DRAM: rotating over 512 MiB of copies, on 1 or 2 threads
// (arg 3), as a decode step streams a layer's weights.
void BM_matvec_blocks_cold(benchmark::State& st) {
  const auto t = lr::DType(st.range(0));
  const int64_t rows = st.range(1), cols = st.range(2), nth = st.range(3);
  const auto one = random_blocks(t, rows, cols);
  const int64_t copies = (int64_t(512) << 20) / int64_t(one.size());
  std::vector<uint8_t> w(one.size() * size_t(copies));
  for (int64_t k = 0; k < copies; ++k) std::copy(one.begin(), one.end(), w.begin() + k * int64_t(one.size()));
  const auto x = rand_f32(cols, 8);
  std::vector<float> y(static_cast<size_t>(rows));
  const uint64_t rb = *lr::row_bytes(t, uint64_t(cols));
  lr::ThreadPool pool{int(nth)};
  int64_t k = 0;
  for (auto _ : st) {
    const uint8_t* W = w.data() + k * int64_t(one.size());
    pool.parallel_for(rows / 8, [&](int64_t b, int64_t e) {
      lr::cpu::matvec_blocks(t, W, rb, x.data(), y.data(), cols, b * 8, e == rows / 8 ? rows : e * 8);
    });
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
    k = (k + 1) % copies;
  }
  st.SetBytesProcessed(int64_t(st.iterations() * one.size()));
  st.SetLabel(std::string(lr::dtype_name(t)));
}
BENCHMARK(BM_matvec_blocks_cold)
    ->Args({6, 4864, 896, 1})->Args({6, 4864, 896, 2})->Args({12, 896, 4864, 1})->Args({12, 896, 4864, 2})
    ->Args({14, 896, 4864, 1})->Args({14, 896, 4864, 2})->Args({6, 896, 4864, 2})->Args({14, 1536, 8960, 2})
    ->Args({12, 8960, 1536, 2})
    ->Args({10, 8960, 1536, 2})->Args({11, 8960, 1536, 2})->Args({13, 8960, 1536, 2})
    ->UseRealTime();
// Block-format rows (Q4_0 .. Q5_1 and the K-quants) repacked into panels of 16 (backend/cpu/panels.h), in
// cache on one thread and from DRAM (arg 3 = 1; arg 2 threads) as
// BM_matvec_blocks(_cold); bytes are the file's bytes, so the rates compare
// with those benchmarks'.
void BM_matvec_panels(benchmark::State& st) {
  const auto t = lr::DType(st.range(0));
  const int64_t rows = st.range(1), cols = st.range(2), nth = st.range(3);
  const bool cold = st.range(4) == 1;
  const auto one = random_blocks(t, rows, cols);
  const uint64_t rb = *lr::row_bytes(t, uint64_t(cols));
  const auto P1 = lr::cpu::repack_panels(t, one.data(), rb, rows, cols);
  const uint64_t pb = lr::cpu::panel_bytes(t, rows, cols);
  const int64_t copies = cold ? (int64_t(512) << 20) / int64_t(pb) : 1;
  std::vector<uint8_t> P(pb * uint64_t(copies));
  for (int64_t k = 0; k < copies; ++k) std::memcpy(P.data() + uint64_t(k) * pb, P1.get(), pb);
  const auto x = rand_f32(cols, 8);
  std::vector<float> y(static_cast<size_t>(rows));
  lr::ThreadPool pool{int(nth)};
  int64_t k = 0;
  for (auto _ : st) {
    const uint8_t* W = P.data() + uint64_t(k) * pb;
    pool.parallel_for(rows / 16, [&](int64_t b, int64_t e) {
      lr::cpu::matvec_panels_n(t, W, x.data(), cols, y.data(), rows, 1, cols, b * 16, e * 16);
    });
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
    k = (k + 1) % copies;
  }
  st.SetBytesProcessed(int64_t(st.iterations() * one.size()));
  st.SetLabel(std::string(lr::dtype_name(t)));
}
BENCHMARK(BM_matvec_panels)
    ->Args({12, 8960, 1536, 1, 0})->Args({14, 1536, 8960, 1, 0})->Args({12, 8960, 1536, 2, 1})
    ->Args({14, 1536, 8960, 2, 1})->Args({14, 896, 4864, 2, 1})->Args({10, 8960, 1536, 1, 0})
    ->Args({11, 8960, 1536, 1, 0})->Args({10, 8960, 1536, 2, 1})->Args({11, 8960, 1536, 2, 1})
    ->Args({6, 4864, 896, 1, 0})->Args({6, 4864, 896, 2, 1})->Args({6, 896, 4864, 2, 1})->Args({3, 1536, 576, 1, 0})
    ->Args({13, 8960, 1536, 1, 0})->Args({13, 8960, 1536, 2, 1})
    ->UseRealTime();
// The ceiling the integer kernels above are measured against: one core's
// 512-bit vpdpbusd rate (12 independent accumulators, no loads), in
// multiply-adds/s.
LR_BEGIN_AVX512VNNI
int32_t vnni_chain(int64_t reps) {
  __m512i a[12], u = _mm512_set1_epi8(1);
  for (auto& v : a) v = _mm512_setzero_si512();
  for (int64_t n = 0; n < reps; ++n) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) a[i] = _mm512_dpbusd_epi32(a[i], u, u);
    asm volatile("" : "+v"(u));
  }
  __m512i r = a[0];
  for (int i = 1; i < 12; ++i) r = _mm512_add_epi32(r, a[i]);
  alignas(64) int32_t lanes[16];
  _mm512_store_si512(lanes, r);
  return lanes[0];
}
LR_END_AVX512VNNI
void BM_vnni_peak(benchmark::State& st) {
  if (!lr::cpu_supports(lr::Isa::Avx512Vnni)) return st.SkipWithError("no AVX-512 VNNI");
  constexpr int64_t kReps = 1 << 16;
  for (auto _ : st) benchmark::DoNotOptimize(vnni_chain(kReps));
  st.SetItemsProcessed(int64_t(st.iterations()) * kReps * 12 * 64);
}
BENCHMARK(BM_vnni_peak);
// A batch step's decode products from panels: n inputs (arg 3) against rows in
// cache on one thread (multiply-adds/s, as BM_matvec_blocks_n).
void BM_matvec_panels_n(benchmark::State& st) {
  const auto t = lr::DType(st.range(0));
  const int64_t rows = st.range(1), cols = st.range(2), n = st.range(3);
  const auto w = random_blocks(t, rows, cols);
  const auto P = lr::cpu::repack_panels(t, w.data(), *lr::row_bytes(t, uint64_t(cols)), rows, cols);
  const auto X = rand_f32(n * cols, 8);
  std::vector<float> Y(static_cast<size_t>(n * rows));
  for (auto _ : st) {
    lr::cpu::matvec_panels_n(t, P.get(), X.data(), cols, Y.data(), rows, n, cols, 0, rows);
    benchmark::DoNotOptimize(Y.data());
  }
  st.SetItemsProcessed(int64_t(st.iterations()) * n * rows * cols);
  st.SetLabel(std::string(lr::dtype_name(t)));
}
BENCHMARK(BM_matvec_panels_n)
    ->ArgsProduct({{12}, {1536}, {1536}, {1, 4, 8}})
    ->ArgsProduct({{14}, {1536}, {8960}, {1, 4, 8}})
    ->ArgsProduct({{6}, {896}, {896}, {1, 4, 8}})
    ->Unit(benchmark::kMicrosecond);
// Arg 3: the kernel (0: decoded to f32 then f32 tiles; 1: 8-bit integers,
// AVX-512 VNNI only); arg 4: tokens.
void BM_matmul_blocks(benchmark::State& st) {
  const auto t = lr::DType(st.range(0));
  const int64_t rows = st.range(1), cols = st.range(2), n = st.range(4);
  const bool int8 = st.range(3) == 1;
  if (int8 && !lr::cpu_supports(lr::Isa::Avx512Vnni)) return st.SkipWithError("no AVX-512 VNNI");
  const auto w = random_blocks(t, rows, cols);
  const auto X = rand_f32(n * cols, 8);
  std::vector<float> Y(static_cast<size_t>(n * rows));
  const uint64_t rb = *lr::row_bytes(t, uint64_t(cols));
  for (auto _ : st) {
    if (int8)
      lr::cpu::matmul_blocks_int8(t, w.data(), rb, X.data(), Y.data(), n, cols, cols, rows, 0, rows);
    else
      lr::cpu::matmul_blocks_f32(t, w.data(), rb, X.data(), Y.data(), n, cols, cols, rows, 0, rows);
    benchmark::DoNotOptimize(Y.data());
  }
  st.SetItemsProcessed(int64_t(st.iterations()) * n * rows * cols);  // multiply-adds
  st.SetLabel(std::string(lr::dtype_name(t)) + (int8 ? " int8" : " f32"));
}
BENCHMARK(BM_matmul_blocks)
    ->ArgsProduct({{3}, {1536}, {576}, {0, 1}, {512}})
    ->ArgsProduct({{6}, {4864}, {896}, {0, 1}, {8, 512}})
    ->ArgsProduct({{12}, {896}, {4864}, {0, 1}, {512}})
    ->ArgsProduct({{12}, {8960}, {1536}, {0, 1}, {8, 512}})
    ->ArgsProduct({{14}, {1536}, {8960}, {0, 1}, {8, 64, 512}})
    ->Unit(benchmark::kMillisecond);
// The server's batch steps: n inputs (arg 3) each as the decode kernel
// computes it, the rows unpacked once for a few inputs (multiply-adds/s, as BM_matmul_blocks).
void BM_matvec_blocks_n(benchmark::State& st) {
  const auto t = lr::DType(st.range(0));
  const int64_t rows = st.range(1), cols = st.range(2), n = st.range(3);
  const auto w = random_blocks(t, rows, cols);
  const auto X = rand_f32(n * cols, 8);
  std::vector<float> Y(static_cast<size_t>(n * rows));
  const uint64_t rb = *lr::row_bytes(t, uint64_t(cols));
  for (auto _ : st) {
    lr::cpu::matvec_blocks_n(t, w.data(), rb, X.data(), cols, Y.data(), rows, n, cols, 0, rows);
    benchmark::DoNotOptimize(Y.data());
  }
  st.SetItemsProcessed(int64_t(st.iterations()) * n * rows * cols);
  st.SetLabel(std::string(lr::dtype_name(t)));
}
BENCHMARK(BM_matvec_blocks_n)
    ->Args({3, 1536, 576, 1})->Args({3, 1536, 576, 8})->Args({3, 1536, 576, 64})
    ->Args({6, 4864, 896, 1})->Args({6, 4864, 896, 6})->Args({6, 4864, 896, 8})
    ->Args({12, 8960, 1536, 1})->Args({12, 8960, 1536, 6})->Args({12, 8960, 1536, 8})->Args({12, 8960, 1536, 64})
    ->Args({14, 1536, 8960, 8})->Args({14, 1536, 8960, 64})
    ->Unit(benchmark::kMillisecond);

}  // namespace
