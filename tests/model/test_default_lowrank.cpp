// The default model compressed at keep 0.6 (plain SVD, f32 factors): every
// decode mode of the fast path against the scalar reference. Skipped when the
// model is not cached (scripts/fetch-model.sh).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "model/load.h"
#include "runtime/bench.h"
#include "runtime/compress_model.h"
#include "runtime/model.h"
#include "model_test_util.h"

namespace lr {
namespace {

int32_t argmax(const std::vector<float>& v) {
  return int32_t(std::max_element(v.begin(), v.end()) - v.begin());
}

TEST(DefaultModel, LowRankKeep06EveryDecodeModeMatchesReference) {
  if (!std::filesystem::exists(default_model_path()))
    GTEST_SKIP() << "default model not cached (run scripts/fetch-model.sh)";
  test::TempDir t;
  CompressOptions o;
  o.method = CompressMethod::Svd;
  o.factor_type = DType::F32;
  compress_model(default_model_path(), {{0.6, t.file("keep0.6.gguf")}}, o);
  Model f32 = load_model(t.file("keep0.6.gguf"), DType::F32);
  Model f16 = load_model(t.file("keep0.6.gguf"), DType::F16);
  const int vocab = f32.weights->cfg.vocab, kSteps = 16;
  std::vector<int32_t> prompt = f32.tokenizer->encode("The capital of France is", true);

  // Reference: greedy tokens and the logits of every step.
  std::vector<int32_t> want;
  std::vector<std::vector<float>> ref_logits;
  {
    auto ref = make_backend(f32, ExecPath::Reference, {128, 1});
    std::vector<float> l(static_cast<size_t>(vocab));
    ref->forward(prompt.data(), int(prompt.size()), l.data(), false);
    for (int s = 0; s < kSteps; ++s) {
      ref_logits.push_back(l);
      want.push_back(argmax(l));
      ref->forward(&want.back(), 1, l.data(), false);
    }
  }
  double max_logit = 0;
  for (const auto& l : ref_logits)
    for (float v : l) max_logit = std::max(max_logit, double(std::fabs(v)));

  for (const BenchMode& mode : bench_modes()) {
    if (mode.dense_model) continue;
    for (const Model* m : {&f32, &f16}) {
      SCOPED_TRACE(mode.name + (m == &f32 ? " f32" : " f16"));
      BackendOptions bo;
      bo.ctx = 128;
      bo.n_threads = 2;
      bo.exec = mode.exec;
      auto b = make_backend(*m, ExecPath::Fast, bo);
      std::vector<float> l(static_cast<size_t>(vocab));
      b->forward(prompt.data(), int(prompt.size()), l.data(), false);
      std::vector<int32_t> got;
      double diff = 0;
      for (int s = 0; s < kSteps; ++s) {
        for (int i = 0; i < vocab; ++i)
          diff = std::max(diff, double(std::fabs(l[size_t(i)] - ref_logits[size_t(s)][size_t(i)])));
        got.push_back(argmax(l));
        b->forward(&want[size_t(s)], 1, l.data(), false);  // teacher-forced on the reference tokens
      }
      if (m == &f32) {
        // f32 factors on both paths: only summation order differs.
        EXPECT_EQ(got, want);
        EXPECT_LT(diff, 1e-4 * max_logit);
      } else {
        EXPECT_LT(diff, 0.01 * max_logit);  // f16 factors
      }
    }
  }
}

}  // namespace
}  // namespace lr
