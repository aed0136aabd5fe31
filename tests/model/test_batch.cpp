// The batch of several sequences (backend/batch.h): every chunking of every
// mix of sequences gives the bits of each sequence alone, a token at a time,
// and those are the single-sequence backend's logits within rounding; the
// per-row decode kernel is matvec's bits; a step is one dispatch; bad steps
// are refused.
#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <random>

#include "../batch_runner.h"
#include "../error_of.h"
#include "../kernels/isa_util.h"
#include "../kernels/random_blocks.h"
#include "backend/batch.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/exec/cpu_weights.h"
#include "backend/cpu/kernels/dispatch.h"
#include "backend/cpu/kernels/panels.h"
#include "compress/compress_model.h"
#include "model_test_util.h"
#include "runtime/model.h"
#include "runtime/session.h"

namespace lr {
namespace {

using Logits = std::vector<float>;

test::TinySpec spec() {
  test::TinySpec s;
  s.tokenizer = true;  // a vocabulary of 259
  return s;
}

// Row-by-row products equal matvec's on every weight type and instruction
// set, however the rows are split (the decode split is in units of 8) and
// wherever a view of them starts.
TEST(Batch, MatvecRowsIsMatvecPerRow) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int64_t rows = 72, cols = 256, n = 5;  // 72: a block of 64 and a short one
  std::vector<float> X(size_t(n * cols));
  for (float& x : X) x = nd(rng);
  for (DType t :
       {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0,
        DType::Q5_1, DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    SCOPED_TRACE(dtype_name(t));
    Matrix W = Matrix::allocate(t, rows, cols);
    if (is_block_format(t)) {
      const auto bytes = test::random_rows(t, rows, cols, 9);
      std::memcpy(W.data.get(), bytes.data(), bytes.size());
    } else {
      std::vector<float> r(static_cast<size_t>(cols));
      for (int64_t i = 0; i < rows; ++i) {
        for (float& x : r) x = nd(rng);
        W.set_row(i, r.data());
      }
    }
    for (Isa isa : test::supported_isas()) {
      test::IsaScope scope(isa);
      std::vector<float> want(size_t(n * rows)), got(want.size(), -1.f), split(want.size(), -1.f);
      for (int64_t k = 0; k < n; ++k)
        cpu::matvec(W, {}, &X[size_t(k * cols)], &want[size_t(k * rows)], 0, rows);
      cpu::matvec_rows(W, {}, X.data(), cols, got.data(), rows, n, 0, rows);
      cpu::matvec_rows(W, {}, X.data(), cols, split.data(), rows, n, 0, 24);
      cpu::matvec_rows(W, {}, X.data(), cols, split.data(), rows, n, 24, rows);
      EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0) << isa_name(isa);
      EXPECT_EQ(std::memcmp(split.data(), want.data(), want.size() * 4), 0) << isa_name(isa);
      // Views that start at any row (a pivoted map's slices of U): each
      // row's product is the same, whichever rows it is grouped with.
      for (int64_t a : {1, 3, 5, 6, 70}) {
        std::vector<float> y(size_t(rows - a), -1.f);
        cpu::matvec(W.rows_view(a, rows - a), {}, X.data(), y.data(), 0, rows - a);
        EXPECT_EQ(std::memcmp(y.data(), &want[size_t(a)], y.size() * 4), 0)
            << isa_name(isa) << " from row " << a;
      }
    }
  }
}

// The same from any row for rows with a tail (100 values: not whole
// vectors nor Q8_0 blocks), where a row's tail is summed apart.
TEST(Batch, ARowsProductDoesNotDependOnWhereItsViewStarts) {
  std::mt19937 rng(4);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int64_t rows = 24, cols = 100;
  std::vector<float> x(static_cast<size_t>(cols)), r(x.size());
  for (float& v : x) v = nd(rng);
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0}) {
    SCOPED_TRACE(dtype_name(t));
    Matrix W = Matrix::allocate(t, rows, cols);
    for (int64_t i = 0; i < rows; ++i) {
      for (float& v : r) v = nd(rng);
      W.set_row(i, r.data());
    }
    for (Isa isa : test::supported_isas()) {
      test::IsaScope scope(isa);
      std::vector<float> want(static_cast<size_t>(rows));
      cpu::matvec(W, {}, x.data(), want.data(), 0, rows);
      for (int64_t a : {1, 2, 3, 5}) {
        std::vector<float> y(size_t(rows - a), -1.f);
        cpu::matvec(W.rows_view(a, rows - a), {}, x.data(), y.data(), 0, rows - a);
        EXPECT_EQ(std::memcmp(y.data(), &want[size_t(a)], y.size() * 4), 0)
            << isa_name(isa) << " from row " << a;
      }
    }
  }
}

