#include "runtime/session.h"

#include "backend/cpu/cpu.h"
#include "backend/cuda/cuda.h"
#include "backend/ref/ref.h"
#include "core/error.h"

namespace lr {

ExecPath parse_exec_path(const std::string& device, bool reference) {
  if (device != "cpu" && device != "cuda")
    fail("unknown device '{}' (expected cpu or cuda)", device);
  if (reference && device == "cuda")
    fail("--ref runs the scalar reference on the CPU: drop --device cuda or --ref");
  if (reference) return ExecPath::Reference;
  return device == "cuda" ? ExecPath::Cuda : ExecPath::Fast;
}

std::optional<DType> load_weight_type(ExecPath path, const std::string& wtype) {
  if (path == ExecPath::Reference) return DType::F32;
  if (path == ExecPath::Cuda && wtype == "auto") return DType::F16;
  return parse_run_weight_type(wtype);
}

std::string describe(ExecPath path, const BackendOptions& opt) {
  switch (path) {
    case ExecPath::Reference:
      return "the scalar reference on the CPU";
    case ExecPath::Cuda:
      return "the GPU";
    case ExecPath::Fast:
      break;
  }
  return fmt::format("CPU, {} threads", opt.cpu.n_threads);
}

std::unique_ptr<Backend> make_session(const Model& m, ExecPath path, const BackendOptions& opt) {
  switch (path) {
    case ExecPath::Reference:
      return make_reference_backend(m.weights, opt);
    case ExecPath::Cuda:
      return make_cuda_backend(m.weights, opt);
    case ExecPath::Fast:
      break;
  }
  return make_cpu_backend(m.weights, opt);
}

std::unique_ptr<BatchBackend> make_slots(const Model& m, ExecPath path, const BackendOptions& opt,
                                         int slots, int max_step_tokens, bool verify) {
  if (slots < 1) fail("an engine needs at least one slot (got {})", slots);
  if (slots == 1 && !(verify && path == ExecPath::Fast))
    return make_sequence_batch(make_session(m, path, opt), max_step_tokens);
  switch (path) {
    case ExecPath::Reference:
      fail("the scalar reference runs one sequence: use one slot (-np 1) with --ref");
    case ExecPath::Cuda:
      return make_cuda_batch_backend(m.weights, opt, slots, max_step_tokens);
    case ExecPath::Fast:
      break;
  }
  return make_cpu_batch_backend(m.weights, opt, slots, max_step_tokens);
}

}  // namespace lr
