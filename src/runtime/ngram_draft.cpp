#include "runtime/ngram_draft.h"

#include <algorithm>

namespace lr {

std::vector<int32_t> ngram_draft(const std::vector<int32_t>& hist, int k, const NgramDraft& o) {
  const int64_t size = int64_t(hist.size());
  if (k <= 0) return {};
  for (int n = o.n_max; n >= std::max(1, o.n_min); --n) {
    if (size < n + 1) continue;
    const int32_t* tail = hist.data() + (size - n);
    // The latest earlier occurrence: starts i < size - n, latest first.
    for (int64_t i = size - n - 1; i >= 0; --i) {
      if (!std::equal(tail, tail + n, hist.data() + i)) continue;
      const int64_t from = i + n, to = std::min(size, from + k);
      return {hist.begin() + from, hist.begin() + to};
    }
  }
  return {};
}

}  // namespace lr
