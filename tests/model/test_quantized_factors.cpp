// Low-rank factors stored in quantized formats (compress --factor-type
// q8_0 | q4_k | q5_k | q6_k): the storage rule per factor, ranks rounded to
// whole Q8_0 rows, the file's tensor types, and the model run from those
// blocks by the fast path (as stored), against the scalar reference and
// against the same factors kept in f32.
#include <gtest/gtest.h>

#include <cstdio>

#include "backend/backend.h"
#include "compress/compress_model.h"
#include "core/error.h"
#include "format/gguf_source.h"
#include "model/save.h"
#include "model_test_util.h"
#include "runtime/model.h"
#include "runtime/session.h"

namespace lr {
namespace {

using test::rel_err;
using test::TempDir;
using test::write_tiny;

const std::vector<int32_t> kToks = {1, 80, 120, 33, 201, 7, 99, 150, 3, 42, 250, 17};

std::vector<float> logits_of(const std::string& path, ExecPath p, std::optional<DType> wtype) {
  Model m = load_model(path, wtype);
  auto b = make_session(m, p, test::backend_options(64, 2));
  std::vector<float> out(kToks.size() * size_t(m.weights->cfg.vocab));
  b->forward(kToks.data(), int(kToks.size()), out.data(), true);
  return out;
}

// Rows of 256 (dim 256, ffn 512): the input factors take K-quant blocks.
test::TinySpec wide() { return test::k_quant_spec(); }

TEST(QuantizedFactors, StorageRule) {
  EXPECT_EQ(factor_storage_type(DType::Q4_K, 512), DType::Q4_K);
  EXPECT_EQ(factor_storage_type(DType::Q4_K, 896), DType::Q8_0);  // 3.5 super-blocks
  EXPECT_EQ(factor_storage_type(DType::Q6_K, 608), DType::Q8_0);
  EXPECT_EQ(factor_storage_type(DType::Q6_K, 209), DType::F16);
  EXPECT_EQ(factor_storage_type(DType::Q8_0, 64), DType::Q8_0);
  EXPECT_EQ(factor_storage_type(DType::Q8_0, 209), DType::F16);
  EXPECT_EQ(factor_storage_type(DType::BF16, 209), DType::BF16);
  EXPECT_THROW(check_factor_type(DType::Q2_K), Error);
  EXPECT_THROW(parse_factor_type("q3_k"), Error);
  EXPECT_EQ(parse_factor_type("q5_k"), DType::Q5_K);
}

TEST(QuantizedFactors, CompressWritesBlocksAndTheFastPathRunsThem) {
  TempDir t;
  const std::string dense = write_tiny(t, wide(), "dense.gguf");
  // The f32 factors at the ranks the quantized runs round to (below).
  CompressOptions f;
  f.method = CompressMethod::Svd;
  f.factor_type = DType::F32;
  f.ranks = {{"attn_q", 64},   {"attn_k", 32}, {"attn_v", 32},  {"attn_output", 64},
             {"ffn_gate", 64}, {"ffn_up", 64}, {"ffn_down", 64}};
  compress_model(dense, {{0.5, t.file("f32.gguf")}}, f);
  const std::vector<float> want = logits_of(t.file("f32.gguf"), ExecPath::Reference, DType::F32);
  CompressOptions o;
  o.method = CompressMethod::Svd;
  // Relative logit error of each factor type against the f32 factors: the
  // coarser the format, the larger, and none of them zero.
  struct Case {
    DType t;
    double max_err, min_err;
  };
  for (Case c : {Case{DType::Q8_0, 0.01, 1e-5}, Case{DType::Q6_K, 0.025, 1e-4},
                 Case{DType::Q5_K, 0.05, 1e-4}, Case{DType::Q4_K, 0.1, 1e-3}}) {
    SCOPED_TRACE(std::string(dtype_name(c.t)));
    o.factor_type = c.t;
    const std::string path = t.file(std::string(dtype_name(c.t)) + ".gguf");
    auto res = compress_model(dense, {{0.5, path}}, o);
    // Ranks: floor(0.5 m n / (m + n)) rounded down to a multiple of 32.
    for (const MatrixReport& m : res[0].matrices) {
      const int64_t r = int64_t(0.5 * double(m.m * m.n) / double(m.m + m.n));
      EXPECT_EQ(m.rank, r / 32 * 32) << m.name;
      EXPECT_EQ(m.rank, f.ranks.at(m.name.substr(m.name.find('.', 4) + 1))) << m.name;
    }
    // 7 maps x 2 layers: input factors (rows of 256 or 512) in the format
    // asked for where it is a K-quant, output factors (rows of 64 or 96...
    // rounded: 64) in Q8_0.
    const std::map<DType, int> want_types =
        c.t == DType::Q8_0 ? std::map<DType, int>{{DType::Q8_0, 28}}
                           : std::map<DType, int>{{c.t, 14}, {DType::Q8_0, 14}};
    EXPECT_EQ(res[0].factor_types, want_types);
    auto file = gguf::File::open(path);
    EXPECT_EQ(file->tensor("blk.1.ffn_down.lr_in").dtype, c.t);
    EXPECT_EQ(file->tensor("blk.1.ffn_down.lr_out").dtype, DType::Q8_0);

    const std::vector<float> ref = logits_of(path, ExecPath::Reference, DType::F32);
    // The fast path computes the stored blocks (8-bit inputs in decode, and
    // in prefill on AVX-512 VNNI); the reference the same values dequantized
    // to f32.
    test::expect_prompt_close([&] { return logits_of(path, ExecPath::Fast, std::nullopt); }, ref);
    const double err = rel_err(ref, want);
    std::printf("%s factors: logits within %.2e of the f32 factors\n",
                std::string(dtype_name(c.t)).c_str(), err);
    EXPECT_LT(err, c.max_err);
    EXPECT_GT(err, c.min_err);
  }
}

// compress holds each output's factors as they will be stored until it
// writes them (as_stored_factor): 9/32 of f32's bytes in Q8_0, and the
// file the same, byte for byte, as one written from the f32 factors.
TEST(QuantizedFactors, HeldAsStoredWritesTheSameBytes) {
  TempDir t;
  const std::string dense = write_tiny(t, wide(), "dense.gguf");
  CompressOptions f;
  f.method = CompressMethod::Svd;
  f.factor_type = DType::F32;
  compress_model(dense, {{0.4, t.file("f32.gguf")}}, f);  // ranks not multiples of 32
  Model m = load_model(t.file("f32.gguf"), std::nullopt);
  for (DType want : {DType::F16, DType::BF16, DType::Q8_0, DType::Q4_K, DType::Q6_K}) {
    SCOPED_TRACE(std::string(dtype_name(want)));
    SaveOptions so;
    so.factor_type = want;
    const std::string from_f32 = t.file("a.gguf"), from_held = t.file("b.gguf");
    save_gguf(*m.weights, *m.file, GgufSource(m.file), from_f32, so);
    Weights held = *m.weights;
    uint64_t f32_bytes = 0, held_bytes = 0;
    for_each_linear(held, [&](const WeightSpec&, int, Linear& lin) {
      if (!lin.low_rank()) return;
      for (Matrix* x : {&lin.u, &lin.v}) {
        ASSERT_EQ(x->dtype, DType::F32);
        f32_bytes += x->bytes();
        *x = as_stored_factor(*x, want);
        const DType st = factor_storage_type(want, x->cols);
        EXPECT_EQ(x->dtype, st);
        // Q8_0 in memory: a byte per value and an f16 scale per 32; others as in the file.
        const uint64_t row = st == DType::Q8_0 ? uint64_t(x->cols + x->cols / 32 * 2)
                                               : *row_bytes(st, uint64_t(x->cols));
        EXPECT_EQ(x->bytes(), uint64_t(x->rows) * row);
        held_bytes += x->bytes();
      }
    });
    save_gguf(held, *m.file, GgufSource(m.file), from_held, so);
    const std::string a = test::file_bytes(from_f32), b = test::file_bytes(from_held);
    EXPECT_GT(a.size(), 10000u);
    EXPECT_TRUE(a == b) << a.size() << " vs " << b.size() << " bytes";
    EXPECT_LE(held_bytes * 2, f32_bytes);  // at most half (F16), Q8_0 and K-quant rows less
  }
}

}  // namespace
}  // namespace lr
