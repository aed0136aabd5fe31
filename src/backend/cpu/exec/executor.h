// The fast CPU executor of a plan (model/plan.h): every step becomes a
// parallel operation, fn(tid, nth) doing thread tid's share, run by the
// plan's unit:
//   per-op     every step is one dispatch          dispatches = steps, barriers = 0
//   per-layer  one dispatch per region (a layer, then the output head), a
//              barrier between consecutive steps inside it
//   per-token  one dispatch for the whole step, steps - 1 barriers
// A barrier separates two steps because the later one reads what all
// threads of the earlier one wrote. The embedding (a row copy per token)
// runs on the calling thread before the first region and is not counted.
// tests/model/test_decode.cpp checks the thread pool's counters against the
// counts these rules give.
//
// The executor knows what each kind of step computes, not what the model
// means: buffers, products and their folded inputs and outputs, attention
// over the session's cache. One executor runs one plan for up to max_tokens
// tokens per call; a session has one for decode steps (one token, attention
// split across the threads) and one for prompts (unfused; attention in
// tiles of rows, attention_kernels.h attend_causal).
//
// A server's step (backend/batch.h) runs one executor over the rows of
// several sequences at once (run_rows): row t is a token of the sequence
// whose cache is caches[t], at position pos[t]. Such an executor is made
// with Rows::AsDecode (below), so a row's bits do not depend on what else
// the call holds.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backend/cpu/exec/session.h"
#include "model/plan.h"

namespace lr::cpu {

// Which tokens of a call the output head runs on.
enum class Head { All, Last, None };

// How the rows of a call are computed. Matrix: prompts, the matrix-matrix
// kernels (f32 inputs) and one attention chunk per token. AsDecode (batch
// invariance): the first rows of a call, generated tokens fed back, as a
// one-token decode step computes them; the rest, prompt tokens, through the
// register tiles for any number of tokens (kernels.h MatmulPath::Tiles);
// attention of the generated rows in the decode split, of the prompt rows
// in one chunk each, in tiles that give each row its own bits.
enum class Rows { Matrix, AsDecode };

class Executor {
 public:
  // observer: sees the activations of the steps the plan marks (then every
  // step is its own dispatch). profile: LOWRANK_PROFILE, see below.
  Executor(Session& s, Plan plan, int max_tokens, ActivationObserver* observer = nullptr,
           bool profile = false, Rows rows = Rows::Matrix);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Runs tokens[0, n) at positions s.pos .. s.pos + n - 1 (n <= max_tokens).
  // Logits [n, vocab] (Head::All) or the last token's [vocab] (Head::Last).
  void run(const int32_t* tokens, int n, Head head, float* logits);
  // Rows of several sequences: tokens[t] at position pos[t] of the cache
  // caches[t] (each sequence's rows consecutive, in position order; every
  // cache of one kind); the first n_generated rows are generated tokens
  // (Rows::AsDecode). The output head runs on rows head_rows[0, n_head)
  // (ascending) and writes their logits [n_head, vocab]. A dense-KV plan.
  void run_rows(const int32_t* tokens, const int* pos, SeqCache* const* caches, int n,
                int n_generated, const int* head_rows, int n_head, float* logits);
  // Hidden states x [n, dim] (in and out) through the plan's layers alone: no
  // embedding, no head, positions s.pos .. s.pos + n - 1 (calibration).
  void run_hidden(float* x, int n);
  const Plan& plan() const { return plan_; }

 private:
  using Fn = std::function<void(int tid, int nth)>;
  struct Compiled {
    const Step* step;
    Fn fn;
    bool head;  // the output head (skipped with Head::None)
  };

  // The step's compiled form, one per kind of step (executor.cpp; products in
  // exec_linear.cpp, the research rungs' steps in exec_rungs.cpp).
  Fn compile(const Step& s);
  Fn linear(const Step& s);
  Fn rms_norm(const Step& s);
  Fn head_norm(const Step& s);
  void embed(int32_t token, int t);
  Fn elementwise(const Step& s);
  Fn rope(const Step& s);
  Fn append(const Step& s);
  Fn attend(const Step& s);
  Fn merge(const Step& s);
  void attend_tiles(const Step& s, int first, int tid, int nth);
  Fn static_attention(const Step& s);
  Fn latent(const Step& s);
  // A Linear step's parts (exec_linear.cpp).
  const float* linear_input(const Job& j, const Step& s, int tid, int64_t& ldx);
  void product_rows(const Step& s, const Matrix& m, const Panels& P, const float* x, int64_t ldx,
                    float* y0, int64_t ldy, int64_t r0, int64_t r1);
  void sliced_product(const Step& s, const Job& j, const Panels& P, int tid, const float* x,
                      int64_t ldx, float* y0, int64_t ldy, int64_t r0, int64_t r1);
  void finish_rows(const Step& s, const Job& j, Buf to, int64_t r0, int64_t r1);
  // The steps from the first of the output head on, as one dispatch or one per step.
  void execute(Head head);
  // Rows head_rows_ of X moved to the first rows (calling thread; before the head).
  void gather_head_rows();
  // Rows of step s computed as decode steps (run_rows' generated rows).
  int decoded(const Step& s) const { return is_head(s) ? head_generated_ : generated_; }
  // The panels of a matrix of the plan (none without a table).
  Panels panels_of(const Matrix& m) const { return s_.panels ? s_.panels->of(m) : Panels{}; }
  // Position and cache of row t of the call.
  int pos(int t) const { return pos_[size_t(t)]; }
  SeqCache& cache(int t) const { return *cache_[size_t(t)]; }
  // Rows [first, first + count) of the call and the sequence they belong to
  // (consecutive rows of one cache), for caches that append runs of tokens.
  struct Run {
    int first, count;
  };
  void find_runs();