// Q4_K and Q6_K matrices with panels (backend/cpu/kernels/panels.h): matvec and
// matvec_rows take them, with the panel twin's bits for every row and input;
// panels_for makes them for the CPU backends where rows fit.
TEST(Batch, PanelMatricesDecodeFromTheirPanels) {
  std::mt19937 rng(4);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int64_t rows = 80, cols = 512, n = 6;
  std::vector<float> X(size_t(n * cols));
  for (float& x : X) x = nd(rng);
  for (DType t : {DType::Q4_K, DType::Q6_K}) {
    SCOPED_TRACE(dtype_name(t));
    Matrix W = Matrix::allocate(t, rows, cols);
    const auto bytes = test::random_rows(t, rows, cols, 5);
    std::memcpy(W.data.get(), bytes.data(), bytes.size());
    const auto panels = cpu::repack_panels(t, W.ptr(), W.row_bytes(), rows, cols);
    const cpu::Panels P{panels.get(), cpu::panel_bytes(t, 16, cols)};
    for (Isa isa : test::supported_isas()) {
      test::IsaScope scope(isa);
      std::vector<float> want(size_t(n * rows)), one(want.size()), got(want.size(), -1.f);
      for (int64_t k = 0; k < n; ++k) {
        cpu::matvec_panel_twin(t, W.ptr(), W.row_bytes(), &X[size_t(k * cols)],
                               &want[size_t(k * rows)], cols, 0, rows);
        cpu::matvec(W, P, &X[size_t(k * cols)], &one[size_t(k * rows)], 0, 32);
        cpu::matvec(W, P, &X[size_t(k * cols)], &one[size_t(k * rows)], 32, rows);
      }
      cpu::matvec_rows(W, P, X.data(), cols, got.data(), rows, n, 0, 48);
      cpu::matvec_rows(W, P, X.data(), cols, got.data(), rows, n, 48, rows);
      EXPECT_EQ(std::memcmp(one.data(), want.data(), want.size() * 4), 0) << isa_name(isa);
      EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0) << isa_name(isa);
    }
  }
  test::TempDir tmp;
  test::TinySpec s = spec();
  s.wtype = DType::Q4_K;
  s.dim = 256;
  s.ffn_dim = 512;
  const Model m = load_model(test::write_tiny(tmp, s, "m.gguf"), std::nullopt);
  auto table = cpu::panels_for(m.weights);
  EXPECT_EQ(cpu::panels_for(m.weights).get(),
            table.get());  // one set of panels per model while it lives
  for (const Layer& l : m.weights->layers) {
    EXPECT_EQ(table->of(l.gate.w).stride, cpu::kPanelBytesQ4K);      // rows of 256
    EXPECT_EQ(table->of(l.down.w).stride, 2 * cpu::kPanelBytesQ4K);  // rows of 512
  }
  EXPECT_FALSE(table->of(Matrix()));  // a matrix not of these weights has none
  const cpu::PanelTable* first = table.get();
  table.reset();                                       // no backend holds the table now
  EXPECT_EQ(cpu::panels_for(m.weights).get(), first);  // kept while the model lives
}

