// The CPU backends: the fast session, the batch under a server's slots, and
// the layer runner of sequential calibration.
#pragma once

#include <memory>

#include "backend/backend.h"
#include "backend/batch.h"

namespace lr {

// The fast CPU path: AVX2 kernels, bf16 (or f32) weights, multithreaded.
std::unique_ptr<Backend> make_cpu_backend(std::shared_ptr<const Weights> w,
                                          const BackendOptions& opt);
// Hidden states through the decoder layers of `w` alone: no embedding, no
// output head. Calibration that goes layer by layer (compress --sequential)
// runs a model of one layer at a time on the states it keeps. opt.observer
// sees each layer's linear inputs as in a prompt.
class LayerRunner {
 public:
  virtual ~LayerRunner() = default;
  // x [n, dim], replaced by the last layer's output; positions 0 .. n-1 of
  // the runner's cache (n <= opt.ctx), whatever earlier calls held.
  virtual void run(float* x, int n) = 0;
};
// panels: run on the packed panels the model's other backends share
// (cpu_weights.h panels_for; embeddings beside a server), else on the rows as
// stored (calibration's one-layer models).
std::unique_ptr<LayerRunner> make_cpu_layer_runner(std::shared_ptr<const Weights> w,
                                                   const BackendOptions& opt, bool panels = false);

// The fast CPU batch: opt.ctx positions per slot, opt.n_threads threads, the
// fused per-token plan, opt.keys' cache kind per slot (opt.exec other than
// the default or an observer are refused).
std::unique_ptr<BatchBackend> make_cpu_batch_backend(std::shared_ptr<const Weights> w,
                                                     const BackendOptions& opt, int slots,
                                                     int max_step_tokens);

}  // namespace lr
