// Sequential calibration (compress --sequential): on a tiny model, the
// compressed model's outputs on the calibration text are closer to the
// dense model's than one-shot calibration's at the same ranks; its errors.
#include <gtest/gtest.h>

#include "../error_of.h"
#include "backend/backend.h"
#include "backend/cpu/cpu.h"
#include "compress/calibration.h"
#include "compress/compress_model.h"
#include "model/scalar_ops.h"
#include "model_test_util.h"
#include "runtime/model.h"

namespace lr {
namespace {

using test::error_of;
using test::rel_err;
using test::TempDir;

// Logits of every token of the first two calibration windows.
std::vector<float> logits(const std::string& path, const compress::CalibrationText& text) {
  Model m = load_model(path, DType::F32);
  const std::vector<int32_t> toks = compress::calibration_tokens(m, text);
  auto b = make_cpu_backend(m.weights, test::backend_options(text.len, 2));
  const size_t V = size_t(m.weights->cfg.vocab);
  std::vector<float> out(size_t(2 * text.len) * V);
  for (int s = 0; s < 2; ++s) {
    b->rewind(0);
    b->forward(&toks[size_t(s * text.len)], text.len, out.data() + size_t(s * text.len) * V, true);
  }
  return out;
}

// The layer runner, one layer at a time over the embeddings, then the
// output head by hand: the model's logits.
TEST(Sequential, LayerByLayerIsTheWholeModel) {
  TempDir t;
  test::TinySpec s;
  s.tokenizer = true;
  s.n_layers = 3;
  for (bool low_rank : {false, true}) {
    std::string path = test::write_tiny(t, s, "dense.gguf");
    if (low_rank) path = test::write_synth(t, 0.4);
    Model m = load_model(path, DType::F32);
    const Weights& w = *m.weights;
    const int n = 20, dim = w.cfg.dim, V = w.cfg.vocab;
    std::vector<int32_t> toks;
    for (int i = 0; i < n; ++i) toks.push_back((i * 7 + 3) % V);
    auto b = make_cpu_backend(m.weights, test::backend_options(64, 2));
    std::vector<float> want(size_t(n) * size_t(V));
    b->forward(toks.data(), n, want.data(), true);
    std::vector<float> x(size_t(n) * size_t(dim));
    for (int i = 0; i < n; ++i) w.tok_embd.row_to_f32(toks[size_t(i)], &x[size_t(i) * size_t(dim)]);
    for (int l = 0; l < w.cfg.n_layers; ++l) {
      auto one = std::make_shared<Weights>(w);
      one->cfg.n_layers = 1;
      one->layers = {w.layers[size_t(l)]};
      make_cpu_layer_runner(one, test::backend_options(64, 2))->run(x.data(), n);
    }
    std::vector<float> got(size_t(n) * size_t(V)), h(static_cast<size_t>(dim)),
        row(static_cast<size_t>(dim));
    for (int i = 0; i < n; ++i) {
      scalar::rms_norm(&x[size_t(i) * size_t(dim)], w.out_norm.f32(), h.data(), dim, w.cfg.rms_eps);
      for (int v = 0; v < V; ++v) {
        w.output.w.row_to_f32(v, row.data());
        double acc = 0;
        for (int j = 0; j < dim; ++j) acc += double(row[size_t(j)]) * h[size_t(j)];
        got[size_t(i) * size_t(V) + size_t(v)] = float(acc);
      }
    }
    EXPECT_LT(rel_err(got, want), 1e-5) << (low_rank ? "low rank" : "dense");
  }
}

TEST(Sequential, CloserToTheDenseModelThanOneShot) {
  TempDir t;
  test::TinySpec s;
  s.tokenizer = true;
  s.n_layers = 3;
  const std::string dense = test::write_tiny(t, s, "dense.gguf");
  CompressOptions o;
  o.method = CompressMethod::Whiten;
  o.calib_path = test::write_calib(t);
  o.calib_samples = 8;
  o.calib_len = 64;
  o.factor_type = DType::F32;
  const compress::CalibrationText text{o.calib_path, o.calib_samples, o.calib_len, 2};
  const std::vector<float> ref = logits(dense, text);
  for (bool pivoted : {false, true}) {
    o.pivoted = pivoted;
    o.sequential = o.refit = false;
    compress_model(dense, {{0.4, t.file("one.gguf")}}, o);
    o.sequential = true;
    const CompressResult r = compress_model(dense, {{0.4, t.file("seq.gguf")}}, o)[0];
    EXPECT_EQ(r.calib_tokens, 8 * 64);
    o.refit = true;
    compress_model(dense, {{0.4, t.file("refit.gguf")}}, o);
    const double one = rel_err(logits(t.file("one.gguf"), text), ref);
    const double seq = rel_err(logits(t.file("seq.gguf"), text), ref);
    const double refit = rel_err(logits(t.file("refit.gguf"), text), ref);
    EXPECT_LT(seq, one) << (pivoted ? "pivoted" : "plain");
    EXPECT_LT(refit, one) << (pivoted ? "pivoted" : "plain");
    // Same ranks, same bytes: only the factors differ.
    EXPECT_EQ(load_model(t.file("seq.gguf"), std::nullopt).weights->bytes(),
              load_model(t.file("one.gguf"), std::nullopt).weights->bytes());
  }
}

TEST(Sequential, Errors) {
  TempDir t;
  test::TinySpec s;
  s.tokenizer = true;
  const std::string dense = test::write_tiny(t, s, "dense.gguf");
  CompressOptions o;
  o.sequential = true;
  o.calib_path = test::write_calib(t);
  o.calib_samples = 2;
  o.calib_len = 32;
  LR_EXPECT_ERROR_HAS(
      error_of([&] {
        compress_model(dense, {{0.4, t.file("a.gguf")}, {0.6, t.file("b.gguf")}}, o);
      }),
      "sequential calibration (--sequential) compresses one --keep with --method whiten");
  o.method = CompressMethod::Svd;
  LR_EXPECT_ERROR_HAS(error_of([&] {
                        compress_model(dense, {{0.4, t.file("a.gguf")}}, o);
                      }),
                      "sequential calibration (--sequential) compresses one --keep");
  o.method = CompressMethod::Whiten;
  o.calib_samples = 1000;
  LR_EXPECT_ERROR_HAS(error_of([&] {
                        compress_model(dense, {{0.4, t.file("a.gguf")}}, o);
                      }),
                      "fewer than --calib-samples x --calib-len = 1000 x 32");
}

}  // namespace
}  // namespace lr