// The panels of a view of rows are their part of the matrix's where the
// view starts and ends at a panel's edge; elsewhere a view computes from
// the rows as stored.
TEST(Batch, RowViewsKeepTheirPanels) {
  const int64_t rows = 64, cols = 256;
  Matrix W = Matrix::allocate(DType::Q4_K, rows, cols);
  const auto bytes = test::random_rows(DType::Q4_K, rows, cols, 6);
  std::memcpy(W.data.get(), bytes.data(), bytes.size());
  const auto panels = cpu::repack_panels(DType::Q4_K, W.ptr(), W.row_bytes(), rows, cols);
  const cpu::Panels P{panels.get(), cpu::panel_bytes(DType::Q4_K, 16, cols)};
  EXPECT_EQ(P.stride, cpu::kPanelBytesQ4K);
  EXPECT_EQ(P.rows(32, 32).data, P.data + 2 * cpu::kPanelBytesQ4K);
  EXPECT_EQ(P.rows(16, 16).stride, P.stride);
  EXPECT_FALSE(P.rows(8, 16));
  EXPECT_FALSE(P.rows(16, 8));
  std::vector<float> x(static_cast<size_t>(cols)), want(static_cast<size_t>(rows)),
      got(want.size(), -1.f);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (float& v : x) v = nd(rng);
  cpu::matvec_panel_twin(DType::Q4_K, W.ptr(), W.row_bytes(), x.data(), want.data(), cols, 0, rows);
  cpu::matvec(W.rows_view(32, 32), P.rows(32, 32), x.data(), got.data() + 32, 0, 32);
  cpu::matvec(W.rows_view(0, 32), P.rows(0, 32), x.data(), got.data(), 0, 32);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0);
}

using test::AllLogits;
using test::expect_same_bits;
using test::Seq;

std::vector<Seq> random_seqs(int vocab, std::vector<std::pair<int, int>> lengths, uint64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::vector<Seq> out;
  for (auto [prompt, generated] : lengths) {
    Seq s;
    s.prompt = prompt;
    s.tokens.resize(static_cast<size_t>(prompt + generated));
    for (auto& x : s.tokens) x = int32_t(rng() % uint32_t(vocab));
    out.push_back(s);
  }
  return out;
}

// Every sequence in one CPU batch of `threads` threads (test::run_batch).
AllLogits run_batched(const Model& m, const std::vector<Seq>& seqs, int threads, bool together,
                      int most, uint64_t seed, int verify = 1) {
  BackendOptions o;
  o.ctx = 64;
  o.cpu.n_threads = threads;
  auto batch = make_cpu_batch_backend(m.weights, o, int(seqs.size()), 32);
  return test::run_batch(*batch, seqs, together, most, seed, verify);
}

