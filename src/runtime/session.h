// Sessions of a loaded model: the one place where a device, --ref and the
// number of slots become a backend. Every command makes its sessions here:
// run, chat, serve and bench-batch an engine's slots (make_slots),
// perplexity and bench a single sequence (make_session).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "backend/backend.h"
#include "backend/batch.h"
#include "runtime/model.h"
#include "runtime/session.h"

namespace lr {

// Where a session runs: the fast CPU executor, the scalar reference, the GPU.
enum class ExecPath { Fast, Reference, Cuda };

// --device ("cpu" | "cuda") and --ref; throws lr::Error naming the devices.
ExecPath parse_exec_path(const std::string& device, bool reference);
// The weight type a path loads (load_model): --ref f32; the GPU f16 for
// "auto" (it computes in f32, f16 or bf16); else --wtype as given.
std::optional<DType> load_weight_type(ExecPath path, const std::string& wtype);
// Where the sessions run, for a log line: "CPU, 2 threads", "the GPU", ...
std::string describe(ExecPath path, const BackendOptions& opt);

// One sequence on `path`.
std::unique_ptr<Backend> make_session(const Model& m, ExecPath path, const BackendOptions& opt);

// An engine's slots (runtime/engine.h), steps of at most max_step_tokens:
// - one slot: a session (make_session) as a batch of one, so a one-slot
//   engine runs whatever a session runs: every ablation rung, every
//   --cache-type-k, the reference, the GPU's per-token graphs;
// - several: the batch-invariant CPU batch (backend/batch.h; a cache of the
//   --cache-type-k kind per slot) or CUDA batch (f16 caches); a key cache or
//   rung it lacks is refused, naming it;
// - verify (speculative decoding, Engine's draft_max): the CPU batch for one
//   slot too on the fast path (drafts are verified as decode steps).
std::unique_ptr<BatchBackend> make_slots(const Model& m, ExecPath path, const BackendOptions& opt,
                                         int slots, int max_step_tokens, bool verify = false);

}  // namespace lr
