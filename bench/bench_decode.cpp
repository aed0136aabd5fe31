// Decode-step micro-benchmarks at the SmolLM2-135M shapes (head_dim 64, GQA
// 9 query / 3 KV heads, kv_dim 192).
//
//   attend_partial   one KV head's group of 3 query heads over n cached
//                    positions; bytes/s of K and V read (n * 2 * 64 * 4).
//   prompt_attention 64 prompt rows at depth n of the 0.5B's group (7 query
//                    heads of 64 per KV head, keys head-major): row by row
//                    (/0), in attend_causal's tiles (/1) and over f16 rows (/2,
//                    the default cache's); FLOP/s of
//                    q.k and p.v (4 * rows * heads * keys * 64).
//   lowrank_matvec   y = U (V x) for the keep-0.5 ranks of the default model
//                    (attn_q: rank 144 of 576x576, ffn_gate: rank 209 of
//                    1536x576), f16 factors; bytes/s of both factors.
//   pool_barrier     one spin barrier crossing of a 2-thread pool.
#include <benchmark/benchmark.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/kernels/attention_kernels.h"
#include "backend/cpu/kernels/kernels.h"
#include "core/half.h"
#include "core/thread_pool.h"

namespace {

namespace cpu = lr::cpu;

std::vector<float> randn(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

void BM_attend_partial(benchmark::State& st) {
  const int64_t n = st.range(0), d = 64, g = 3, stride = 192;
  const auto K = randn(size_t(n * stride), 1), V = randn(size_t(n * stride), 2);
  const auto q = randn(size_t(g * d), 3);
  std::vector<float> m(g), l(g), acc(size_t(g * d));
  for (auto _ : st) {
    cpu::attend_partial(q.data(), int(g), int(d), K.data(), V.data(), stride, 0, n, 0.125f, m.data(),
                        l.data(), acc.data());
    benchmark::DoNotOptimize(acc.data());
  }
  st.SetBytesProcessed(int64_t(st.iterations()) * n * 2 * d * int64_t(sizeof(float)));
}
BENCHMARK(BM_attend_partial)->Arg(512)->Arg(2048)->Arg(8192);

void BM_prompt_attention(benchmark::State& st) {
  const int64_t n0 = st.range(0), d = 64, g = 7;
  const int rows = 64;
  const bool tiled = st.range(1) != 0, f16 = st.range(1) == 2;
  const int64_t keys = n0 + rows;
  const auto K = randn(size_t(keys * d), 1), V = randn(size_t(keys * d), 2);
  std::vector<uint16_t> Kh(K.size()), Vh(V.size());  // the default cache's rows
  lr::f32_to_f16_row(K.data(), Kh.data(), int64_t(K.size()));
  lr::f32_to_f16_row(V.data(), Vh.data(), int64_t(V.size()));
  const auto q = randn(size_t(rows * g * d), 3);
  std::vector<float> m(size_t(rows * g)), l(m), acc(size_t(rows * g * d));
  for (auto _ : st) {
    if (f16) {
      cpu::attend_causal(q.data(), g * d, rows, n0 + 1, int(g), int(d), Kh.data(), Vh.data(), d,
                         0.125f, m.data(), l.data(), acc.data(), g);
    } else if (tiled) {
      cpu::attend_causal(q.data(), g * d, rows, n0 + 1, int(g), int(d), K.data(), V.data(), d,
                         0.125f, m.data(), l.data(), acc.data(), g);
    } else {
      for (int t = 0; t < rows; ++t)
        cpu::attend_partial(q.data() + t * g * d, int(g), int(d), K.data(), V.data(), d, 0,
                            n0 + 1 + t, 0.125f, &m[size_t(t * g)], &l[size_t(t * g)],
                            &acc[size_t(t * g * d)]);
    }
    benchmark::DoNotOptimize(acc.data());
  }
  const double flops = 4.0 * rows * g * double(n0 + rows / 2) * d;
  st.counters["FLOP/s"] =
      benchmark::Counter(flops * double(st.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_prompt_attention)->ArgsProduct({{512, 4096, 8192}, {0, 1, 2}});

void BM_lowrank_matvec_f16(benchmark::State& st) {
  const int64_t out = st.range(0), in = st.range(1), r = st.range(2);
  std::vector<uint16_t> V(size_t(r * in)), U(size_t(out * r));
  auto f = randn(V.size() + U.size(), 4);
  for (size_t i = 0; i < V.size(); ++i) V[i] = lr::f32_to_f16(f[i] * 0.05f);
  for (size_t i = 0; i < U.size(); ++i) U[i] = lr::f32_to_f16(f[V.size() + i] * 0.05f);
  const auto x = randn(size_t(in), 5);
  std::vector<float> p(static_cast<size_t>(r)), y(static_cast<size_t>(out));
  for (auto _ : st) {
    cpu::matvec_f16(V.data(), x.data(), p.data(), in, 0, r);
    cpu::matvec_f16(U.data(), p.data(), y.data(), r, 0, out);
    benchmark::DoNotOptimize(y.data());
  }
  st.SetBytesProcessed(int64_t(st.iterations()) * int64_t(V.size() + U.size()) * 2);
}
BENCHMARK(BM_lowrank_matvec_f16)->Args({576, 576, 144})->Args({1536, 576, 209})->Args({576, 1536, 209});

void BM_pool_barrier(benchmark::State& st) {
  lr::ThreadPool pool(2);
  const int kCrossings = 1000;
  for (auto _ : st) {
    pool.run([&](int, int) {
      for (int i = 0; i < kCrossings; ++i) pool.barrier();
    });
  }
  st.SetItemsProcessed(int64_t(st.iterations()) * kCrossings);
}
BENCHMARK(BM_pool_barrier)->UseRealTime();

// One dispatch to workers that sleep between dispatches (an eager
// framework's op-by-op launch) against spinning workers.
void BM_pool_dispatch_sleeping(benchmark::State& st) {
  lr::ThreadPool pool(2);
  pool.set_spin(st.range(0) != 0);
  for (auto _ : st) pool.run([](int, int) {});
}
BENCHMARK(BM_pool_dispatch_sleeping)->Arg(0)->Arg(1)->UseRealTime();

}  // namespace

namespace {

// Q8_0 matvec (int8 weights and activations) at the default model's shapes;
// bytes/s of weights and scales.
void BM_matvec_q8_0(benchmark::State& st) {
  const int64_t rows = st.range(0), cols = st.range(1), nb = (cols + 31) / 32;
  auto w = randn(size_t(rows * cols), 7);
  std::vector<int8_t> q(size_t(rows * cols));
  std::vector<float> sf(size_t(rows * nb));
  for (int64_t r = 0; r < rows; ++r)
    cpu::quantize_q8_row(&w[size_t(r * cols)], &q[size_t(r * cols)], &sf[size_t(r * nb)], cols);
  std::vector<uint16_t> s;  // the weights' scales are f16 (model/weights.h)
  for (float v : sf) s.push_back(lr::f32_to_f16(v));
  const auto x = randn(size_t(cols), 8);
  std::vector<float> y(static_cast<size_t>(rows));
  for (auto _ : st) {
    cpu::matvec_q8_0(q.data(), s.data(), x.data(), y.data(), cols, 0, rows);
    benchmark::DoNotOptimize(y.data());
  }
  st.SetBytesProcessed(int64_t(st.iterations()) * (rows * cols + rows * nb * 2));
}
BENCHMARK(BM_matvec_q8_0)->Args({1536, 209})->Args({209, 1536})->Args({49152, 576})
    ->Args({8960, 96})->Args({96, 8960})->Args({1536, 64});  // a residual correction's U and V (the 1.5B)

}  // namespace

// Prefill products of the keep-0.5 factors against OpenBLAS: Y = X W^T for
// W [rows, cols], X [512, cols] (f32 OpenBLAS sgemm on one thread, against
// the own f16 kernel on one thread; FLOP/s = 2 * n * rows * cols).
#include <cblas.h>

namespace {

void BM_prefill_sgemm_openblas(benchmark::State& st) {
  const int64_t rows = st.range(0), cols = st.range(1), n = 512;
  openblas_set_num_threads(1);
  const auto W = randn(size_t(rows * cols), 9), X = randn(size_t(n * cols), 10);
  std::vector<float> Y(static_cast<size_t>(n * rows));
  for (auto _ : st) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(n), int(rows), int(cols), 1.f, X.data(),
                int(cols), W.data(), int(cols), 0.f, Y.data(), int(rows));
    benchmark::DoNotOptimize(Y.data());
  }
  st.counters["FLOP/s"] = benchmark::Counter(double(2 * n * rows * cols), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_prefill_sgemm_openblas)->Args({1536, 209})->Args({209, 576})->Args({576, 576})->Unit(benchmark::kMillisecond);

void BM_prefill_matmul_f16(benchmark::State& st) {
  const int64_t rows = st.range(0), cols = st.range(1), n = 512;
  const auto w = randn(size_t(rows * cols), 9), X = randn(size_t(n * cols), 10);
  std::vector<uint16_t> W(w.size());
  for (size_t i = 0; i < w.size(); ++i) W[i] = lr::f32_to_f16(w[i]);
  std::vector<float> Y(static_cast<size_t>(n * rows));
  for (auto _ : st) {
    cpu::matmul_f16(W.data(), X.data(), Y.data(), n, cols, cols, rows, 0, rows);
    benchmark::DoNotOptimize(Y.data());
  }
  st.counters["FLOP/s"] = benchmark::Counter(double(2 * n * rows * cols), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_prefill_matmul_f16)->Args({1536, 209})->Args({209, 576})->Args({576, 576})->Unit(benchmark::kMillisecond);

}  // namespace

namespace {

// attend_partial over a cache much larger than L3 (30 layers x 3 KV heads at
// 2048 positions, f32): rows of one KV head strided by the whole kv_dim (192,
// position-major cache) or contiguous (64, head-major cache).
void BM_attend_cold(benchmark::State& st) {
  const int64_t stride = st.range(0), n = 2048, d = 64, units = 90;
  const int64_t unit_floats = stride == 64 ? n * 64 : n * 192;  // one unit's K (or V) region
  const auto q = randn(size_t(3 * d), 3);
  std::vector<float> K(size_t(units) * size_t(unit_floats) / (stride == 64 ? 1 : 3) + size_t(n * 192)),
      V(K.size());
  for (size_t i = 0; i < K.size(); i += 16) K[i] = V[i] = 0.01f * float(i % 7);
  std::vector<float> m(3), l(3), acc(size_t(3 * d));
  int64_t u = 0;
  for (auto _ : st) {
    // Position-major: unit u is KV head u % 3 of layer u / 3; head-major: a block of its own.
    const int64_t off = stride == 64 ? u * n * 64 : (u / 3) * n * 192 + (u % 3) * 64;
    cpu::attend_partial(q.data(), 3, int(d), K.data() + off, V.data() + off, stride, 0, n, 0.125f,
                        m.data(), l.data(), acc.data());
    benchmark::DoNotOptimize(acc.data());
    u = (u + 1) % units;
  }
  st.SetBytesProcessed(int64_t(st.iterations()) * n * 2 * d * int64_t(sizeof(float)));
}
BENCHMARK(BM_attend_cold)->Arg(192)->Arg(64);

}  // namespace
