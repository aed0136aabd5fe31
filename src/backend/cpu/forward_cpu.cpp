// Fast CPU backend: the same model as backend/ref/forward_ref.cpp on f16,
// bf16 or f32 weights with the AVX2 kernels, split across a persistent thread
// pool. Prompts run through Prefill (matrix-matrix products, in chunks);
// single tokens through the Decoder's plan (decode_plan.h), executed per op,
// per layer or per token as BackendOptions::exec says.
#include <memory>

#include "backend/backend.h"
#include "backend/cpu/decode_plan.h"
#include "backend/cpu/prefill_cpu.h"
#include "backend/cpu/session.h"

namespace lr {

namespace {

class CpuBackend final : public Backend {
 public:
  CpuBackend(std::shared_ptr<const Weights> w, const BackendOptions& opt)
      : Backend(std::move(w), opt.ctx),
        s_(*weights_, opt),
        prefill_(s_, opt.observer),
        decoder_(s_),
        observed_(opt.observer != nullptr) {}

  const char* name() const override { return "cpu"; }

  void forward(const int32_t* tokens, int n, float* logits, bool all_logits) override {
    check_forward_args(tokens, n);
    const int vocab = weights_->cfg.vocab;
    // An observer sees [n, dim] activations of every linear input: prefill's.
    if (n == 1 && !observed_) {
      s_.pos = n_past_;
      decoder_.step(tokens[0], logits);
      ++n_past_;
      return;
    }
    s_.begin_call(n_past_, n);
    for (int done = 0; done < n; done += prefill_.max_batch()) {
      int m = std::min(prefill_.max_batch(), n - done);
      s_.pos = n_past_;
      prefill_.run(tokens + done, m);
      if (all_logits) {
        prefill_.logits(0, m, logits + size_t(done) * size_t(vocab));
      } else if (done + m == n) {
        prefill_.logits(m - 1, 1, logits);
      }
      n_past_ += m;
    }
    s_.end_call();
  }

  ExecCounters counters() const override { return {s_.pool.dispatches(), s_.pool.barriers()}; }
  void reset_counters() override { s_.pool.reset_counters(); }
  uint64_t cache_bytes() const override { return s_.kv.bytes(); }
  KeyCacheStats key_stats() const override { return s_.key_stats(); }

 private:
  void on_rewind(int n) override { s_.truncate(n); }

  cpu::Session s_;
  cpu::Prefill prefill_;
  cpu::Decoder decoder_;
  bool observed_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(std::shared_ptr<const Weights> w,
                                          const BackendOptions& opt) {
  return std::make_unique<CpuBackend>(std::move(w), opt);
}

}  // namespace lr
