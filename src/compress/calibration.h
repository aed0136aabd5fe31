// The calibration pass the compressor and the quantizer share: the dense
// model runs over windows of calibration text while an observer sees every
// linear map's input.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "runtime/model.h"

namespace lr::compress {

struct CalibrationText {
  std::string path;  // text file
  int samples = 64;  // windows
  int len = 512;     // tokens per window
  int n_threads = 2;
};

// Per window: (windows done, windows, phase).
using CalibrationProgress = std::function<void(int, int, const char*)>;

// The activation a linear map of `slot` reads: q, k, v the attention input,
// o the attention output, gate and up the MLP input, down its middle.
Site input_site(Slot slot);

// The first samples x len tokens of the text, checked as run_calibration says.
std::vector<int32_t> calibration_tokens(const Model& m, const CalibrationText& text);

// Runs `m` over the first samples x len tokens of the text, with `obs`
// watching. Returns the tokens used. lr::Error when no path is given, the
// window counts are not positive, or the text has too few tokens (naming
// how many it has and how many are needed).
int64_t run_calibration(const Model& m, const CalibrationText& text, ActivationObserver* obs,
                        const std::string& phase, const CalibrationProgress& progress);

}  // namespace lr::compress
