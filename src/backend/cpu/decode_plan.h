// Decode on the fast CPU path: one token through a plan of steps.
//
// A step is one parallel operation: step(tid, nth) does thread tid's share.
// The plan is built once per session from the model and the ExecOptions
// (which steps exist depends on kv mode, packing and fusion) and executed by
// the execution unit:
//   per-op     every step is one dispatch          dispatches = steps, barriers = 0
//   per-layer  one dispatch per layer (and one for the output head), a barrier
//              between consecutive steps inside it
//   per-token  one dispatch for the whole token, steps - 1 barriers
// A barrier separates two steps because the later one reads what all threads
// of the earlier one wrote. tests/model/test_decode.cpp checks the thread
// pool's counters against the counts these rules give.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/session.h"

namespace lr::cpu {

struct Step {
  std::string name;                       // "blk.3.qkv_in", "output", ...
  std::function<void(int tid, int nth)> run;
};

struct DecodePlan {
  std::vector<Step> steps;
  std::vector<size_t> region_begin;  // first step of each per-layer region (layers, then output)
};

class Decoder {
 public:
  explicit Decoder(Session& s);
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;

  ~Decoder();
  // Runs one token at position s.pos (K/V appended) and writes logits [vocab].
  void step(int32_t token, float* logits);
  const DecodePlan& plan() const { return plan_; }

 private:
  // An input vector: `v`, or rms_norm(v) * norm computed by each thread into
  // its own copy when `norm` is set (fused normalization).
  struct In {
    const float* v = nullptr;
    const Matrix* norm = nullptr;
  };
  // One matrix of a rows step: out[r] = M[r, :] in for the step's rows.
  struct Job {
    const Matrix* m;
    In in;
    float* out;
  };
  enum class Post { None, SiluMul, Residual };

  const float* resolve(const In& in, int tid);
  // The inputs of one step on one thread: each distinct In resolved once.
  struct Inputs {
    const In* last = nullptr;
    const float* value = nullptr;
    const float* get(Decoder& d, const In& in, int tid) {
      if (!last || last->v != in.v || last->norm != in.norm) value = d.resolve(in, tid);
      last = &in;
      return value;
    }
  };
  void add(std::string name, std::function<void(int, int)> fn);
  void rows_step(std::string name, std::vector<Job> jobs, Post post = Post::None);
  void norm_step(std::string name, const Matrix& w, float* out);

  void build_layer(int l);
  void build_qkv(int l, const In& x_in);
  void build_attention(int l);
  void build_mlp(int l);
  void build_output();

  Session& s_;
  DecodePlan plan_;
  // LOWRANK_PROFILE=1: every step timed on its own (one dispatch per step,
  // whatever the unit) and a table of time per kind of step printed to
  // stderr when the session ends. A development aid, not a mode.
  bool profile_ = false;
  std::vector<double> step_ns_;
  uint64_t profiled_tokens_ = 0;
  float* logits_ = nullptr;  // output of the current step()

  int nth_;
  std::vector<float> x_;          // [dim] residual stream
  std::vector<float> h_;          // [dim] normed x / block output (unfused)
  std::vector<float> local_;      // [nth, max(dim, q_dim)] per-thread normed x or merged attention
  std::vector<float> p_;          // [max over layers of all ranks] low-rank latents of one layer
  std::vector<float> q_, k_, v_;  // [q_dim], [kv_dim], [kv_dim]
  std::vector<float> att_;        // [q_dim] attention output
  std::vector<float> part_m_, part_l_, part_acc_;  // [n_heads, nth] (acc: [n_heads, nth, head_dim])
  std::vector<float> scores_;     // [n_heads, ctx] (static mode)
  std::vector<float> g_, u_;      // [ffn_dim]
};

}  // namespace lr::cpu
