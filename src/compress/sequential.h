// Calibration layer by layer (compress --sequential): layer l's matrices are
// fitted to the inputs the already-compressed layers before it produce, and
// (--refit) each output-side factor is refitted in closed form against what
// the dense layer computes from its dense inputs.
//
// Two streams of hidden states run over the calibration windows: the dense
// model's, and the compressed model's so far. For layer l the dense layer
// runs on both (one layer at a time, backend.h LayerRunner); at every site
// the compressed stream's Gram G' = sum x' x'^T (what whitening uses) and the
// cross-Gram C = sum x x'^T with the dense stream's input x are kept. Then
// the dense stream moves past the dense layer, and, once the caller has
// compressed layer l, the compressed stream past the compressed one. Each
// layer costs three one-layer passes: about three calibration passes in all.
#pragma once

#include <array>
#include <memory>
#include <vector>

#include "backend/cpu/cpu.h"
#include "compress/calibration.h"
#include "compress/gram.h"
#include "linalg/linalg.h"

namespace lr::compress {
using namespace linalg;  // MatD and the LAPACK wrappers (src/linalg)

class SequentialCalibration {
 public:
  // The calibration windows' embeddings, as both streams' states.
  SequentialCalibration(const Model& dense, const CalibrationText& text);
  ~SequentialCalibration();

  // Runs the dense layer l over both streams: gram() and cross() then hold
  // layer l's statistics, and the dense stream is past layer l.
  void observe(int l, const CalibrationProgress& progress = {});
  // The compressed stream moves past layer `l` of `compressed` (the model
  // whose layers [0, l] are compressed).
  void advance(const Weights& compressed, int l);

  const MatD& gram(Site s) const;   // sum over tokens of x' x'^T [n, n]
  const MatD& cross(Site s) const;  // sum over tokens of x x'^T [n, n]
  int64_t tokens() const { return int64_t(windows_.size()) * len_; }

 private:
  class Capture;
  const Model& dense_;
  CalibrationText text_;
  int len_;
  std::vector<std::vector<float>> windows_;  // the dense stream's states [len, dim] per window
  std::vector<std::vector<float>> comp_;     // the compressed stream's
  std::vector<std::unique_ptr<GramAccumulator>> gram_;  // per site (AttnIn .. MlpMid)
  std::vector<MatD> cross_;
};

// The output factor that best maps the compressed stream's inputs through
// V onto the dense layer's outputs: U = argmin sum_t |W x_t - Q x'_t - U V x'_t|^2
// = (W C - Q G') V^T (V G' V^T)^-1, for W [m, n], V [r, n] and the site's
// G' and C; Q [m, n] the residual form's quantized W (null: plain low rank).
// A ridge of 1e-8 x mean(diag) is added to V G' V^T when it is not
// positive definite.
MatF refit_out(const float* W, const float* Q, int64_t m, int64_t n, const MatF& V, int64_t r,
               const MatD& gram, const MatD& cross);

}  // namespace lr::compress
