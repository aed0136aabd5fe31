// The scalar backends: the model's slow, obviously correct definition and
// the plan executed step by step, the twins the fast paths are tested against.
#pragma once

#include <memory>

#include "backend/backend.h"

namespace lr {

// The plain scalar f32 definition of the model: slow, obviously correct.
// Requires F32 weights.
std::unique_ptr<Backend> make_reference_backend(std::shared_ptr<const Weights> w,
                                                const BackendOptions& opt);
// The plan of `target` (model/plan.h) for opt.exec's rung, executed step by
// step in plain scalar loops: the slow twin of the fast executors (same steps,
// buffers, folds and cache layouts). Any weight type; f32 caches.
std::unique_ptr<Backend> make_scalar_plan_backend(std::shared_ptr<const Weights> w,
                                                  const BackendOptions& opt, Target target);
}  // namespace lr
