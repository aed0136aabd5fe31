#include "compress/layer_grams.h"

#include <algorithm>
#include <fstream>

#include "compress/calibration.h"
#include "core/system_memory.h"

namespace lr::compress {

// Bytes of the Grams one layer's calibration keeps (four sites, double).
uint64_t gram_bytes_per_layer(const Config& c) {
  auto sq = [](int64_t n) { return uint64_t(n) * uint64_t(n) * sizeof(double); };
  return 2 * sq(c.dim) + sq(c.q_dim()) + sq(c.ffn_dim);
}

// Layers whose Grams one calibration pass collects: as many as the budget
// holds (opt.calib_memory, or half the available memory), at least one, and
// whole basis-sharing groups.
int layers_per_pass(const Config& c, const CompressOptions& opt) {
  const uint64_t budget = opt.calib_memory > 0 ? opt.calib_memory : available_memory_bytes() / 2;
  const uint64_t fit = budget / gram_bytes_per_layer(c);
  if (fit >= uint64_t(c.n_layers)) return c.n_layers;
  const int g = std::max(1, opt.basis_sharing);
  return std::min(c.n_layers, std::max(g, int(fit) / g * g));
}

// One calibration pass over the dense model, keeping the Grams of layers [l0, l1).
std::unique_ptr<GramObserver> calibrate(const Model& m, const CompressOptions& opt, int l0, int l1,
                                        int64_t* tokens_used, const CompressProgress& progress) {
  auto obs = std::make_unique<GramObserver>(m.weights->cfg, l0, l1);
  const std::string phase = l1 - l0 == m.weights->cfg.n_layers
                                ? std::string("calibrating")
                                : fmt::format("calibrating layers {}-{}", l0, l1 - 1);
  *tokens_used =
      run_calibration(m, {opt.calib_path, opt.calib_samples, opt.calib_len, opt.n_threads},
                      obs.get(), phase, progress);
  return obs;
}

}  // namespace lr::compress
