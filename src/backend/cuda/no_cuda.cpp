// A build without the CUDA backend (LOWRANK_CUDA=OFF): asking for it is a
// clear error, not a link failure.
#include "backend/backend.h"
#include "backend/batch.h"
#include "backend/cuda/cuda.h"
#include "core/error.h"

namespace lr {

std::unique_ptr<Backend> make_cuda_backend(std::shared_ptr<const Weights>, const BackendOptions&) {
  fail(
      "this lowrank was built without the CUDA backend (configure with -DLOWRANK_CUDA=ON and a "
      "CUDA toolkit)");
}

std::unique_ptr<BatchBackend> make_cuda_batch_backend(std::shared_ptr<const Weights>,
                                                      const BackendOptions&, int, int) {
  fail(
      "this lowrank was built without the CUDA backend (configure with -DLOWRANK_CUDA=ON and a "
      "CUDA toolkit)");
}

std::string cuda_device_info(bool* available) {
  if (available) *available = false;
  return "built without CUDA (LOWRANK_CUDA=OFF)";
}

double cuda_read_bandwidth_gbs() {
  fail("this lowrank was built without the CUDA backend (LOWRANK_CUDA=OFF)");
}

}  // namespace lr
