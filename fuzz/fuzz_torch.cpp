// libFuzzer target for PyTorch checkpoints (zip container + restricted
// unpickler): any input must either load into tensors that lie inside the
// input, or throw lr::Error; nothing may crash, hang or leak.
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "format/dobi_remap.h"
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
        auto r = c->find_raw(n);
        if (r && r->nbytes) {
          volatile uint8_t sink = r->data[0] ^ r->data[r->nbytes - 1];
          (void)sink;
        }
        // Dobi-SVD remapped factors: dequantize against a few matrix shapes around the codes' width.
        const std::string tail = ".us_quan";
        if (n.size() > tail.size() && n.compare(n.size() - tail.size(), tail.size(), tail) == 0 && r &&
            r->shape.size() == 2) {
          const std::string m = n.substr(0, n.size() - tail.size());
          auto vq = c->find_raw(m + ".vt_quan");
          auto ua = c->find(m + ".us_absmax"), va = c->find(m + ".vt_absmax");
          if (vq && ua && va) {
            lr::dobi::RemappedTensors t{*r, *vq, *ua, *va, c->find_string(m + ".tuple_info.0"),
                                        c->find(m + ".tuple_info.1")};
            const int64_t q = int64_t(r->shape[0] % 4096) + 1;
            for (auto [rows, cols] : {std::pair{q, q}, std::pair{q + 1, q}, std::pair{q, q + 2}}) {
              try {
                lr::dobi::dequantize(m, t, rows, cols);
              } catch (const lr::Error&) {
              }
            }
          }
        }
      } catch (const lr::Error&) {
      }
    }
  } catch (const lr::Error&) {
  }
  return 0;
}
