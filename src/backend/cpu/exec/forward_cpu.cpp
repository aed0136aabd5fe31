// Fast CPU backend: the model's plan (model/plan.h) on f16, bf16, f32 or
// Q8_0 weights with the AVX2 kernels, split across a persistent thread pool
// (backend/cpu/executor.h). A decode step runs the rung's plan (the fused
// one in the product) for one token; prompts run the same plan unfused in
// chunks of up to cpu::kPrefillRows tokens, as matrix-matrix products.
#include <cstdlib>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/exec/cpu_weights.h"
#include "backend/cpu/exec/executor.h"
#include "backend/cpu/exec/session.h"
#include "core/error.h"
#include "model/plan_transforms.h"

namespace lr {

namespace {

bool profiling() {
  const char* p = std::getenv("LOWRANK_PROFILE");
  return p && *p && std::string(p) != "0";
}

class CpuBackend final : public Backend {
 public:
  CpuBackend(std::shared_ptr<const Weights> w, const BackendOptions& opt)
      : Backend(std::move(w), opt.ctx),
        plan_options_{Target::Cpu, !opt.keys.dense()},
        s_(*weights_, opt, check_keys(opt).kv, true, cpu::panels_for(weights_)),
        decode_(s_, derive(*weights_, plan_options_, opt.exec), 1, nullptr, profiling()),
        prefill_(s_, derive(*weights_, plan_options_, prefill_options(opt.exec)),
                 std::min(cpu::kPrefillRows, opt.ctx), opt.cpu.observer),
        observed_(opt.cpu.observer != nullptr) {}

  const char* name() const override { return "cpu"; }

  void forward(const int32_t* tokens, int n, float* logits, bool all_logits) override {
    check_forward_args(tokens, n);
    const int vocab = weights_->cfg.vocab;
    // An observer sees [n, dim] activations of every linear input: the unfused prompt plan's.
    if (n == 1 && !observed_) {
      s_.pos = n_past_;
      decode_.run(tokens, 1, cpu::Head::All, logits);
      ++n_past_;
      return;
    }
    s_.cache->begin_call(n_past_, n);
    for (int done = 0; done < n;) {
      const int m = std::min(cpu::kPrefillRows, n - done);
      s_.pos = n_past_;
      const bool last = done + m == n;
      prefill_.run(tokens + done, m,
                   all_logits ? cpu::Head::All
                   : last     ? cpu::Head::Last
                              : cpu::Head::None,
                   all_logits ? logits + size_t(done) * size_t(vocab) : logits);
      n_past_ += m;
      done += m;
    }
    s_.cache->end_call(s_.pool);
  }

  ExecCounters counters() const override { return {s_.pool.dispatches(), s_.pool.barriers()}; }
  void reset_counters() override { s_.pool.reset_counters(); }
  uint64_t cache_bytes() const override { return s_.cache_bytes(); }
  kv::KeyCacheStats key_stats() const override { return s_.cache->key_stats(); }

 private:
  void on_rewind(int n) override { s_.cache->truncate(n); }
  int can_rewind(int n) const override { return s_.cache->rewindable(n_past_, n); }
  static const ExecOptions& check_keys(const BackendOptions& opt) {
    if (!opt.keys.dense() && opt.exec.kv != KvMode::Dense)
      fail(
          "--cache-type-k {} --cache-type-v {} run with --kv dense (the typed cache replaces the "
          "f32 one)",
          kv::key_type_name(opt.keys.type), kv::value_type_name(opt.keys.values()));
    return opt.exec;
  }

  PlanOptions plan_options_;
  cpu::Session s_;
  cpu::Executor decode_, prefill_;
  bool observed_;
};

class CpuLayerRunner final : public LayerRunner {
 public:
  CpuLayerRunner(std::shared_ptr<const Weights> w, const BackendOptions& opt, bool panels)
      : w_(std::move(w)),
        ctx_(opt.ctx),
        s_(*w_, opt, KvMode::Dense, true, panels ? cpu::panels_for(w_) : nullptr),
        ex_(s_, derive(*w_, {Target::Cpu}, prefill_options({})),
            std::min(cpu::kPrefillRows, opt.ctx), opt.cpu.observer) {}

  void run(float* x, int n) override {
    if (n < 1 || n > ctx_) fail("layer runner: {} tokens for a cache of {}", n, ctx_);
    const int64_t dim = w_->cfg.dim;
    for (int done = 0; done < n;) {
      const int m = std::min(cpu::kPrefillRows, n - done);
      s_.pos = done;
      ex_.run_hidden(x + int64_t(done) * dim, m);
      done += m;
    }
  }

 private:
  std::shared_ptr<const Weights> w_;
  int ctx_;
  cpu::Session s_;
  cpu::Executor ex_;
};

}  // namespace

std::unique_ptr<LayerRunner> make_cpu_layer_runner(std::shared_ptr<const Weights> w,
                                                   const BackendOptions& opt, bool panels) {
  return std::make_unique<CpuLayerRunner>(std::move(w), opt, panels);
}

std::unique_ptr<Backend> make_cpu_backend(std::shared_ptr<const Weights> w,
                                          const BackendOptions& opt) {
  return std::make_unique<CpuBackend>(std::move(w), opt);
}

}  // namespace lr
