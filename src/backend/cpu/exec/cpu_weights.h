// The weights as the CPU backends compute them: every block-format matrix
// (dense, a residual form's quantized part, a low-rank map's factors) that
// fits in panels of 16 rows (backend/cpu/kernels/panels.h) is computed from
// them, decode and prompt alike, and its rows as stored leave the process's
// memory (madvise MADV_PAGEOUT) until something else reads them (the
// reference path, the GPU upload, an embedding row). The panels belong to
// the CPU backends: a table finds them by the address of each Matrix of the
// weights they were made for, as the CUDA backend finds its device copies.
#pragma once

#include <memory>
#include <unordered_map>
#include <vector>

#include "backend/cpu/kernels/panels.h"
#include "model/weights.h"

namespace lr::cpu {

class PanelTable {
 public:
  // m's panels (m a matrix of the weights the table was made for), or none.
  Panels of(const Matrix& m) const {
    auto it = at_.find(&m);
    return it == at_.end() ? Panels{} : it->second;
  }
  size_t size() const { return at_.size(); }

 private:
  friend std::shared_ptr<const PanelTable> panels_for(const std::shared_ptr<const Weights>& w);
  std::unordered_map<const Matrix*, Panels> at_;
  std::vector<std::shared_ptr<const uint8_t[]>> storage_;  // the packed matrices' panels
};

// The panels of w's matrices. While `w` lives, another call with it returns
// the same table, so backends of one model (the server's, a bench's modes,
// one after another) share one set of panels.
std::shared_ptr<const PanelTable> panels_for(const std::shared_ptr<const Weights>& w);

}  // namespace lr::cpu
