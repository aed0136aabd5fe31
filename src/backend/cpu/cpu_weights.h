// The weights as the CPU backends compute them: every Q4_K matrix that fits
// also in panels of 16 rows (backend/cpu/panels.h) for the decode products;
// the prompt products and everything else read the rows as stored.
#pragma once

#include <memory>

#include "model/weights.h"

namespace lr::cpu {

// `w` with panels added (a shallow copy: the matrices share their storage),
// or `w` itself when no matrix has a panel form. While the copy lives,
// another call with the same `w` returns it, so backends of one model (the
// server's, a bench's modes) share one set of panels.
std::shared_ptr<const Weights> with_panels(std::shared_ptr<const Weights> w);

}  // namespace lr::cpu
