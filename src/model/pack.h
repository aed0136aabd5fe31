// Packed projections: the input-side matrices that read the same vector are
// stacked at load time into one allocation, so decode makes one pass over x
// for q, k and v and one for gate and up. For low-rank maps these are the V
// factors (ranks may differ between the parts); for dense maps the W rows.
// The parts become row views of the packed matrix, so packing costs no extra
// memory and y = [Vq; Vk; Vv] x is exactly (Vq x, Vk x, Vv x).
//
// A shared basis (Basis Sharing) stays shared: layers whose parts are the same
// allocations get the same packed matrix. Parts that cannot be packed (mixed
// dense / low-rank, different types, one allocation used twice, or a basis
// shared with a different set of partners) are left as they are.
#pragma once

#include <vector>

#include "model/weights.h"

namespace lr {

// Packs every layer's q/k/v and gate/up input matrices (idempotent).
void pack_projections(Weights& w);

// The packed input matrix of a group if `packed` really stacks the parts'
// input matrices in this order (contiguous row views); null otherwise (not
// packed, or the weights were edited after packing).
const Matrix* packed_input(const Matrix& packed, const std::vector<const Linear*>& parts);

// The matrix a linear map applies to its input first: V when low-rank, else W.
inline const Matrix& input_matrix(const Linear& l) { return l.low_rank() ? l.v : l.w; }

}  // namespace lr
