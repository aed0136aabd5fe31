// How a parallel step's items are shared out among the threads.
#pragma once

#include <algorithm>
#include <cstdint>

namespace lr::cpu {

// A contiguous share of n items for thread tid of nth, in units of `align`
// items (shares differ by at most one unit; the last may be short).
struct Span {
  int64_t begin, end;
};
inline Span split(int64_t n, int tid, int nth, int64_t align = 1) {
  const int64_t units = (n + align - 1) / align;
  const int64_t chunk = units / nth, rem = units % nth;
  const int64_t b = tid * chunk + std::min<int64_t>(tid, rem);
  const int64_t e = b + chunk + (tid < rem ? 1 : 0);
  return {std::min(n, b * align), std::min(n, e * align)};
}

}  // namespace lr::cpu
