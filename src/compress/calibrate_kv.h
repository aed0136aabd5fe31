// lowrank calibrate-kv: per-(layer, KV head) key bases fitted offline on
// calibration text (the SVDq paper's setting), stored in the model file for
// --cache-type-k svdq --svdq-basis calibrated.
#pragma once

#include <functional>
#include <string>

#include "runtime/model.h"

namespace lr {

struct CalibrateKvOptions {
  std::string calib_path;
  int samples = 16;  // windows of `len` tokens
  int len = 2048;    // positions covered by the fit: at least the context served
  int n_threads = 2;
};

using CalibrateKvProgress = std::function<void(int done, int total)>;

// Runs the windows through the model (prefill), streams the post-RoPE keys'
// first and second moments per (layer, KV head) in double precision and
// fits each eigen-system (kv/svdq.h fit_eigen).
Weights::KeyCalibration calibrate_keys(const Model& m, const CalibrateKvOptions& opt,
                                       const CalibrateKvProgress& progress = {});

// The model at `in` written to `out` with `cal` as its key calibration
// (replacing any it had), `note` recorded as lowrank.kv_calib.source. The
// model must come from a GGUF file.
void save_with_key_calibration(const Model& m, Weights::KeyCalibration cal, const std::string& out,
                               const std::string& note);

}  // namespace lr
