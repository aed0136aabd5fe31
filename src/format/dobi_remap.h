// Dobi-SVD's remapped factors (`remapping_weight.pt`): per linear map W [m, n]
// (out x in) with W = U diag(s) V^T and q = min(m, n), a dict of
//   us_quan   uint8 [k, q]  8-bit codes of the first q entries of column i of
//                           U*s (m >= n) or U (m < n)
//   vt_quan   uint8 [k, q]  codes of the first q entries of row i of V^T
//                           (m >= n) or s*V^T (m < n)
//   us_absmax, vt_absmax  f16 [k]  one scale per rank vector
//   tuple_info  None (square), ("us", f16 [m - n, k]) or ("vt", f16 [k, n - m]):
//                           the longer factor's entries beyond q, unquantized.
// A code decodes to dynamic_map()[code] * absmax, rounded to f16 as Dobi's
// loader does; Σ sits whole on the longer side.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <vector>

#include "format/tensor_source.h"
#include "format/torch_checkpoint.h"

namespace lr::dobi {

// bitsandbytes' signed 8-bit dynamic code (create_dynamic_map()), ascending:
// for e = 0..6 the 2^e midpoints of linspace(0.1, 1, 2^e + 1) times 10^(e-6),
// their negatives, 0 and 1, evaluated in float32 as torch does.
const std::array<float, 256>& dynamic_map();

struct RemappedTensors {
  TorchCheckpoint::Raw us_quan, vt_quan;  // uint8 [k, q]
  TensorView us_absmax, vt_absmax;        // [k]
  std::optional<std::string> side;        // tuple_info[0]: "us" or "vt"
  std::optional<TensorView> overhang;     // tuple_info[1]
};

// W ~ us * vt with us [m, k] and vt [k, n], row-major f32 holding f16 values.
struct Factors {
  int64_t m = 0, n = 0, k = 0;
  std::vector<float> us, vt;
};

// Checks every shape and type against W [m, n]; `what` names the module in
// messages ("file: model.layers.0.self_attn.q_proj").
Factors dequantize(const std::string& what, const RemappedTensors& t, int64_t m, int64_t n);

}  // namespace lr::dobi
