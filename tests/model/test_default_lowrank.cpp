// The default model compressed at keep 0.6 (plain SVD, f32 factors): every
// combination of the decode switches against the scalar reference, with f32
// weights (same greedy tokens, logits within 1e-4 of the largest) and bf16
// weights (logits within 3%). Skipped when the model is not cached
// (scripts/fetch-model.sh).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "model/load.h"
#include "compress/compress_model.h"
#include "runtime/model.h"
#include "runtime/session.h"
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
  Model bf16 = load_model(t.file("keep0.6.gguf"), DType::BF16);
  const int vocab = f32.weights->cfg.vocab, kSteps = 16;
  std::vector<int32_t> prompt = f32.tokenizer->encode("The capital of France is", true);

  // Reference: greedy tokens and the logits of every step.
  std::vector<int32_t> want;
  std::vector<std::vector<float>> ref_logits;
  {
    auto ref = make_session(f32, ExecPath::Reference, test::backend_options(128, 1));
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

  // Every combination of the switches (the bench modes are among them).
  std::vector<ExecOptions> combos;
  for (KvMode kv : {KvMode::Static, KvMode::Dense, KvMode::Legacy})
    for (bool packed : {false, true})
      for (bool fused : {false, true})
        for (ExecUnit u : {ExecUnit::PerOp, ExecUnit::PerLayer, ExecUnit::PerToken})
          combos.push_back({kv, packed, fused, u});
  double worst_bf16 = 0;
  std::vector<std::vector<float>> first_bf16;  // bf16 logits of combos[0], per step
  for (const ExecOptions& e : combos) {
    for (const Model* m : {&f32, &bf16}) {
      SCOPED_TRACE(fmt::format("kv={} packed={} fused={} unit={} {}", int(e.kv), e.packed, e.fused,
                               int(e.unit), m == &f32 ? "f32" : "bf16"));
      BackendOptions bo;
      bo.ctx = 128;
      bo.cpu.n_threads = 2;
      bo.exec = e;
      auto b = make_session(*m, ExecPath::Fast, bo);
      std::vector<float> l(static_cast<size_t>(vocab));
      b->forward(prompt.data(), int(prompt.size()), l.data(), false);
      std::vector<int32_t> got;
      double diff = 0, diff_first = 0;
      for (int s = 0; s < kSteps; ++s) {
        for (int i = 0; i < vocab; ++i) {
          diff = std::max(diff, double(std::fabs(l[size_t(i)] - ref_logits[size_t(s)][size_t(i)])));
          if (m == &bf16 && &e != &combos[0])
            diff_first = std::max(diff_first, double(std::fabs(l[size_t(i)] - first_bf16[size_t(s)][size_t(i)])));
        }
        if (m == &bf16 && first_bf16.size() < size_t(kSteps) && &e == &combos[0]) first_bf16.push_back(l);
        got.push_back(argmax(l));
        b->forward(&want[size_t(s)], 1, l.data(), false);  // teacher-forced on the reference tokens
      }
      if (m == &f32) {
        // f32 factors on both paths: only summation order differs.
        EXPECT_EQ(got, want);
        EXPECT_LT(diff, 1e-4 * max_logit);
      } else {
        // bf16 factors: within 5% of the largest logit of the f32 reference
        // (the rounding of the weights, the same in every mode), and within
        // 1e-3 of it from the first configuration's bf16 logits (the modes
        // themselves add only summation-order differences).
        EXPECT_LT(diff, 0.05 * max_logit);
        EXPECT_LT(diff_first, 1e-3 * max_logit);
        worst_bf16 = std::max(worst_bf16, diff);
      }
    }
  }
  std::printf("keep 0.6, %zu decode configurations: bf16 max |logit diff| %.4f (max |logit| %.2f)\n",
              combos.size(), worst_bf16, max_logit);
}

}  // namespace
}  // namespace lr
