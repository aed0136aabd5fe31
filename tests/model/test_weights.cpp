// The weight table's visitors and the one memory estimate: what the loader
// allocates, what the CUDA layout pads, the tensors a visitor walks.
#include <gtest/gtest.h>

#include <set>

#include "backend/cuda/plan.h"
#include "compress/synth_model.h"
#include "model_test_util.h"
#include "runtime/model.h"

namespace lr {
namespace {

std::string synth(const test::TempDir& t, double keep, const std::string& shape) {
  return test::write_synth(t, keep, shape);
}

TEST(Weights, EstimateIsWhatTheLoaderAllocates) {
  test::TempDir t;
  for (double keep : {1.0, 0.5})
    for (DType wt : {DType::F32, DType::F16, DType::BF16, DType::Q8_0}) {
      SCOPED_TRACE(fmt::format("keep {} {}", keep, dtype_name(wt)));
      Model m = load_model(synth(t, keep, "tiny"), wt);
      const Weights& w = *m.weights;
      EXPECT_EQ(estimate_bytes(matrix_shapes(w), wt), w.bytes());
      // A dense model's estimate from its config alone is the same.
      if (keep == 1.0) {
        EXPECT_EQ(estimate_bytes(matrix_shapes(w.cfg), wt), w.bytes());
      }
    }
  // Tied embeddings: the output head is not a second matrix.
  Model tied = load_model(synth(t, 1.0, "smollm2-135m"), DType::BF16);
  ASSERT_TRUE(tied.weights->cfg.tied_output);
  const Config& c = tied.weights->cfg;
  EXPECT_EQ(matrix_shapes(c).size(),
            size_t(2 + 9 * c.n_layers));  // embedding, out_norm, 9 per layer
  EXPECT_EQ(estimate_bytes(matrix_shapes(c), DType::BF16), tied.weights->bytes());
  // By hand for Q8_0: a [3, 40] matrix is 120 int8 values and 3 x 2 f16 scales;
  // padded to 8-element rows (the GPU's layout) as bf16: 3 x 48 x 2.
  EXPECT_EQ(matrix_bytes(DType::Q8_0, 3, 40), 120u + 12u);
  EXPECT_EQ(matrix_bytes(DType::BF16, 3, 40, 8), 3u * 40 * 2);
  EXPECT_EQ(matrix_bytes(DType::BF16, 3, 41, 8), 3u * 48 * 2);
  // The CUDA memory plan's weights are this estimate at its row padding.
  Model lr = load_model(synth(t, 0.5, "tiny"), DType::BF16);
  const Plan p = cuda::plan_forward(*lr.weights, {});
  EXPECT_EQ(cuda::plan_memory(*lr.weights, p, {}, 64, 16).weights,
            estimate_bytes(matrix_shapes(*lr.weights), DType::BF16, cuda::kRowPad));
}

TEST(Weights, VisitorsWalkTheTableLayerByLayer) {
  test::TempDir t;
  Model m = load_model(synth(t, 0.5, "tiny"), DType::F32);
  const Weights& w = *m.weights;
  std::vector<std::string> seen;
  for_each_tensor(w.cfg, [&](const WeightSpec& spec, int l) {
    seen.push_back(spec.per_layer ? fmt::format(fmt::runtime(spec.gguf), l) : spec.gguf);
  });
  ASSERT_EQ(seen.size(), size_t(3 + 9 * w.cfg.n_layers));
  EXPECT_EQ(seen[0], "token_embd.weight");
  EXPECT_EQ(seen[3], "blk.0.attn_norm.weight");
  EXPECT_EQ(seen[4], "blk.0.attn_q.weight");
  EXPECT_EQ(seen[12], "blk.1.attn_norm.weight");
  int linear = 0, low_rank = 0;
  for_each_linear(w, [&](const WeightSpec& spec, int, const Linear& lin) {
    EXPECT_TRUE(spec.is_linear());
    ++linear;
    low_rank += lin.low_rank();
  });
  EXPECT_EQ(linear, 1 + 7 * w.cfg.n_layers);  // the head (dense in synth) and 7 maps per layer
  EXPECT_EQ(low_rank, 7 * w.cfg.n_layers);
  std::set<const uint8_t*> distinct;
  for_each_matrix(w, [&](const WeightSpec&, const Matrix& mat) {
    EXPECT_TRUE(distinct.insert(mat.ptr()).second);
  });
  EXPECT_EQ(distinct.size(), 3 + size_t(w.cfg.n_layers) * (2 + 7 * 2));
}

}  // namespace
}  // namespace lr
