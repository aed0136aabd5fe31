// The calibrated key bases (`lowrank calibrate-kv`) in a GGUF file:
//   kv_calib.mean     f32 [head_dim, n_layers * n_kv_heads]
//   kv_calib.sigma    f32 [head_dim, n_layers * n_kv_heads]
//   kv_calib.vectors  f32 [head_dim, head_dim, n_layers * n_kv_heads]
//   kv_calib.q_vectors, kv_calib.q_proj [head_dim, head_dim, n], kv_calib.q_sigma
//     [head_dim, n]: the query-aware fit (optional)
//   lowrank.kv_calib.n_keys  i32 [1]: keys each basis was fitted on
// (GGML shape order; stream i = layer * n_kv_heads + head).
#pragma once

#include "format/gguf.h"
#include "format/tensor_source.h"
#include "model/weights.h"

namespace lr {

// Fills w.key_calibration when the tensors are present; throws lr::Error
// naming the tensor when one is present with the wrong type or shape, or
// holds non-finite values.
void read_key_calibration(const TensorSource& src, Weights& w);
void write_key_calibration(gguf::Writer& out, const Weights& w);

}  // namespace lr
