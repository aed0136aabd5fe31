// The prompt products from panels (matmul_panels) with the AMX-INT8 tiles
// (arg 4 = 1) and without (0: the VNNI panel kernel up to 128 tokens, the
// VNNI prompt kernel above), one thread, rows in cache: multiply-adds/s.
// Args: ggml type id, rows, cols, tokens, AMX. Shapes: Qwen2.5-Coder-0.5B's
// (hidden 896, ffn 4864: Q5_0 gate/up, Q4_K and Q6_K down).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/kernels/kernels.h"
#include "backend/cpu/kernels/kernels_amx.h"
#include "backend/cpu/kernels/panels.h"
#include "core/cpu_features.h"
#include "core/dtype.h"

namespace {

void BM_matmul_panels_amx(benchmark::State& st) {
  const auto t = lr::DType(st.range(0));
  const int64_t rows = st.range(1), cols = st.range(2), n = st.range(3);
  const bool amx = st.range(4) == 1;
  if (!lr::cpu_supports(lr::Isa::Avx512Vnni)) return st.SkipWithError("no AVX-512 VNNI");
  lr::cpu::detail::set_amx_prompts(amx);
  if (amx && !lr::cpu::detail::amx_prompts_ready()) return st.SkipWithError("no usable AMX-INT8");
  const uint64_t rb = *lr::row_bytes(t, uint64_t(cols));
  std::vector<uint8_t> w(rb * uint64_t(rows));
  std::mt19937 rng(3);
  for (auto& v : w) v = uint8_t(rng() & 0x3b);  // every f16 field small and finite
  const auto P = lr::cpu::repack_panels(t, w.data(), rb, rows, cols);
  std::vector<float> X(static_cast<size_t>(n * cols));
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  for (auto& v : X) v = d(rng);
  std::vector<float> Y(static_cast<size_t>(n * rows));
  for (auto _ : st) {
    lr::cpu::matmul_panels(t, P.get(), X.data(), Y.data(), n, cols, cols, rows, 0, rows,
                           lr::cpu::MatmulPath::Tiles);
    benchmark::DoNotOptimize(Y.data());
  }
  lr::cpu::detail::set_amx_prompts(true);
  st.SetItemsProcessed(int64_t(st.iterations()) * n * rows * cols);
  st.SetLabel(std::string(lr::dtype_name(t)) + (amx ? " amx" : " vnni"));
}
BENCHMARK(BM_matmul_panels_amx)
    ->ArgsProduct({{6}, {4864}, {896}, {16, 64, 128, 512}, {0, 1}})
    ->ArgsProduct({{12, 14}, {896}, {4864}, {16, 64, 128, 512}, {0, 1}})
    ->ArgsProduct({{2, 3, 7, 13}, {896}, {1024}, {512}, {0, 1}})
    ->Unit(benchmark::kMillisecond);

}  // namespace
