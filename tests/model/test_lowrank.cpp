// Low-rank models end to end on small synthetic models: compress, write,
// load, run on both paths.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "backend/backend.h"
#include "core/error.h"
#include "format/gguf_source.h"
#include "model/load.h"
#include "compress/compress_model.h"
#include "runtime/model.h"
#include "runtime/session.h"
#include "model_test_util.h"

namespace lr {
namespace {

namespace fs = std::filesystem;

using test::TempDir;
using test::file_bytes;
using test::write_calib;
using test::write_tiny;

std::vector<float> logits_of(const std::string& path, ExecPath p, DType wtype,
                             const std::vector<int32_t>& toks) {
  Model m = load_model(path, wtype);
  auto b = make_session(m, p, test::backend_options(64, 2));
  std::vector<float> out(toks.size() * size_t(m.weights->cfg.vocab));
  b->forward(toks.data(), int(toks.size()), out.data(), true);
  return out;
}

using test::rel_err;

const std::vector<int32_t> kToks = {1, 80, 120, 33, 201, 7, 99, 150, 3, 42, 250, 17};

test::TinySpec tiny() {
  test::TinySpec s;
  s.tokenizer = true;
  return s;
}

TEST(LowRank, FullRankFactorsReproduceDenseLogits) {
  TempDir t;
  std::string dense = write_tiny(t, tiny(), "dense.gguf");
  CompressOptions o;
  o.method = CompressMethod::Svd;
  o.ranks["all"] = -1;  // min(m, n)
  o.factor_type = DType::F32;
  compress_model(dense, {{0.5, t.file("full.gguf")}}, o);
  Model lr = load_model(t.file("full.gguf"), DType::F32);
  EXPECT_TRUE(lr.weights->layers[0].q.low_rank());
  EXPECT_EQ(lr.weights->layers[1].gate.rank(), 64);  // min(96, 64)
  auto want = logits_of(dense, ExecPath::Reference, DType::F32, kToks);
  EXPECT_LT(rel_err(logits_of(t.file("full.gguf"), ExecPath::Reference, DType::F32, kToks), want), 1e-3);
  EXPECT_LT(rel_err(logits_of(t.file("full.gguf"), ExecPath::Fast, DType::F32, kToks), want), 1e-3);
}

TEST(LowRank, KeepOneLeavesTheModelDense) {
  TempDir t;
  std::string dense = write_tiny(t, tiny(), "dense.gguf");
  CompressOptions o;
  o.calib_path = write_calib(t);
  o.calib_samples = 4;
  o.calib_len = 64;
  compress_model(dense, {{1.0, t.file("k1.gguf")}}, o);
  Model lr = load_model(t.file("k1.gguf"), DType::F32);
  EXPECT_FALSE(lr.weights->layers[0].q.low_rank());
  EXPECT_EQ(logits_of(t.file("k1.gguf"), ExecPath::Reference, DType::F32, kToks),
            logits_of(dense, ExecPath::Reference, DType::F32, kToks));
}

TEST(LowRank, ExactlyLowRankWeightsCompressExactly) {
  TempDir t;
  test::TinySpec s = tiny();
  s.exact_rank = 8;
  std::string dense = write_tiny(t, s, "dense.gguf");
  auto want = logits_of(dense, ExecPath::Reference, DType::F32, kToks);
  for (CompressMethod method : {CompressMethod::Svd, CompressMethod::Whiten}) {
    CompressOptions o;
    o.method = method;
    o.ranks["all"] = 8;
    o.factor_type = DType::F32;
    o.calib_path = write_calib(t);
    o.calib_samples = 4;
    o.calib_len = 64;
    auto res = compress_model(dense, {{0.5, t.file("r8.gguf")}}, o);
    for (const MatrixReport& m : res[0].matrices) EXPECT_EQ(m.rank, 8) << m.name;
    EXPECT_LT(rel_err(logits_of(t.file("r8.gguf"), ExecPath::Reference, DType::F32, kToks), want), 1e-4);
    // Rank 8 stores 8*(m+n) instead of m*n per matrix.
    EXPECT_LT(res[0].params_after, res[0].params_before);
  }
}

TEST(LowRank, KeepGivesTheDocumentedRanksAndRunsOnBothPaths) {
  TempDir t;
  std::string dense = write_tiny(t, tiny(), "dense.gguf");
  CompressOptions o;
  o.calib_path = write_calib(t);
  o.calib_samples = 4;
  o.calib_len = 64;
  auto res = compress_model(dense, {{0.6, t.file("a.gguf")}, {0.5, t.file("b.gguf")}}, o);
  ASSERT_EQ(res.size(), 2u);
  Model m = load_model(t.file("a.gguf"), DType::F32);
  const Layer& l = m.weights->layers[0];
  EXPECT_EQ(l.q.rank(), 19);     // floor(0.6*64*64/128)
  EXPECT_EQ(l.k.rank(), 12);     // floor(0.6*32*64/96) = 12.8 -> 12
  EXPECT_EQ(l.gate.rank(), 23);  // floor(0.6*96*64/160) = 23.04
  EXPECT_EQ(l.down.rank(), 23);
  EXPECT_EQ(m.file->get_string("lowrank.method"), "whiten");
  EXPECT_NEAR(m.file->get_float("lowrank.keep"), 0.6, 1e-6);
  EXPECT_EQ(m.file->get_ints("lowrank.rank.attn_q"), (std::vector<int64_t>{19, 19}));
  // Reference and fast paths agree on the low-rank model.
  EXPECT_LT(rel_err(logits_of(t.file("b.gguf"), ExecPath::Fast, DType::F32, kToks),
                    logits_of(t.file("b.gguf"), ExecPath::Reference, DType::F32, kToks)),
            1e-5);
  EXPECT_LT(rel_err(logits_of(t.file("b.gguf"), ExecPath::Fast, DType::F16, kToks),
                    logits_of(t.file("b.gguf"), ExecPath::Reference, DType::F32, kToks)),
            1e-2);
}

TEST(LowRank, BasisSharingStoresAndLoadsOneBasisPerGroup) {
  TempDir t;
  test::TinySpec s = tiny();
  s.n_layers = 3;  // groups {0, 1} and {2}
  std::string dense = write_tiny(t, s, "dense.gguf");
  CompressOptions o;
  o.basis_sharing = 2;
  o.calib_path = write_calib(t);
  o.calib_samples = 4;
  o.calib_len = 64;
  compress_model(dense, {{0.6, t.file("bs.gguf")}}, o);
  auto f = gguf::File::open(t.file("bs.gguf"));
  int shared = 0;
  for (const auto& ti : f->tensors()) shared += ti.name.rfind("shared.", 0) == 0;
  EXPECT_EQ(shared, 5);  // q, k, v, gate, up of group {0, 1}; layer 2 alone keeps its own
  EXPECT_EQ(f->get_ints("lowrank.shared.attn_q"), (std::vector<int64_t>{0, 0, -1}));
  EXPECT_EQ(f->find_tensor("blk.0.attn_q.lr_in"), nullptr);
  EXPECT_NE(f->find_tensor("blk.2.attn_q.lr_in"), nullptr);
  EXPECT_NE(f->find_tensor("blk.0.attn_output.lr_in"), nullptr);  // o stays private
  Model m = load_model(t.file("bs.gguf"), DType::F32);
  const auto& L = m.weights->layers;
  EXPECT_EQ(L[0].q.v.data, L[1].q.v.data);  // one allocation for the group
  EXPECT_NE(L[0].q.v.data, L[2].q.v.data);
  EXPECT_NE(L[0].q.u.data, L[1].q.u.data);
  EXPECT_NE(L[0].o.v.data, L[1].o.v.data);
  // shared rank: floor(0.6*2*64*64/(64+2*64)) = 25 for the pair, 19 alone
  EXPECT_EQ(L[0].q.rank(), 25);
  EXPECT_EQ(L[2].q.rank(), 19);
  // Counted once: parameters equal the sum over distinct matrices.
  uint64_t q_params = 25 * 64 + 2 * 64 * 25 + 19 * 64 + 64 * 19;
  uint64_t counted = 0;
  for (const Layer& l : L) counted += uint64_t(l.q.u.rows * l.q.u.cols);
  counted += uint64_t(L[0].q.v.rows * L[0].q.v.cols + L[2].q.v.rows * L[2].q.v.cols);
  EXPECT_EQ(counted, q_params);
  auto ref = logits_of(t.file("bs.gguf"), ExecPath::Reference, DType::F32, kToks);
  EXPECT_LT(rel_err(logits_of(t.file("bs.gguf"), ExecPath::Fast, DType::F32, kToks), ref), 1e-5);
}

TEST(LowRank, CalibrationInPassesGivesTheSameFile) {
  // A Gram budget of one byte holds no layer: one layer per pass (a whole
  // basis-sharing group with --basis-sharing). Each pass reruns the dense
  // model, so the files are the same byte for byte. The matrices are Q8_0 in
  // the file: compress decodes each to f32 only while it factorizes it.
  TempDir t;
  test::TinySpec s = tiny();
  s.n_layers = 3;
  s.wtype = DType::Q8_0;
  std::string dense = write_tiny(t, s, "dense.gguf");
  for (int sharing : {0, 2}) {
    CompressOptions o;
    o.basis_sharing = sharing;
    o.calib_path = write_calib(t);
    o.calib_samples = 4;
    o.calib_len = 64;
    std::vector<std::string> phases;
    auto progress = [&](int, int, const char* phase) {
      if (phases.empty() || phases.back() != phase) phases.push_back(phase);
    };
    compress_model(dense, {{0.6, t.file("one.gguf")}}, o, progress);
    EXPECT_EQ(phases.front(), "calibrating");
    phases.clear();
    o.calib_memory = 1;
    compress_model(dense, {{0.6, t.file("passes.gguf")}}, o, progress);
    const std::vector<std::string> want_phases =
        sharing ? std::vector<std::string>{"calibrating layers 0-1", "factorizing",
                                           "calibrating layers 2-2", "factorizing"}
                : std::vector<std::string>{"calibrating layers 0-0", "factorizing",
                                           "calibrating layers 1-1", "factorizing",
                                           "calibrating layers 2-2", "factorizing"};
    EXPECT_EQ(phases, want_phases) << "basis sharing " << sharing;
    EXPECT_EQ(file_bytes(t.file("one.gguf")), file_bytes(t.file("passes.gguf")))
        << "basis sharing " << sharing;
    Model m = load_model(t.file("passes.gguf"), DType::F32);
    EXPECT_EQ(m.weights->layers[2].q.rank(), 19);
  }
}

TEST(LowRank, SharedBasisMayExceedOneMatrixOutputWidth) {
  // k/v are [32, 64]; a basis shared by 3 layers at keep 0.9 has
  // floor(0.9*3*32*64/(64+3*32)) = 34 directions, more than one matrix's 32 rows.
  TempDir t;
  test::TinySpec s = tiny();
  s.n_layers = 3;
  std::string dense = write_tiny(t, s, "dense.gguf");
  CompressOptions o;
  o.basis_sharing = 3;
  o.calib_path = write_calib(t);
  o.calib_samples = 4;
  o.calib_len = 64;
  compress_model(dense, {{0.9, t.file("bs3.gguf")}}, o);
  Model m = load_model(t.file("bs3.gguf"), DType::F32);
  EXPECT_EQ(m.weights->layers[0].k.rank(), 34);
  EXPECT_EQ(m.weights->layers[2].k.v.data, m.weights->layers[0].k.v.data);
  auto ref = logits_of(t.file("bs3.gguf"), ExecPath::Reference, DType::F32, kToks);
  EXPECT_LT(rel_err(logits_of(t.file("bs3.gguf"), ExecPath::Fast, DType::F32, kToks), ref), 1e-5);
}

TEST(LowRank, BadInputIsAClearError) {
  TempDir t;
  std::string dense = write_tiny(t, tiny(), "dense.gguf");
  auto expect_error = [&](const CompressOptions& o, double keep, const std::string& words) {
    try {
      compress_model(dense, {{keep, t.file("x.gguf")}}, o);
      FAIL() << "no error, expected: " << words;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  CompressOptions o;
  o.method = CompressMethod::Svd;
  expect_error(o, 0.0, "--keep must be in (0, 1]");
  expect_error(o, 1.5, "--keep must be in (0, 1]");
  CompressOptions w;
  expect_error(w, 0.5, "needs calibration text");
  w.calib_path = write_calib(t);
  w.calib_samples = 1000;
  expect_error(w, 0.5, "fewer than --calib-samples x --calib-len");
  CompressOptions r = o;
  r.ranks["attn_q"] = 65;
  expect_error(r, 0.5, "--rank attn_q=65 is outside [1, min(out, in) = 64]");
  CompressOptions k = o;
  k.kinds = {"attn_z"};
  expect_error(k, 0.5, "unknown matrix type 'attn_z'");
}

TEST(LowRank, LoaderRejectsMismatchedFactors) {
  test::TinySpec s;
  s.n_layers = 1;
  gguf::Writer w;
  auto f = test::make_tiny_file(s);
  for (const auto& [k, v] : f->metadata()) w.set(k, v);
  for (const auto& ti : f->tensors()) {
    if (ti.name == "blk.0.attn_q.weight") {
      std::vector<float> in(10 * 64, 0.1f), out(64 * 11, 0.1f);  // rank 10 vs 11
      w.add_tensor("blk.0.attn_q.lr_in", DType::F32, {64, 10}, in.data(), in.size() * 4);
      w.add_tensor("blk.0.attn_q.lr_out", DType::F32, {11, 64}, out.data(), out.size() * 4);
      continue;
    }
    w.add_tensor(ti.name, ti.dtype, ti.shape, ti.data, ti.nbytes);
  }
  auto bad = gguf::File::from_bytes(w.to_bytes(), "bad.gguf");
  try {
    load_weights(config_from_gguf(*bad), GgufSource(bad), Naming::Gguf, DType::F32);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.gguf: tensor 'blk.0.attn_q.lr_in' has shape [10, 64], expected [11, 64]"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace lr
