// Pivoted low-rank storage (compress --pivoted; model/weights.h Pivots):
// the file it writes, the loader's checks, and the plan that runs it (the
// output factor's rows scattered among the pivot latents) against the
// reference forward and the scalar plan executors; the same product as the
// plain factors at the same rank, in fewer bytes.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include "../error_of.h"
#include "backend/backend.h"
#include "compress/compress_model.h"
#include "format/gguf.h"
#include "model/load.h"
#include "model/plan_transforms.h"
#include "model_test_util.h"
#include "runtime/model.h"

namespace lr {
namespace {

using test::error_of;
using test::rel_err;
using test::TempDir;
using test::write_tiny;

// The tiny model (dim 64, ffn 96, kv 32) with a tokenizer, as compress needs.
test::TinySpec spec() {
  test::TinySpec s;
  s.tokenizer = true;
  return s;
}

const std::vector<int32_t> kToks = {1, 20, 33, 7, 45, 12, 9, 30, 3, 42, 15, 17};

std::vector<float> run(std::shared_ptr<const Weights> w, int how /* 0 fast, 1 scalar cpu, 2 scalar gpu */,
                       bool one_by_one = false) {
  return test::plan_logits(std::move(w), kToks, how, one_by_one);
}

std::vector<float> reference(const std::string& path) { return test::reference_logits(path, kToks); }

std::string compressed(const TempDir& t, const std::string& dense, double keep, bool pivoted,
                       const std::string& name, DType factors = DType::F32,
                       std::map<std::string, int64_t> ranks = {}) {
  CompressOptions o;
  o.method = CompressMethod::Svd;
  o.factor_type = factors;
  o.pivoted = pivoted;
  o.ranks = std::move(ranks);
  compress_model(dense, {{keep, t.file(name)}}, o);
  return t.file(name);
}

TEST(Pivoted, FileHoldsThePivotRowsAndTheOtherRows) {
  TempDir t;
  const std::string dense = write_tiny(t, spec(), "dense.gguf");  // dim 64, ffn 96, kv 32
  const std::string piv = compressed(t, dense, 0.5, true, "piv.gguf");
  auto f = gguf::File::open(piv);
  // attn_q [64, 64] at keep 0.5: the largest r with r (128 - r) <= 2048 is 18.
  EXPECT_EQ(f->get_ints("lowrank.pivots.blk.0.attn_q").size(), 18u);
  EXPECT_EQ(f->tensor("blk.0.attn_q.lr_in").shape, (std::vector<uint64_t>{64, 18}));
  EXPECT_EQ(f->tensor("blk.0.attn_q.lr_out").shape, (std::vector<uint64_t>{18, 64 - 18}));
  // ffn_down [64, 96]: r (160 - r) <= 3072 gives 22.
  EXPECT_EQ(f->get_ints("lowrank.pivots.blk.1.ffn_down").size(), 22u);
  EXPECT_EQ(f->tensor("blk.1.ffn_down.lr_out").shape, (std::vector<uint64_t>{22, 64 - 22}));
  Model m = load_model(piv, std::nullopt);
  const Linear& q = m.weights->layers[0].q;
  ASSERT_TRUE(q.pivoted());
  EXPECT_EQ(q.rank(), 18);
  EXPECT_EQ(q.out_dim(), 64);
  EXPECT_EQ(q.u.rows, 64 - 18);
  // r (m + n - r) values where plain factors of rank 18 take r (m + n).
  Model plain = load_model(
      compressed(t, dense, 0.5, false, "plain.gguf", DType::F32, {{"all", 18}}), std::nullopt);
  const Linear& pq = plain.weights->layers[0].q;
  EXPECT_EQ(pq.u.rows * pq.u.cols + pq.v.rows * pq.v.cols, 18 * 128);
  EXPECT_EQ(q.u.rows * q.u.cols + q.v.rows * q.v.cols, 18 * (128 - 18));
}

TEST(Pivoted, SameProductAsThePlainFactorsAtTheSameRank) {
  TempDir t;
  const std::string dense = write_tiny(t, spec(), "dense.gguf");
  const std::string piv = compressed(t, dense, 0.5, true, "piv.gguf", DType::F32, {{"all", 12}});
  const std::string plain =
      compressed(t, dense, 0.5, false, "plain.gguf", DType::F32, {{"all", 12}});
  EXPECT_LT(rel_err(reference(piv), reference(plain)), 1e-4);
  EXPECT_LT(load_model(piv, std::nullopt).weights->bytes(),
            load_model(plain, std::nullopt).weights->bytes());
}

TEST(Pivoted, ExactRankMatricesCompressExactly) {
  TempDir t;
  test::TinySpec s = spec();
  s.exact_rank = 8;  // every rank the keep gives is above 8: the pivot rows' U is singular
  const std::string dense = write_tiny(t, s, "dense.gguf");
  EXPECT_LT(rel_err(reference(compressed(t, dense, 0.5, true, "piv.gguf")), reference(dense)),
            1e-4);
}

TEST(Pivoted, FastAndScalarPlansMatchTheReferenceForward) {
  TempDir t;
  const std::string dense = write_tiny(t, spec(), "dense.gguf");
  for (DType factors : {DType::F32, DType::Q8_0}) {
    const std::string piv = compressed(t, dense, 0.4, true, "piv.gguf", factors);
    const std::vector<float> ref = reference(piv);
    for (std::optional<DType> wtype : {std::optional<DType>(), std::optional<DType>(DType::F32)}) {
      Model m = load_model(piv, wtype);
      const std::string what =
          fmt::format("{} factors, {}", dtype_name(factors), wtype ? "f32" : "as stored");
      EXPECT_LT(rel_err(run(m.weights, 0), ref), factors == DType::F32 || wtype ? 1e-4 : 2e-2)
          << what;
      EXPECT_LT(rel_err(run(m.weights, 0, true), ref), factors == DType::F32 || wtype ? 1e-4 : 2e-2)
          << what;
      EXPECT_LT(rel_err(run(m.weights, 1), ref), 1e-4) << what;
      EXPECT_LT(rel_err(run(m.weights, 2), ref), 1e-4) << what;
    }
  }
}

TEST(Pivoted, TheResidualFormsCorrectionPivoted) {
  TempDir t;
  const std::string dense = write_tiny(t, spec(), "dense.gguf");
  CompressOptions o;
  o.method = CompressMethod::Svd;
  o.residual = DType::Q4_0;
  o.factor_type = DType::F32;
  o.pivoted = true;
  compress_model(dense, {{0.2, t.file("res.gguf")}}, o);
  const std::vector<float> ref = reference(t.file("res.gguf"));
  Model m = load_model(t.file("res.gguf"), std::nullopt);
  ASSERT_TRUE(m.weights->layers[0].q.residual() && m.weights->layers[0].q.pivoted());
  test::expect_prompt_close([&] { return run(m.weights, 0); }, ref);
  EXPECT_LT(rel_err(run(m.weights, 1), ref), 1e-4);
  EXPECT_LT(rel_err(run(m.weights, 2), ref), 1e-4);
}

// One run with several keeps, factor types and storages (the CLI's lists)
// writes each file exactly as its own run does: one calibration and one
// decomposition serve them all.
TEST(Pivoted, OneRunWritesEachStorageAndFactorTypeAsItsOwnRunDoes) {
  TempDir t;
  const std::string dense = write_tiny(t, spec(), "dense.gguf");
  CompressOptions o;
  o.calib_path = test::write_calib(t);
  o.calib_samples = 4;
  o.calib_len = 16;
  const std::vector<CompressJob> jobs = {{0.5, t.file("a.gguf"), DType::F16, false},
                                         {0.5, t.file("b.gguf"), DType::F16, true},
                                         {0.7, t.file("c.gguf"), DType::Q8_0, false},
                                         {0.7, t.file("d.gguf"), DType::Q8_0, true}};
  const std::vector<CompressResult> all = compress_model(dense, jobs, o);
  ASSERT_EQ(all.size(), 4u);
  for (size_t j = 0; j < jobs.size(); ++j) {
    CompressOptions one = o;
    one.factor_type = *jobs[j].factor_type;
    one.pivoted = *jobs[j].pivoted;
    const std::string alone = t.file("alone" + std::to_string(j) + ".gguf");
    const std::vector<CompressResult> r = compress_model(dense, {{jobs[j].keep, alone}}, one);
    const std::string a = test::file_bytes(jobs[j].out_path), b = test::file_bytes(alone);
    EXPECT_GT(a.size(), 1000u);
    EXPECT_TRUE(a == b) << jobs[j].out_path << ": " << a.size() << " vs " << b.size() << " bytes";
    ASSERT_EQ(r[0].matrices.size(), all[j].matrices.size());
    for (size_t i = 0; i < r[0].matrices.size(); ++i)
      EXPECT_EQ(all[j].matrices[i].rank, r[0].matrices[i].rank) << all[j].matrices[i].name;
  }
  // attn_q [64, 64]: keep 0.5 plain rank 16, pivoted 18 (r (128 - r) <= 2048).
  EXPECT_EQ(all[0].matrices[0].rank, 16);
  EXPECT_EQ(all[1].matrices[0].rank, 18);
  auto f = gguf::File::open(t.file("d.gguf"));
  EXPECT_EQ(f->get_ints("lowrank.pivots.blk.0.attn_q").size(), size_t(all[3].matrices[0].rank));
  // The outputs' factors must fit in memory until written: 4 outputs of the
  // tiny model take about 0.1 MB in f32 (attn_q alone at rank 16: 16 x 128 x 4 bytes per layer).
  o.factor_memory = 40000;
  LR_EXPECT_ERROR_HAS(error_of([&] { compress_model(dense, jobs, o); }),
                      "the 4 outputs' factors take about 0.");
  LR_EXPECT_ERROR_HAS(error_of([&] { compress_model(dense, jobs, o); }),
                      "write fewer at once (fewer --keep, --factor-type or --storage values)");
  // The estimate is the factors' bytes as compress holds them, as they will
  // be stored (Q8_0: a byte per value and an f16 scale per 32; F16: 2 bytes
  // a value): that limit lets output c through, one byte less refuses it.
  uint64_t need = 0;
  auto held = [](int64_t rows, int64_t cols) {
    return uint64_t(rows) * uint64_t(cols % 32 == 0 ? cols + cols / 32 * 2 : 2 * cols);
  };
  for (const MatrixReport& r : all[2].matrices)
    if (r.rank > 0) need += held(r.m, r.rank) + held(r.rank, r.n);
  EXPECT_GT(need, 10000u);
  o.factor_memory = need - 1;
  LR_EXPECT_ERROR_HAS(error_of([&] { compress_model(dense, {jobs[2]}, o); }),
                      "write fewer at once");
  o.factor_memory = need;
  EXPECT_NO_THROW(compress_model(dense, {jobs[2]}, o));
  o.factor_memory = 0;
  // A global budget weighs one factor type's bytes.
  o.budget = RankBudget::Bytes;
  LR_EXPECT_ERROR_HAS(error_of([&] {
                        compress_model(dense, {jobs[0], jobs[2]}, o);
                      }),
                      "weighs one factor type's bytes");
}

// The file at `path` with its metadata key `key` set to `v`.
std::string with_pivots(const TempDir& t, const std::string& path, const std::string& key,
                        std::vector<int32_t> v) {
  auto f = gguf::File::open(path);
  gguf::Writer w;
  for (const auto& [k, value] : f->metadata()) w.set(k, value);
  w.set_i32s(key, std::move(v));
  for (const auto& ti : f->tensors()) w.add_tensor(ti.name, ti.dtype, ti.shape, ti.data, ti.nbytes);
  const std::string out = t.file("bad.gguf");
  w.write(out);
  return out;
}

TEST(Pivoted, LoaderErrorsNameTheProblem) {
  TempDir t;
  const std::string dense = write_tiny(t, spec(), "dense.gguf");
  const std::string piv = compressed(t, dense, 0.5, true, "piv.gguf", DType::F32, {{"all", 4}});
  const std::string key = "lowrank.pivots.blk.0.attn_q";
  auto load = [&](std::vector<int32_t> v) {
    return error_of([&] { load_model(with_pivots(t, piv, key, std::move(v)), std::nullopt); });
  };
  LR_EXPECT_ERROR_HAS(load({0, 1, 2, 64}),
                      "'lowrank.pivots.blk.0.attn_q': pivot row 64 is outside [0, 64)");
  LR_EXPECT_ERROR_HAS(load({0, 1, 1, 3}), "pivot row 1 appears twice");
  LR_EXPECT_ERROR_HAS(load({0, 1, 2}),
                      "expected [61, rank] (low-rank output factor, 64 rows less 3 pivots)");
  // A plain factor file given pivots: U has all the rows.
  const std::string plain =
      compressed(t, dense, 0.5, false, "plain.gguf", DType::F32, {{"all", 4}});
  LR_EXPECT_ERROR_HAS(error_of([&] {
                        load_model(with_pivots(t, plain, key, {0, 1, 2, 3}), std::nullopt);
                      }),
                      "has shape [64, 4], expected [60, rank]");
}

TEST(Pivoted, Errors) {
  TempDir t;
  const std::string dense = write_tiny(t, spec(), "dense.gguf");
  CompressOptions o;
  o.method = CompressMethod::Whiten;
  o.pivoted = true;
  o.basis_sharing = 2;
  o.calib_path = test::write_calib(t);
  LR_EXPECT_ERROR_HAS(
      error_of([&] {
        compress_model(dense, {{0.5, t.file("x.gguf")}}, o);
      }),
      "pivoted storage (--pivoted) takes --keep or --rank, without --basis-sharing");
  o.basis_sharing = 0;
  o.budget = RankBudget::Bytes;
  LR_EXPECT_ERROR_HAS(error_of([&] {
                        compress_model(dense, {{0.5, t.file("x.gguf")}}, o);
                      }),
                      "pivoted storage (--pivoted) takes --keep or --rank");
  const std::string piv = compressed(t, dense, 0.5, true, "piv.gguf");
  Model m = load_model(piv, DType::BF16);
  // The research rung that rebuilds k and v from whole output factors.
  ExecOptions e;
  e.kv = KvMode::Legacy;
  e.packed = false;
  e.fused = false;
  LR_EXPECT_ERROR_HAS(error_of([&] { derive(*m.weights, {Target::Cpu}, e); }),
                      "layer 0's k projection is stored pivoted (use --kv dense)");
  LR_EXPECT_ERROR_HAS(error_of([&] {
                        compressed(t, dense, 0.5, true, "y.gguf", DType::F32, {{"attn_k", -1}});
                      }),
                      "blk.0.attn_k: pivoted storage needs a rank below the 32 rows (got 32)");
}

}  // namespace
}  // namespace lr
