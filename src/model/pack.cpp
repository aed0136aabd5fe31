#include "model/pack.h"

#include <cstring>
#include <map>
#include <vector>

namespace lr {

namespace {

Matrix& input_matrix_mut(Linear& l) { return l.low_rank() ? l.v : l.w; }

// The parts can be stacked: all dense or all low-rank, one type, one input
// width, distinct allocations. Dense block-format maps stay where they are
// (in the file's mapping): the plan stacks only low-rank groups, and a copy
// would double their memory.
bool packable(const std::vector<Linear*>& parts) {
  const Matrix& first = input_matrix(*parts[0]);
  if (!parts[0]->low_rank() && is_block_format(first.dtype)) return false;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i]->residual()) return false;  // two products on the input: not stacked
    const Matrix& m = input_matrix(*parts[i]);
    if (parts[i]->low_rank() != parts[0]->low_rank() || m.dtype != first.dtype ||
        m.cols != first.cols || m.rows == 0)
      return false;
    for (size_t j = 0; j < i; ++j)
      if (input_matrix(*parts[j]).ptr() == m.ptr()) return false;
  }
  return true;
}

using Key = std::vector<const uint8_t*>;

Key key_of(const std::vector<Linear*>& parts) {
  Key k;
  for (Linear* p : parts) k.push_back(input_matrix(*p).ptr());
  return k;
}

// Packs one kind of group (q/k/v or gate/up) across all layers.
void pack_group(Weights& w, Matrix Layer::*packed_field,
                std::vector<Linear*> (*parts_of)(Layer&)) {
  // A matrix that appears in two different groups (a basis shared with other
  // partners) cannot be packed in either.
  std::map<const uint8_t*, Key> owner;
  std::map<Key, bool> ok;
  for (Layer& l : w.layers) {
    std::vector<Linear*> parts = parts_of(l);
    if (packed_input(l.*packed_field, std::vector<const Linear*>(parts.begin(), parts.end())) || !packable(parts)) continue;
    Key k = key_of(parts);
    ok.emplace(k, true);
    for (const uint8_t* p : k) {
      auto [it, fresh] = owner.emplace(p, k);
      if (!fresh && it->second != k) ok[k] = ok[it->second] = false;
    }
  }
  std::map<Key, std::vector<Matrix>> done;  // key -> {packed, views...}
  for (Layer& l : w.layers) {
    std::vector<Linear*> parts = parts_of(l);
    Key k = key_of(parts);
    auto it = ok.find(k);
    if (it == ok.end() || !it->second) continue;
    auto d = done.find(k);
    if (d == done.end()) {
      const Matrix& first = input_matrix(*parts[0]);
      int64_t rows = 0;
      for (Linear* p : parts) rows += input_matrix(*p).rows;
      Matrix packed = Matrix::allocate(first.dtype, rows, first.cols);
      std::vector<Matrix> views{packed};
      int64_t r0 = 0;
      for (Linear* p : parts) {
        const Matrix& m = input_matrix(*p);
        std::memcpy(packed.data.get() + uint64_t(r0) * m.row_bytes(), m.ptr(),
                    m.data_bytes());
        if (m.scales)
          std::memcpy(packed.scales.get() + r0 * q8_blocks(m.cols), m.scales.get(),
                      size_t(m.rows * q8_blocks(m.cols)) * sizeof(uint16_t));
        views.push_back(packed.rows_view(r0, m.rows));
        r0 += m.rows;
      }
      d = done.emplace(k, std::move(views)).first;
    }
    l.*packed_field = d->second[0];
    for (size_t i = 0; i < parts.size(); ++i) input_matrix_mut(*parts[i]) = d->second[i + 1];
  }
}

std::vector<Linear*> qkv_parts(Layer& l) { return {&l.q, &l.k, &l.v}; }
std::vector<Linear*> gate_up_parts(Layer& l) { return {&l.gate, &l.up}; }

}  // namespace

const Matrix* packed_input(const Matrix& packed, const std::vector<const Linear*>& parts) {
  if (packed.rows == 0) return nullptr;
  const uint8_t* at = packed.ptr();
  int64_t rows = 0;
  for (const Linear* p : parts) {
    const Matrix& m = input_matrix(*p);
    if (m.ptr() != at || m.dtype != packed.dtype || m.cols != packed.cols) return nullptr;
    at += m.data_bytes();
    rows += m.rows;
  }
  return rows == packed.rows ? &packed : nullptr;
}

void pack_projections(Weights& w) {
  pack_group(w, &Layer::qkv_in, qkv_parts);
  pack_group(w, &Layer::gate_up_in, gate_up_parts);
}

}  // namespace lr
