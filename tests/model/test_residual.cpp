// The residual form W ~ Q(W) + U V (compress --residual): the file it
// writes, the plan that runs it (a quantized product and a correction summed
// into the same output), against the reference forward and the scalar plan
// executors, and the quantized-only model it must equal with no correction.
#include <gtest/gtest.h>

#include <cstring>

#include "../error_of.h"
#include "backend/backend.h"
#include "compress/compress_model.h"
#include "compress/quantize_model.h"
#include "format/gguf.h"
#include "model/plan.h"
#include "model/plan_transforms.h"
#include "model_test_util.h"
#include "runtime/model.h"

namespace lr {
namespace {

using test::error_of;
using test::rel_err;
using test::TempDir;
using test::write_tiny;

const std::vector<int32_t> kToks = {1, 80, 120, 33, 201, 7, 99, 150, 3, 42, 250, 17};

std::vector<float> run(std::shared_ptr<const Weights> w, int how /* 0 fast, 1 scalar cpu, 2 scalar gpu */,
                       bool one_by_one = false) {
  return test::plan_logits(std::move(w), kToks, how, one_by_one);
}

std::vector<float> reference(const std::string& path) { return test::reference_logits(path, kToks); }

std::string residual_file(const TempDir& t, const std::string& dense, DType q, double keep,
                          const std::string& name, int rounds = 1) {
  CompressOptions o;
  o.method = CompressMethod::Svd;
  o.residual = q;
  o.residual_rounds = rounds;
  o.factor_type = DType::F32;
  compress_model(dense, {{keep, t.file(name)}}, o);
  return t.file(name);
}

// `dense` written by `lowrank quantize` to `type` (activation-weighted when
// calib.path is set) as t's file `name`.
std::string quantized_file(const TempDir& t, const std::string& dense, DType type, const std::string& name,
                           const compress::CalibrationText& calib = {}) {
  QuantizeOptions qo;
  qo.calib = calib;
  quantize_model(dense, {{type, t.file(name)}}, qo);
  return t.file(name);
}

// The named tensors (every one of b's when `names` is empty) hold the same
// bytes in both files.
void expect_same_tensors(const std::string& a_path, const std::string& b_path,
                         std::vector<std::string> names = {}) {
  auto a = gguf::File::open(a_path), b = gguf::File::open(b_path);
  if (names.empty())
    for (const gguf::TensorInfo& info : b->tensors()) names.push_back(info.name);
  for (const std::string& name : names) {
    const gguf::TensorInfo& x = a->tensor(name);
    const gguf::TensorInfo& y = b->tensor(name);
    ASSERT_EQ(x.dtype, y.dtype) << name;
    ASSERT_EQ(x.nbytes, y.nbytes) << name;
    EXPECT_EQ(std::memcmp(x.data, y.data, x.nbytes), 0) << name;
  }
}

// A residual file's per-layer maps: their parameters (m n), their
// corrections' (rank (m + n)), and how many have one.
struct CorrectionSize {
  double params = 0, correction = 0;
  int corrected = 0;
};
CorrectionSize correction_size(const std::string& path, DType base) {
  Model m = load_model(path, std::nullopt);
  CorrectionSize c;
  for_each_linear(*m.weights, [&](const WeightSpec& spec, int, const Linear& lin) {
    if (!spec.per_layer) return;
    c.params += double(lin.w.rows) * double(lin.w.cols);
    c.correction += double(lin.rank()) * double(lin.w.rows + lin.w.cols);
    c.corrected += lin.rank() > 0;
    EXPECT_EQ(lin.w.dtype, base);
  });
  return c;
}

TEST(Residual, FileHoldsTheQuantizedWAndTheFactors) {
  TempDir t;
  const std::string dense = write_tiny(t, test::k_quant_spec(), "dense.gguf");
  const std::string res = residual_file(t, dense, DType::Q3_K, 0.1, "res.gguf");
  quantized_file(t, dense, DType::Q3_K, "q3.gguf");
  ASSERT_EQ(gguf::File::open(res)->tensor("blk.0.attn_q.weight").dtype, DType::Q3_K);
  // The same quantizer, bit for bit.
  expect_same_tensors(res, t.file("q3.gguf"), {"blk.0.attn_q.weight", "blk.1.ffn_down.weight"});
  Model m = load_model(res, std::nullopt);
  const Linear& q = m.weights->layers[0].q;
  EXPECT_TRUE(q.residual());
  EXPECT_EQ(q.w.dtype, DType::Q3_K);
  EXPECT_EQ(q.rank(), 12);  // floor(0.1 * 256 * 256 / 512)
}

TEST(Residual, FastAndScalarPlansMatchTheReferenceForward) {
  TempDir t;
  const std::string dense = write_tiny(t, test::k_quant_spec(), "dense.gguf");
  const std::string res = residual_file(t, dense, DType::Q4_K, 0.2, "res.gguf");
  const std::vector<float> ref = reference(res);
  Model m = load_model(res, std::nullopt);
  test::expect_prompt_close([&] { return run(m.weights, 0); }, ref);
  // Decode steps: the block-format kernels take 8-bit inputs (as llama.cpp's
  // do), about 2% here for the quantized product alone.
  EXPECT_LT(rel_err(run(m.weights, 0, true), ref), 5e-2);
  EXPECT_LT(rel_err(run(m.weights, 1), ref), 1e-4);
  EXPECT_LT(rel_err(run(m.weights, 2), ref), 1e-4);
}

// Fused, a map's two steps sum into x: the first accumulates Q(W) h, the
// second adds U (V h), so no residual Add step is left (9 steps a layer, as a
// low-rank or dense layer has).
TEST(Residual, FusedPlanSumsIntoXWithoutAnAddStep) {
  TempDir t;
  const std::string dense = write_tiny(t, test::k_quant_spec(), "dense.gguf");
  Model m = load_model(residual_file(t, dense, DType::Q4_K, 0.2, "res.gguf"), std::nullopt);
  for (Target target : {Target::Cpu, Target::Gpu}) {
    const Plan p = fuse(plan_forward(*m.weights, {target}));
    std::vector<std::string> layer0;
    for (const Step& s : p.steps) {
      EXPECT_NE(s.op, Op::Add) << s.name;
      for (const Job& j : s.jobs) {
        EXPECT_NE(j.out, Buf::Y) << s.name;  // every product of a map lands in x
        EXPECT_FALSE(j.sum && j.accumulate) << s.name;
      }
      if (s.layer == 0) layer0.push_back(s.name.substr(s.name.find('.', 4) + 1));
    }
    EXPECT_EQ(layer0, (std::vector<std::string>{"qkv_in", "qkv_out", "attend", "o_in", "o_out", "gate_up_in",
                                                 "gate_up_out", "down_in", "down_out"}));
  }
}

TEST(Residual, ZeroCorrectionIsTheQuantizedModelBitForBit) {
  TempDir t;
  const std::string dense = write_tiny(t, test::k_quant_spec(), "dense.gguf");
  quantized_file(t, dense, DType::Q4_K, "q4.gguf");
  Model m = load_model(t.file("q4.gguf"), std::nullopt);
  auto zero = std::make_shared<Weights>(*m.weights);
  for_each_linear(*zero, [](const WeightSpec& spec, int, Linear& lin) {
    if (!spec.per_layer) return;
    lin.v = Matrix::allocate(DType::F32, 32, lin.w.cols);  // zeros
    lin.u = Matrix::allocate(DType::F32, lin.w.rows, 32);
  });
  for (bool one : {false, true}) {
    EXPECT_EQ(run(zero, 0, one), run(m.weights, 0, one)) << one;
  }
  EXPECT_EQ(run(zero, 1), run(m.weights, 1));
}

TEST(Residual, TheCorrectionCutsTheQuantizationError) {
  TempDir t;
  const std::string dense = write_tiny(t, test::k_quant_spec(), "dense.gguf");
  const std::vector<float> ref = reference(dense);
  quantized_file(t, dense, DType::Q2_K, "q2.gguf");
  const double alone = rel_err(reference(t.file("q2.gguf")), ref);
  const double r10 = rel_err(reference(residual_file(t, dense, DType::Q2_K, 0.1, "r10.gguf")), ref);
  const double r40 = rel_err(reference(residual_file(t, dense, DType::Q2_K, 0.4, "r40.gguf")), ref);
  EXPECT_LT(r10, alone);
  EXPECT_LT(r40, r10);
}

// ||W - Q - U V||^2 / ||W||^2 over every per-layer linear map of a residual
// file against the dense file's W.
double weight_error(const std::string& residual, const std::string& dense) {
  Model r = load_model(residual, std::nullopt), d = load_model(dense, std::nullopt);
  std::vector<const Linear*> dense_maps;
  for_each_linear(*d.weights, [&](const WeightSpec& spec, int, const Linear& lin) {
    if (spec.per_layer) dense_maps.push_back(&lin);
  });
  double err = 0, norm = 0;
  size_t i = 0;
  for_each_linear(*r.weights, [&](const WeightSpec& spec, int, const Linear& lin) {
    if (!spec.per_layer) return;
    const Linear& w = *dense_maps.at(i++);
    const int64_t m = lin.w.rows, n = lin.w.cols, k = lin.rank();
    const size_t nn = size_t(n), kk = size_t(k);
    std::vector<float> q(nn), x(nn), v(kk * nn), u(kk);
    for (int64_t j = 0; j < k; ++j) lin.v.row_to_f32(j, &v[size_t(j * n)]);
    for (int64_t row = 0; row < m; ++row) {
      lin.w.row_to_f32(row, q.data());
      w.w.row_to_f32(row, x.data());
      if (k > 0) lin.u.row_to_f32(row, u.data());  // (rank 0: no correction)
      for (int64_t c = 0; c < n; ++c) {
        double uv = 0;
        for (int64_t j = 0; j < k; ++j) uv += double(u[size_t(j)]) * v[size_t(j * n + c)];
        const double e = double(x[size_t(c)]) - q[size_t(c)] - uv;
        err += e * e;
        norm += double(x[size_t(c)]) * x[size_t(c)];
      }
    }
  });
  return err / norm;
}

// Rounds of the alternating fit (--residual-rounds): W - U V quantized again,
// U V refitted to the new error. What the rounds lower is the weights' error
// ||W - Q - U V|| (with --method svd; whitened, its weighted form): on the
// tiny model's Q2_K + keep 0.1 it falls with each round (the logits' error,
// 43% here, does not follow it round by round); one round is the plain fit,
// bit for bit.
TEST(Residual, MoreRoundsCutTheWeightsErrorFurther) {
  TempDir t;
  const std::string dense = write_tiny(t, test::k_quant_spec(), "dense.gguf");
  const std::string one = residual_file(t, dense, DType::Q2_K, 0.1, "r1.gguf", 1);
  EXPECT_EQ(reference(residual_file(t, dense, DType::Q2_K, 0.1, "r0.gguf")), reference(one));
  double last = weight_error(one, dense);  // 0.0598; rounds 2: 0.0546, 4: 0.0508
  for (int rounds : {2, 4}) {
    const double e = weight_error(residual_file(t, dense, DType::Q2_K, 0.1, "r.gguf", rounds), dense);
    EXPECT_LT(e, last) << rounds << " rounds";
    last = e;
  }
}

// --allocate with --residual: the correction's parameters (keep of all the
// matrices') go where the quantization error is largest, and nowhere else.
// With --allocate-loss absolute and --method svd the allocation minimises
// sum ||W - Q - U V||^2 itself, so at the same budget it must beat the even
// split; the quantized parts are the plain quantizer's bits either way.
TEST(Residual, AllocatedCorrectionMeetsItsBudgetAndBeatsTheEvenSplit) {
  TempDir t;
  const std::string dense = write_tiny(t, test::k_quant_spec(), "dense.gguf");
  const std::string even = residual_file(t, dense, DType::Q2_K, 0.1, "even.gguf");
  quantized_file(t, dense, DType::Q2_K, "q2.gguf");
  for (bool relative : {false, true}) {
    CompressOptions o;
    o.method = CompressMethod::Svd;
    o.residual = DType::Q2_K;
    o.factor_type = DType::F32;
    o.budget = RankBudget::Parameters;
    o.allocate_scope = AllocateScope::All;
    o.relative_loss = relative;
    const std::string out = t.file(relative ? "rel.gguf" : "abs.gguf");
    const CompressResult r = compress_model(dense, {{0.1, out}}, o)[0];
    const CorrectionSize c = correction_size(out, DType::Q2_K);
    EXPECT_LE(c.correction, 0.1 * c.params) << relative;
    EXPECT_GT(c.correction + 256 + 256, 0.1 * c.params) << relative;  // nothing else fits (one rank of q)
    EXPECT_GT(c.corrected, 0);
    EXPECT_EQ(r.matrices.size(), size_t(2 * 7));
    expect_same_tensors(out, t.file("q2.gguf"),
                        {"blk.0.attn_q.weight", "blk.1.ffn_down.weight", "blk.1.attn_v.weight"});
    if (!relative) {
      EXPECT_LT(weight_error(out, dense), weight_error(even, dense));
    }
  }
}

// Whitened (the way it runs on real models): the relative loss weighs each
// correction by its output's energy over the calibration text; the budget
// holds and the quantized parts are exactly what `quantize` writes
// activation-weighted on the same text (what the frontier compares against).
TEST(Residual, WhitenedAllocationKeepsTheActivationWeightedBase) {
  TempDir t;
  const std::string dense = write_tiny(t, test::k_quant_spec(), "dense.gguf");
  const std::string calib = test::write_calib(t);
  const std::string q3aw = quantized_file(t, dense, DType::Q3_K, "q3aw.gguf", {calib, 4, 64, 2});
  CompressOptions o;
  o.residual = DType::Q3_K;
  o.factor_type = DType::Q8_0;
  o.budget = RankBudget::Parameters;
  o.allocate_scope = AllocateScope::All;
  o.calib_path = calib;
  o.calib_samples = 4;
  o.calib_len = 64;
  const CompressResult r = compress_model(dense, {{0.1, t.file("res.gguf")}}, o)[0];
  const CorrectionSize c = correction_size(t.file("res.gguf"), DType::Q3_K);
  EXPECT_LE(c.correction, 0.1 * c.params);
  EXPECT_GT(c.correction + 32 * (256 + 256), 0.1 * c.params);  // ranks in units of 32 (q8_0 factors)
  for (const MatrixReport& mr : r.matrices) EXPECT_EQ(mr.rank % 32, 0) << mr.name;
  // Each output's relative error left, ||(E - U V) S||^2 / ||W S||^2: about
  // 0.02 for a Q3_K matrix left uncorrected (here the FFN's), far less where
  // corrected; relative to the error's own energy it would be 1 uncorrected.
  for (const MatrixReport& mr : r.matrices) {
    EXPECT_GE(mr.loss, 0) << mr.name;
    EXPECT_LT(mr.loss, 0.05) << mr.name;
  }
  expect_same_tensors(t.file("res.gguf"), q3aw);
}

TEST(Residual, Errors) {
  TempDir t;
  const std::string dense = write_tiny(t, test::k_quant_spec(), "dense.gguf");
  CompressOptions o;
  o.method = CompressMethod::Svd;
  o.residual = DType::F16;
  LR_EXPECT_ERROR_HAS(error_of([&] {
                        compress_model(dense, {{0.1, t.file("x.gguf")}}, o);
                      }),
                      "--residual quantizes to a block format");
  o.residual = DType::Q3_K;
  o.basis_sharing = 2;
  LR_EXPECT_ERROR_HAS(error_of([&] {
                        compress_model(dense, {{0.1, t.file("x.gguf")}}, o);
                      }),
                      "the residual form (--residual) corrects each matrix on its own: not with --basis-sharing");
  o.basis_sharing = 0;
  o.budget = RankBudget::Bytes;
  o.residual_rounds = 2;
  LR_EXPECT_ERROR_HAS(error_of([&] {
                        compress_model(dense, {{0.1, t.file("x.gguf")}}, o);
                      }),
                      "--residual-rounds refits each matrix's correction at one rank: pass --keep without");
  o.residual_rounds = 1;
  o.budget = RankBudget::PerMatrix;
  compress_model(dense, {{0.1, t.file("lr.gguf")}}, o);
  LR_EXPECT_ERROR_HAS(error_of([&] {
                        compress_model(t.file("lr.gguf"), {{0.1, t.file("y.gguf")}}, o);
                      }),
                      "the model is already low-rank");
  o.residual_rounds = 0;
  LR_EXPECT_ERROR_HAS(error_of([&] {
                        compress_model(dense, {{0.1, t.file("x.gguf")}}, o);
                      }),
                      "--residual-rounds must be at least 1, got 0");
  o.residual_rounds = 3;
  LR_EXPECT_ERROR_HAS(error_of([&] {
                        compress_model(dense, {{0.1, t.file("x.gguf")}, {0.2, t.file("z.gguf")}}, o);
                      }),
                      "--residual-rounds refits the quantized matrix to one correction: pass one --keep");
  o.residual.reset();
  LR_EXPECT_ERROR_HAS(error_of([&] {
                        compress_model(dense, {{0.1, t.file("x.gguf")}}, o);
                      }),
                      "--residual-rounds refits the residual form: pass --residual");
}

}  // namespace
}  // namespace lr
