// libFuzzer target for PyTorch checkpoints (zip container + restricted
// unpickler): any input must either load into tensors that lie inside the
// input, or throw lr::Error; nothing may crash, hang or leak.
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "format/torch_checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto c = lr::TorchCheckpoint::from_bytes(std::vector<uint8_t>(data, data + size), "fuzz.pt");
    for (const std::string& n : c->names()) {
      try {
        auto v = c->find(n);
        if (v && v->nbytes) {
          volatile uint8_t sink = v->data[0] ^ v->data[v->nbytes - 1];  // in bounds (ASan checks)
          (void)sink;
        }
      } catch (const lr::Error&) {
      }
    }
  } catch (const lr::Error&) {
  }
  return 0;
}