  // Activation row t of buffer b (Logits: the caller's, from the head's first row).
  float* row(Buf b, int t) {
    if (b == Buf::Logits) return logits_ + int64_t(t - head_first_) * width_[size_t(b)];
    return buf_[size_t(b)].data() + int64_t(t) * width_[size_t(b)];
  }
  int64_t width(Buf b) const { return width_[size_t(b)]; }
  // Rows of this call a step runs on: [first, first + count).
  int first(const Step& s) const { return is_head(s) ? head_first_ : 0; }
  int count(const Step& s) const { return is_head(s) ? head_count_ : n_; }
  static bool is_head(const Step& s) { return s.layer < 0 && s.op != Op::Embed; }
  // This thread's scratch for a product's folded input, [max_tokens, local_floats_].
  float* local(int tid) {
    return &local_[size_t(tid) * size_t(local_floats_) * size_t(max_tokens_)];
  }
  // This thread's scratch for a slice of a summed or pivoted product:
  // sum_floats_ floats, at least kSumRows rows of max_tokens tokens and at
  // least the widest such product's rows (a decode step's share in one slice).
  static constexpr int64_t kSumRows = 64;
  float* sum_scratch(int tid) { return &sum_[size_t(tid) * size_t(sum_floats_)]; }
  // Rows of a slice for n tokens: as many as the scratch holds.
  // (a multiple of 16, so slices of a matrix in panels keep their panels)
  int64_t sum_rows(int n) const { return sum_floats_ / n / 16 * 16; }
  // Attention partials of token t, chunk c, query head h (m, l; acc [head_dim]).
  size_t part(int t, int c, int h) const {
    return (size_t(t) * size_t(chunks_) + size_t(c)) * size_t(s_.c.n_heads) + size_t(h);
  }
  // The attention partials of `count` tokens merged into out [count, q_dim] (row stride ld).
  void merge_rows(int first, int count, float* out, int64_t ld) const;
  void observe(const Step& s, int n);

  Session& s_;
  Plan plan_;
  int max_tokens_;
  ActivationObserver* observer_;
  Rows rows_;
  std::vector<Compiled> steps_;
  size_t first_head_ = 0;  // index in steps_ of the output head's first step
  // LOWRANK_PROFILE=1 (decode only): every step timed on its own (one
  // dispatch per step, whatever the unit) and a table of time per kind of
  // step printed to stderr when the session ends. A development aid, not a mode.
  bool profile_ = false;
  std::vector<double> step_ns_;
  uint64_t profiled_calls_ = 0;

  // The call being run.
  int n_ = 0, head_first_ = 0, head_count_ = 0;
  float* logits_ = nullptr;
  std::vector<int> pos_;                 // [max_tokens]
  std::vector<SeqCache*> cache_;         // [max_tokens]
  std::vector<Run> runs_;                // the call's runs of rows of one cache
  std::vector<int> head_rows_;           // run_rows: the rows the head runs on (else empty)
  int generated_ = 0, head_generated_ = 0;  // run_rows: generated rows first, of the call and of the head's

  std::vector<float> buf_[size_t(Buf::Logits) + 1];  // [max_tokens, width] each
  int64_t width_[size_t(Buf::Logits) + 1] = {};
  int chunks_ = 1;  // split-K attention chunks per (token, KV head)
  std::vector<float> part_m_, part_l_,
      part_acc_;               // [max_tokens, chunks, n_heads] (acc: x head_dim)
  int64_t local_floats_ = 0;   // per token of a thread's folded-input scratch
  std::vector<float> local_;   // [nth, max_tokens, local_floats_]
  std::vector<float> sum_;     // [nth, sum_floats_] when a job sums or is pivoted, else empty
  int64_t sum_floats_ = 0;
  std::vector<float> scores_;  // static KV: [n_heads, ctx]
};

}  // namespace lr::cpu