// `tol`: how far the single-sequence backend's logits may be from the
// batch's (relative): their products sum in other orders (a prompt at once
// against a token per step).
void expect_invariant(const Model& m, double tol = 2e-3) {
  const int vocab = m.weights->cfg.vocab;
  const auto seqs = random_seqs(vocab, {{11, 5}, {3, 4}, {17, 2}}, 5);
  for (int threads : {1, 2}) {
    SCOPED_TRACE(threads);
    // Alone, a prompt token per step: the logits after every position.
    const AllLogits want = run_batched(m, seqs, threads, /*together=*/false, 1, 0);
    expect_same_bits(run_batched(m, seqs, threads, /*together=*/true, 4, 1), want);
    expect_same_bits(run_batched(m, seqs, threads, true, 9, 2), want);
    expect_same_bits(run_batched(m, seqs, threads, /*together=*/false, 7, 3), want);
    expect_same_bits(run_batched(m, seqs, threads, true, 32, 4), want);
    // Generated tokens verified up to 4 at a time (speculative decoding's
    // chunks, every token's logits): the bits of one token a step.
    expect_same_bits(run_batched(m, seqs, threads, true, 9, 6, /*verify=*/4), want);
    // And they are the model's: the single-sequence backend (the prompt at once, then a token at a
    // time).
    BackendOptions o;
    o.ctx = 64;
    o.cpu.n_threads = threads;
    for (size_t i = 0; i < seqs.size(); ++i) {
      auto b = make_session(m, ExecPath::Fast, o);
      const Seq& q = seqs[i];
      std::vector<float> l(size_t(q.prompt) * size_t(vocab));
      b->forward(q.tokens.data(), q.prompt, l.data(), true);
      for (int p = 0; p < int(q.tokens.size()); ++p) {
        Logits one(l.begin() + std::min(p, q.prompt - 1) * vocab,
                   l.begin() + std::min(p + 1, q.prompt) * vocab);
        if (p >= q.prompt) b->forward(&q.tokens[size_t(p)], 1, one.data(), false);
        EXPECT_LT(test::rel_err(want[i][size_t(p)], one), tol)
            << "sequence " << i << " at position " << p;
      }
    }
  }
}

// The tiny model stored as `wtype` (dim 256 for the K-quants' rows of 256), as stored.
void expect_invariant(DType wtype, int dim) {
  SCOPED_TRACE(dtype_name(wtype));
  test::TempDir t;
  test::TinySpec s = spec();
  s.wtype = wtype;
  s.dim = dim;
  s.ffn_dim = 2 * dim;
  expect_invariant(load_model(test::write_tiny(t, s, "m.gguf"), std::nullopt));
}

// Low-rank maps decode from panels too: the input factors (and the packed
// q/k/v and gate/up stacks they are views of), the output factors whose
// rank fits a block, a residual form's quantized part; a pivoted map's U
// stays as stored (its slices start at any row).
TEST(Batch, FactorsInBlockFormatsDecodeFromPanels) {
  test::TempDir t;
  const std::string dense = test::write_tiny(t, test::k_quant_spec(), "dense.gguf");
  CompressOptions o;
  o.method = CompressMethod::Svd;
  o.factor_type = DType::Q4_K;
  compress_model(dense, {{0.5, t.file("lr.gguf")}}, o);
  const Model m = load_model(t.file("lr.gguf"), std::nullopt);
  auto table = cpu::panels_for(m.weights);
  auto panels_of = [&](const std::shared_ptr<const Weights>& w) { table = cpu::panels_for(w); };
  auto has_panels = [&](const Matrix& x) {
    return table->of(x) && table->of(x).stride == cpu::panel_bytes(x.dtype, 16, x.cols);
  };
  // A part of a stack: the stack's panels from the part's first row on.
  auto part_of = [&](const Matrix& part, const Matrix& stack, int64_t row) {
    return table->of(part).data ==
           table->of(stack).data + uint64_t(row / 16) * table->of(stack).stride;
  };
  for (const Layer& l : m.weights->layers) {
    EXPECT_TRUE(has_panels(l.qkv_in) && has_panels(l.gate_up_in));
    EXPECT_TRUE(part_of(l.q.v, l.qkv_in, 0));
    EXPECT_TRUE(part_of(l.k.v, l.qkv_in, l.q.rank()));
    EXPECT_TRUE(part_of(l.v.v, l.qkv_in, l.q.rank() + l.k.rank()));
    EXPECT_TRUE(part_of(l.up.v, l.gate_up_in, l.gate.rank()));
    for (const Linear* x : {&l.o, &l.down}) EXPECT_TRUE(has_panels(x->v));
    for (const Linear* x : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down})
      EXPECT_EQ(has_panels(x->u), cpu::panels_fit(x->u.dtype, x->u.rows, x->u.cols));
  }
  {
    SCOPED_TRACE("low rank");
    expect_invariant(m);
  }
  o.residual = DType::Q4_K;
  o.factor_type = DType::Q8_0;
  compress_model(dense, {{0.1, t.file("res.gguf")}}, o);
  const Model r = load_model(t.file("res.gguf"), std::nullopt);
  panels_of(r.weights);
  for (const Layer& l : r.weights->layers)
    for (const Linear* x : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down}) {
      ASSERT_TRUE(x->residual());
      EXPECT_TRUE(has_panels(x->w));
      EXPECT_EQ(has_panels(x->v), cpu::panels_fit(x->v.dtype, x->v.rows, x->v.cols));
    }
  {
    // The batch's and the single backend's logits each lie 0.4-2.3% from
    // the f32 reference's on this random model (int8 inputs to Q4_K, Q8_0's
    // products in other orders), up to 0.9% from each other.
    SCOPED_TRACE("residual");
    expect_invariant(r, 1.5e-2);
  }
  o.residual = std::nullopt;
  o.factor_type = DType::Q4_K;
  o.pivoted = true;
  compress_model(dense, {{0.5, t.file("piv.gguf")}}, o);
  const Model p = load_model(t.file("piv.gguf"), std::nullopt);
  panels_of(p.weights);
  for (const Layer& l : p.weights->layers)
    for (const Linear* x : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down}) {
      ASSERT_TRUE(x->pivoted());
      EXPECT_FALSE(table->of(x->u));
    }
  for (Isa isa : test::supported_isas()) {  // the Q8_0 rows of U in slices from any row
    test::IsaScope scope(isa);
    SCOPED_TRACE(std::string("pivoted ") + isa_name(isa));
    expect_invariant(p, 1.5e-2);
  }
}

