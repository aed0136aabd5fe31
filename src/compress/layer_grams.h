// The calibration Grams of a pass of layers: what one pass over the
// calibration text keeps, and how many layers a pass may hold in memory.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "compress/compress_model.h"
#include "compress/gram.h"
#include "core/error.h"
#include "runtime/model.h"

namespace lr::compress {

// Accumulates the Grams of the inputs of layers [l0, l1), every site, during
// one calibration pass; other layers' activations are ignored.
class GramObserver final : public ActivationObserver {
 public:
  GramObserver(const Config& c, int l0, int l1) : l0_(l0), l1_(l1) {
    for (int l = l0; l < l1; ++l) {
      grams_.emplace_back();
      auto& g = grams_.back();
      g.emplace_back(c.dim);
      g.emplace_back(c.q_dim());
      g.emplace_back(c.dim);
      g.emplace_back(c.ffn_dim);
    }
  }
  void observe(int layer, Site site, const float* X, int n, int dim) override {
    if (site == Site::Keys || site == Site::Queries) return;  // not inputs of linear maps
    if (layer < l0_ || layer >= l1_) return;
    GramAccumulator& g = grams_[size_t(layer - l0_)][size_t(site)];
    LR_ASSERT(g.n() == dim);
    g.add(X, n);
  }
  int last_layer() const override { return l1_ - 1; }
  const MatD& gram(int layer, Site site) const {
    LR_ASSERT(layer >= l0_ && layer < l1_);
    return grams_[size_t(layer - l0_)][size_t(site)].gram();
  }

 private:
  int l0_, l1_;
  std::vector<std::vector<GramAccumulator>> grams_;  // [layer - l0][site]
};

// Bytes of the Grams one layer's calibration keeps (four sites, double).
uint64_t gram_bytes_per_layer(const Config& c);

// Layers whose Grams one calibration pass collects: as many as the budget
// holds (opt.calib_memory, or half the available memory), at least one, and
// whole basis-sharing groups.
int layers_per_pass(const Config& c, const CompressOptions& opt);

// One calibration pass over the dense model, keeping the Grams of layers [l0, l1).
std::unique_ptr<GramObserver> calibrate(const Model& m, const CompressOptions& opt, int l0, int l1,
                                        int64_t* tokens_used, const CompressProgress& progress);

}  // namespace lr::compress
