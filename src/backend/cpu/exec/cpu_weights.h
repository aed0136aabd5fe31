// The weights as the CPU backends compute them: every block-format matrix
// (dense, a residual form's quantized part, a low-rank map's factors) that
// fits in panels of 16 rows (backend/cpu/panels.h) is computed from them,
// decode and prompt alike, and its rows as stored leave the process's
// memory (madvise MADV_PAGEOUT) until something else reads them (the
// reference path, the GPU upload, an embedding row).
#pragma once

#include <memory>

#include "model/weights.h"

namespace lr::cpu {

// `w` with panels added (a shallow copy: the matrices share their storage),
// or `w` itself when no matrix has a panel form. While `w` lives, another
// call with it returns the same copy, so backends of one model (the
// server's, a bench's modes, one after another) share one set of panels.
std::shared_ptr<const Weights> with_panels(std::shared_ptr<const Weights> w);

}  // namespace lr::cpu