TEST(Batch, EveryChunkingGivesTheOneTokenBitsF16) {
  expect_invariant(DType::F16, 64);
}

TEST(Batch, EveryChunkingGivesTheOneTokenBitsBlockFormats) {
  expect_invariant(DType::Q4_0, 64);
  expect_invariant(DType::Q4_K, 256);
  expect_invariant(DType::Q6_K, 256);
}

TEST(Batch, EveryChunkingGivesTheOneTokenBitsLowRankWithBiases) {
  test::TempDir t;
  const std::string lr = test::write_synth(t, 0.5);
  expect_invariant(load_model(test::as_qwen2(t, lr, "qwen2-lr.gguf"), std::nullopt));
}

// Pivoted factors (an output side scattered among its latents, computed in
// slices that start at any row of U), and the residual form pivoted.
TEST(Batch, EveryChunkingGivesTheOneTokenBitsPivoted) {
  test::TempDir t;
  const std::string dense = test::write_tiny(t, spec(), "dense.gguf");
  CompressOptions o;
  o.method = CompressMethod::Svd;
  o.pivoted = true;
  for (DType factors : {DType::F16, DType::Q8_0}) {
    SCOPED_TRACE(dtype_name(factors));
    o.factor_type = factors;
    compress_model(dense, {{0.4, t.file("piv.gguf")}}, o);
    expect_invariant(load_model(t.file("piv.gguf"), std::nullopt));
  }
  o.residual = DType::Q4_0;
  compress_model(dense, {{0.2, t.file("res.gguf")}}, o);
  expect_invariant(load_model(t.file("res.gguf"), std::nullopt));
}

