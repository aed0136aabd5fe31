// `compress --budget / --allocate` (ranks from a global budget) and
// `quantize` (lowrank's own block quantizers) on tiny synthetic models.
#include <gtest/gtest.h>

#include <map>

#include "../error_of.h"
#include "backend/backend.h"
#include "compress/compress_model.h"
#include "compress/quantize_model.h"
#include "core/error.h"
#include "format/gguf.h"
#include "model_test_util.h"
#include "runtime/model.h"
#include "runtime/session.h"

namespace lr {
namespace {

#define EXPECT_CONTAINS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

using test::error_of;
using test::rel_err;
using test::TempDir;
using test::write_tiny;

const std::vector<int32_t> kToks = {1, 80, 120, 33, 201, 7, 99, 150, 3, 42, 250, 17};

std::vector<float> logits_of(const std::string& path) {
  Model m = load_model(path, std::nullopt);
  auto b = make_session(m, ExecPath::Fast, test::backend_options(64, 2));
  std::vector<float> out(kToks.size() * size_t(m.weights->cfg.vocab));
  b->forward(kToks.data(), int(kToks.size()), out.data(), true);
  return out;
}

bool is_block_matrix(const std::string& name) {
  for (const char* k :
       {"attn_q.", "attn_k.", "attn_v.", "attn_output.", "ffn_gate.", "ffn_up.", "ffn_down."})
    if (name.find(k) != std::string::npos) return true;
  return false;
}

// Bytes of the per-layer linear maps (dense or factors) in a GGUF file.
uint64_t block_matrix_bytes(const std::string& path) {
  auto f = gguf::File::open(path);
  uint64_t total = 0;
  for (const gguf::TensorInfo& t : f->tensors())
    if (is_block_matrix(t.name) && t.name.find("bias") == std::string::npos) total += t.nbytes;
  return total;
}

CompressOptions calibrated(const TempDir& t) {
  CompressOptions o;
  o.calib_path = test::write_calib(t);
  o.calib_samples = 4;
  o.calib_len = 64;
  return o;
}

TEST(Budget, ByteBudgetIsMetWithinOneRankAndRanksVary) {
  TempDir t;
  const std::string dense = write_tiny(t, test::k_quant_spec(), "dense.gguf");  // f32 matrices
  const uint64_t before = block_matrix_bytes(dense);
  CompressOptions o = calibrated(t);
  o.budget = RankBudget::Bytes;
  o.allocate_scope = AllocateScope::All;
  o.factor_type = DType::F16;
  for (double b : {0.15, 0.3}) {
    const std::string out = t.file("b.gguf");
    const CompressResult r = compress_model(dense, {{b, out}}, o)[0];
    const uint64_t after = block_matrix_bytes(out);
    // A rank of an f16 [m, n] pair costs 2 (m + n) bytes: at most 2 * (512 + 256).
    EXPECT_LE(double(after), b * double(before)) << b;
    EXPECT_GT(double(after) + 2 * (512 + 256), b * double(before)) << b;
    std::map<int64_t, int> ranks;
    for (const MatrixReport& m : r.matrices) ++ranks[m.rank];
    EXPECT_GT(ranks.size(), 2u) << b;  // not one keep for all
    const std::vector<float> y = logits_of(out);
    for (float v : y) ASSERT_TRUE(std::isfinite(v));
  }
}

TEST(Budget, AllocatedParametersBeatTheUniformKeepInActivationLoss) {
  TempDir t;
  test::TinySpec s = test::k_quant_spec();
  s.exact_rank = 0;
  const std::string dense = write_tiny(t, s, "dense.gguf");
  CompressOptions o = calibrated(t);
  const CompressResult uniform = compress_model(dense, {{0.5, t.file("u.gguf")}}, o)[0];
  o.budget = RankBudget::Parameters;
  o.allocate_scope = AllocateScope::All;
  const CompressResult alloc = compress_model(dense, {{0.5, t.file("a.gguf")}}, o)[0];
  // The seven maps of 2 layers: 2 * (256*256 * 2 + 128*256 * 2 + 512*256 * 3) parameters, half
  // kept.
  const double allowed = double(alloc.params_before) - 0.5 * 2 * (131072 + 65536 + 393216);
  EXPECT_LE(double(alloc.params_after), allowed);
  EXPECT_GT(double(alloc.params_after) + 512 + 256, allowed);
  double lu = 0, la = 0;
  for (const MatrixReport& m : uniform.matrices) lu += m.loss;
  for (const MatrixReport& m : alloc.matrices) la += m.loss;
  EXPECT_GT(lu, 0);
  EXPECT_LT(la, lu);
}

// An allocating run holds every matrix's decomposition (f32, at the most
// rank that leaves it smaller than dense) until the ranks are chosen: its
// memory check counts those beside the output's factors.
TEST(Budget, AnAllocatingRunCountsTheDecompositionsItHolds) {
  TempDir t;
  const std::string dense = write_tiny(t, test::k_quant_spec(), "dense.gguf");
  CompressOptions o = calibrated(t);
  o.budget = RankBudget::Parameters;
  o.allocate_scope = AllocateScope::All;
  // Held, per layer: q and o [256, 256] at rank 127, k and v [128, 256] at 85,
  // gate, up [512, 256] and down [256, 512] at 170, (m + n) r f32 values each;
  // the output's f16 factors at keep 0.5's rank per matrix, 2 (m + n) r bytes
  // (64, 42 and 85).
  const uint64_t decompositions = 2 * 4 * (127 * 512 * 2 + 85 * 384 * 2 + 170 * 768 * 3);
  const uint64_t output = 2 * 2 * (64 * 512 * 2 + 42 * 384 * 2 + 85 * 768 * 3);
  o.factor_memory = decompositions + output - 1;
  EXPECT_CONTAINS(error_of([&] { compress_model(dense, {{0.5, t.file("a.gguf")}}, o); }),
                  "write fewer at once");
  o.factor_memory = decompositions + output;
  EXPECT_NO_THROW(compress_model(dense, {{0.5, t.file("a.gguf")}}, o));
}

TEST(Budget, Errors) {
  TempDir t;
  const std::string dense = write_tiny(t, test::k_quant_spec(), "dense.gguf");
  CompressOptions o = calibrated(t);
  o.budget = RankBudget::Bytes;
  EXPECT_CONTAINS(error_of([&] {
                    compress_model(dense, {{0.001, t.file("x.gguf")}}, o);
                  }),
                  "is below what the smallest ranks cost");
  o.basis_sharing = 2;
  EXPECT_CONTAINS(error_of([&] {
                    compress_model(dense, {{0.5, t.file("x.gguf")}}, o);
                  }),
                  "does not combine with --basis-sharing");
}

TEST(Quantize, EveryFormatRunsAndQ8IsCloseToDense) {
  TempDir t;
  const std::string dense = write_tiny(t, test::k_quant_spec(), "dense.gguf");
  const std::vector<float> ref = logits_of(dense);
  double prev = 0;
  for (DType type : {DType::Q8_0, DType::Q6_K, DType::Q4_K, DType::Q3_K, DType::Q2_K}) {
    QuantizeOptions o;
    const std::string out = t.file("q.gguf");
    const QuantizeReport r = quantize_model(dense, {{type, out}}, o)[0];
    EXPECT_EQ(r.types.at(type), 2 * 7);
    EXPECT_TRUE(r.fell_back.empty());
    auto f = gguf::File::open(out);
    for (const gguf::TensorInfo& ti : f->tensors())
      EXPECT_EQ(ti.dtype, is_block_matrix(ti.name) ? type : DType::F32) << ti.name;
    const double e = rel_err(logits_of(out), ref);
    EXPECT_GT(e, prev) << dtype_name(type);  // fewer bits, more error
    prev = e;
    if (type == DType::Q8_0) {
      EXPECT_LT(e, 3e-2);
    }
    EXPECT_LT(e, 0.5) << dtype_name(type);
  }
}

// "output" re-encodes the head too: the tiny model's (tied: its
// embeddings) is Q4_K afterwards, the rest as stored, and the file runs.
TEST(Quantize, TheHeadToo) {
  TempDir t;
  const std::string dense = write_tiny(t, test::k_quant_spec(), "dense.gguf");
  QuantizeOptions o;
  o.kinds.push_back("output");
  const std::string out = t.file("q.gguf");
  const QuantizeReport r = quantize_model(dense, {{DType::Q4_K, out}}, o)[0];
  EXPECT_EQ(r.types.at(DType::Q4_K), 2 * 7 + 1);
  auto f = gguf::File::open(out);
  const gguf::TensorInfo* head = f->find_tensor("output.weight");
  if (!head) head = f->find_tensor("token_embd.weight");
  ASSERT_NE(head, nullptr);
  EXPECT_EQ(head->dtype, DType::Q4_K);
  EXPECT_LT(rel_err(logits_of(out), logits_of(dense)), 0.5);
}

TEST(Quantize, ActivationWeightedDiffersAndRowsThatDoNotFitAreNamed) {
  TempDir t;
  const std::string dense = write_tiny(t, test::k_quant_spec(), "dense.gguf");
  QuantizeOptions o;
  const DType o_type = DType::Q4_0;
  quantize_model(dense, {{o_type, t.file("plain.gguf")}}, o);
  o.calib = {test::write_calib(t), 4, 64, 2};
  const QuantizeReport r = quantize_model(dense, {{o_type, t.file("aw.gguf")}}, o)[0];
  EXPECT_EQ(r.calib_tokens, 4 * 64);
  EXPECT_NE(logits_of(t.file("plain.gguf")), logits_of(t.file("aw.gguf")));

  test::TinySpec narrow;  // dim 64: no K-quant block fits a row
  narrow.tokenizer = true;
  const std::string small = write_tiny(t, narrow, "small.gguf");
  QuantizeOptions k;
  const DType k_type = DType::Q3_K;
  EXPECT_CONTAINS(error_of([&] {
                    quantize_model(small, {{k_type, t.file("k.gguf")}}, k);
                  }),
                  "blk.0.attn_q.weight has rows of 64 values, not a whole number of Q3_K's "
                  "256-value blocks (pass --fallback to store such matrices as Q4_0");
  k.fallback = true;
  const QuantizeReport f = quantize_model(small, {{k_type, t.file("k.gguf")}}, k)[0];
  EXPECT_EQ(f.types.at(DType::Q4_0), 2 * 7);
  EXPECT_EQ(f.fell_back.size(), 14u);
  k.calib = {test::write_calib(t), 1000, 512, 2};
  EXPECT_CONTAINS(error_of([&] {
                    quantize_model(small, {{k_type, t.file("k.gguf")}}, k);
                  }),
                  "fewer than --calib-samples x --calib-len");
}

TEST(Quantize, LowRankInputIsRefused) {
  TempDir t;
  const std::string dense = write_tiny(t, test::k_quant_spec(), "dense.gguf");
  CompressOptions c;
  c.method = CompressMethod::Svd;
  compress_model(dense, {{0.5, t.file("lr.gguf")}}, c);
  QuantizeOptions o;
  const DType o_type = DType::Q4_K;
  EXPECT_CONTAINS(error_of([&] {
                    quantize_model(t.file("lr.gguf"), {{o_type, t.file("q.gguf")}}, o);
                  }),
                  "the model is low-rank; quantize reads dense models");
}

}  // namespace
}  // namespace lr
