// What the CUDA backend's tests share: the GPU-or-emulator fixture, the
// tolerance, and the comparison of a CUDA session with the fast CPU path on
// the same weights (a prompt's logits, then greedy decode steps).
// Tolerance: logits agree within 1e-2 of the logits' scale (bf16 weights on
// both sides; the GPU's f16 KV cache, its fast exp and its summation order
// differ), 2e-3 in the emulator (the same kernels, one summation order).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "../model/model_test_util.h"
#include "backend/cuda/cuda.h"
#include "runtime/model.h"
#include "runtime/session.h"

namespace lr::test {

#ifdef LOWRANK_CUDA_EMU
constexpr double kCudaTol = 2e-3;  // the emulator: no races, its exp as the GPU's less 2 ulp
#else
constexpr double kCudaTol = 1e-2;
#endif

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    bool ok = false;
    const std::string info = cuda_device_info(&ok);
    if (!ok) GTEST_SKIP() << "no GPU, CUDA tests skipped: " << info;
  }
  TempDir t_;
};

// max |a - b| / max |b|
inline double scaled_err(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, s = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d = std::max(d, double(std::abs(a[i] - b[i])));
    s = std::max(s, double(std::abs(b[i])));
  }
  return d / std::max(s, 1e-30);
}

inline int argmax(const float* x, int n) {
  return int(std::max_element(x, x + n) - x);
}

// Prompt (all logits), then `gen` decode steps fed the CPU's greedy tokens,
// in sessions of context `ctx` (0: prompt + gen + 1).
inline void compare_with_cpu(const Model& m, const ExecOptions& e, int prompt, int gen,
                             const std::string& what, int ctx = 0) {
  SCOPED_TRACE(what);
  BackendOptions o;
  o.ctx = ctx > 0 ? ctx : prompt + gen + 1;
  o.cpu.n_threads = 2;
  o.exec = e;
  auto cpu = make_session(m, ExecPath::Fast, o);
  auto gpu = make_session(m, ExecPath::Cuda, o);
  const int V = m.weights->cfg.vocab;
  std::vector<int32_t> toks(static_cast<size_t>(prompt));
  for (int i = 0; i < prompt; ++i) toks[size_t(i)] = 3 + (i * 7919) % (V - 3);
  std::vector<float> a(size_t(prompt) * V), b(a.size());
  cpu->forward(toks.data(), prompt, a.data(), true);
  gpu->forward(toks.data(), prompt, b.data(), true);
  const double prefill_err = scaled_err(b, a);
  double decode_err = 0;
  EXPECT_LT(prefill_err, kCudaTol) << "prefill";
  std::vector<float> la(a.end() - V, a.end()), lb(b.end() - V, b.end());
  for (int s = 0; s < gen; ++s) {
    int32_t next = argmax(la.data(), V);
    // Greedy agrees wherever the CPU's top two are not within the tolerance.
    std::vector<float> sorted = la;
    std::nth_element(sorted.begin(), sorted.begin() + 1, sorted.end(), std::greater<float>());
    if (sorted[0] - sorted[1] > 4 * kCudaTol * std::abs(sorted[0])) {
      EXPECT_EQ(argmax(lb.data(), V), next) << "step " << s;
    }
    cpu->forward(&next, 1, la.data(), false);
    gpu->forward(&next, 1, lb.data(), false);
    decode_err = std::max(decode_err, scaled_err(lb, la));
    EXPECT_LT(scaled_err(lb, la), kCudaTol) << "decode step " << s;
  }
  fmt::print("  {:<48} max scaled error: prefill {:.1e}, decode {:.1e}\n", what, prefill_err,
             decode_err);
}

}  // namespace lr::test