// A step is one dispatch of the fused per-token plan: its steps less one
// barriers, and one more where the head's rows are moved together first.
TEST(Batch, AStepIsOneDispatch) {
  test::TempDir t;
  Model m = load_model(test::write_tiny(t, spec(), "d.gguf"), std::nullopt);  // 2 layers
  BackendOptions o;
  o.ctx = 32;
  o.cpu.n_threads = 2;
  auto b = make_cpu_batch_backend(m.weights, o, 3, 16);
  const std::vector<int32_t> a = {1, 2, 3, 4}, c = {5};
  std::vector<float> logits(3 * size_t(m.weights->cfg.vocab));
  b->step({{0, a.data(), 4, true}, {1, c.data(), 1, true}}, logits.data());
  // qkv, attend, o, gate_up, down per layer and the output head: 11 steps.
  EXPECT_EQ(b->last_step().tokens, 5);
  EXPECT_EQ(b->last_step().dispatches, 1u);
  EXPECT_EQ(b->last_step().barriers, 11u);  // 10, and the gather of rows 3 and 4
  b->step({{2, c.data(), 1, true}}, logits.data());
  EXPECT_EQ(b->last_step().dispatches, 1u);
  EXPECT_EQ(b->last_step().barriers, 10u);  // the head's row is row 0 already
  b->step({{0, c.data(), 1, false}, {2, c.data(), 1, false}}, logits.data());
  EXPECT_EQ(b->last_step().barriers, 9u);  // no head
  EXPECT_EQ(b->n_past(0), 5);
  EXPECT_EQ(b->n_past(1), 1);
  EXPECT_EQ(b->n_past(2), 2);
}

TEST(Batch, BadStepsAreRefusedBeforeRunning) {
  test::TempDir t;
  Model m = load_model(test::write_tiny(t, spec(), "d.gguf"), std::nullopt);
  BackendOptions o;
  o.ctx = 8;
  auto b = make_cpu_batch_backend(m.weights, o, 2, 6);
  std::vector<float> logits(2 * size_t(m.weights->cfg.vocab));
  const std::vector<int32_t> ok = {1, 2, 3}, bad = {1, 259}, nine(9, 1);
  auto err = [&](std::vector<BatchBackend::Chunk> c) {
    return test::error_of([&] { b->step(c, logits.data()); });
  };
  EXPECT_EQ(err({}), "batch step: no chunks to run");
  EXPECT_EQ(err({{2, ok.data(), 3, true}}), "batch step: slot 2 does not exist (the batch has 2)");
  EXPECT_EQ(err({{0, ok.data(), 1, true}, {0, ok.data(), 1, true}}),
            "batch step: slot 0 appears twice");
  EXPECT_EQ(err({{1, ok.data(), 0, true}}), "batch step: slot 1 has no tokens");
  EXPECT_EQ(err({{1, bad.data(), 2, true}}),
            "slot 1: token id 259 is out of range for a vocabulary of 259");
  EXPECT_EQ(err({{0, ok.data(), 2, true}, {1, ok.data(), 1, true, true}}),
            "batch step: slot 1: a generated chunk comes before the prompt chunks");
  b->step({{0, ok.data(), 3, true}, {1, ok.data(), 3, true}}, logits.data());  // nothing ran before
  b->step({{0, ok.data(), 3, false}, {1, ok.data(), 3, false}}, logits.data());
  EXPECT_EQ(err({{0, ok.data(), 3, true}}),
            "slot 0: context is full: 6 cached + 3 new tokens exceed the slot's context 8");
  EXPECT_EQ(err({{0, nine.data(), 2, true}, {1, nine.data(), 5, true}}),
            "slot 1: context is full: 6 cached + 5 new tokens exceed the slot's context 8");
  b->rewind(1, 0);
  EXPECT_EQ(err({{0, nine.data(), 2, true}, {1, nine.data(), 5, true}}),
            "batch step: 7 tokens exceed the step's budget of 6");
  EXPECT_EQ(test::error_of([&] { b->rewind(0, 7); }),
            "cannot rewind slot 0 to 7 tokens: it holds 6");
  EXPECT_EQ(b->n_past(0), 6);
  EXPECT_EQ(b->n_past(1), 0);
  o.exec.kv = KvMode::Static;
  EXPECT_EQ(test::error_of([&] { make_cpu_batch_backend(m.weights, o, 2, 6); }),
            "a batch runs with dense KV");
}

}  // namespace
}  // namespace lr
