#include "backend/cpu/cpu_weights.h"

#include <sys/mman.h>
#include <unistd.h>

#include <map>
#include <mutex>

#include "backend/cpu/panels.h"

namespace lr::cpu {

namespace {

// The Q4_K maps a decode step multiplies by: every dense matrix, and the
// quantized part of a residual form (its factors are small).
template <class W, class F>
void for_each_product_matrix(W& w, F&& f) {
  auto linear = [&](auto& l) {
    if (l.w.rows > 0) f(l.w);
  };
  linear(w.output);
  for (auto& l : w.layers)
    for (auto* m : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down}) linear(*m);
}

#ifndef MADV_PAGEOUT
#define MADV_PAGEOUT 21  // Linux 5.4
#endif

// The pages wholly inside [p, p + n) leave this process's memory: a file's
// clean pages are dropped (read again if touched), anonymous ones swapped
// (kept where there is no swap). Nothing reads them on the CPU path once
// the panels exist; where the kernel lacks MADV_PAGEOUT nothing happens.
void release_pages(const uint8_t* p, uint64_t n) {
  const uint64_t page = uint64_t(sysconf(_SC_PAGESIZE));
  const uint64_t a = (uint64_t(p) + page - 1) / page * page, e = (uint64_t(p) + n) / page * page;
  if (e > a) (void)madvise(reinterpret_cast<void*>(a), e - a, MADV_PAGEOUT);
}

// The copy stays while its source lives (backends of one model made one
// after another, as the tests and bench's modes make them, pack once), and
// goes at the first call after the source is freed.
struct Entry {
  std::weak_ptr<const Weights> source;
  std::shared_ptr<const Weights> with;
};
std::mutex g_mu;
std::map<const Weights*, Entry> g_cache;

}  // namespace

std::shared_ptr<const Weights> with_panels(std::shared_ptr<const Weights> w) {
  std::lock_guard<std::mutex> lock(g_mu);
  for (auto it = g_cache.begin(); it != g_cache.end();)  // drop the entries of freed weights
    it = it->second.source.expired() ? g_cache.erase(it) : std::next(it);
  if (auto it = g_cache.find(w.get()); it != g_cache.end() && it->second.source.lock() == w)
    return it->second.with;
  bool any = false;
  for_each_product_matrix(*w, [&](const Matrix& m) { any |= panels_fit(m.dtype, m.rows, m.cols); });
  if (!any) return w;
  auto copy = std::make_shared<Weights>(*w);
  std::map<const uint8_t*, std::shared_ptr<const uint8_t[]>>
      done;  // a matrix used twice is packed once
  for_each_product_matrix(*copy, [&](Matrix& m) {
    if (!panels_fit(m.dtype, m.rows, m.cols)) return;
    auto& p = done[m.ptr()];
    if (!p) {
      p = repack_panels(m.dtype, m.ptr(), m.row_bytes(), m.rows, m.cols);
      release_pages(m.ptr(), m.data_bytes());
    }
    m.panels = p;
  });
  g_cache[w.get()] = {w, copy};
  return copy;
}

}  // namespace lr::cpu
