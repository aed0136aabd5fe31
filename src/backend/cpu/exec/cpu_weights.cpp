#include "backend/cpu/exec/cpu_weights.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <vector>

#include "backend/cpu/kernels/panels.h"

namespace lr::cpu {

namespace {

// The matrices a decode step multiplies by: the packed input matrices
// first (their parts are row views of them), then every dense matrix, the
// quantized part of a residual form and the factors of low-rank maps, but
// not a pivoted map's U (the executor views its rows from any row on).
// (Q8_0 factors have no panel form: a Q8_0 matrix is a heap copy, which
// without swap would stay beside its panels. Tried at commit f7d0035: the
// 1.5B with q8_0 factors at keep 0.8 decoded 1.11-1.24x faster for a peak
// RSS of 2.78 GB against 1.65.)
template <class W, class F>
void for_each_product_matrix(W& w, F&& f) {
  auto linear = [&](auto& l) {
    for (auto* m : {&l.w, &l.v})
      if (m->rows > 0) f(*m);
    if (l.u.rows > 0 && !l.pivots) f(l.u);
  };
  for (auto& l : w.layers)
    for (auto* m : {&l.qkv_in, &l.gate_up_in})
      if (m->rows > 0) f(*m);
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

// The table stays while its weights live (backends of one model made one
// after another, as the tests and bench's modes make them, pack once), and
// goes at the first call after they are freed.
struct Entry {
  std::weak_ptr<const Weights> source;
  std::shared_ptr<const PanelTable> table;
};
std::mutex g_mu;
std::map<const Weights*, Entry> g_cache;

}  // namespace

std::shared_ptr<const PanelTable> panels_for(const std::shared_ptr<const Weights>& w) {
  std::lock_guard<std::mutex> lock(g_mu);
  for (auto it = g_cache.begin(); it != g_cache.end();)  // drop the entries of freed weights
    it = it->second.source.expired() ? g_cache.erase(it) : std::next(it);
  if (auto it = g_cache.find(w.get()); it != g_cache.end() && it->second.source.lock() == w)
    return it->second.table;
  auto table = std::make_shared<PanelTable>();
  // First which matrices are packed: a matrix inside one packed already (a
  // part of a packed stack, or one used twice) takes its rows' panels, one
  // with no panel form keeps its rows as stored. Then each is packed and its
  // rows leave memory at once (the peak holds one matrix twice, not the
  // model), unless a kept matrix lies over them.
  struct Packed {
    const Matrix* m;
    const uint8_t *begin, *end;
  };
  std::vector<Packed> packed;
  std::vector<std::pair<const Matrix*, size_t>> parts;  // (matrix, the packed one it lies in)
  std::vector<std::pair<const uint8_t*, const uint8_t*>> kept;
  for_each_product_matrix(*w, [&](const Matrix& m) {
    const uint8_t* b = m.ptr();
    for (size_t i = 0; i < packed.size(); ++i) {
      const Packed& p = packed[i];
      if (b < p.begin || b >= p.end || m.dtype != p.m->dtype || m.cols != p.m->cols) continue;
      if (uint64_t(b - p.begin) % (16 * m.row_bytes()) == 0 && m.rows % 16 == 0)
        return parts.emplace_back(&m, i), void();
    }
    if (panels_fit(m.dtype, m.rows, m.cols))
      packed.push_back({&m, b, b + m.data_bytes()});
    else
      kept.emplace_back(b, b + m.data_bytes());
  });
  for (const Packed& p : packed) {
    const Matrix& m = *p.m;
    table->storage_.push_back(repack_panels(m.dtype, m.ptr(), m.row_bytes(), m.rows, m.cols));
    table->at_[&m] = {table->storage_.back().get(), panel_bytes(m.dtype, 16, m.cols)};
    if (std::none_of(kept.begin(), kept.end(),
                     [&](auto& k) { return k.first < p.end && p.begin < k.second; }))
      release_pages(p.begin, uint64_t(p.end - p.begin));
  }
  for (auto [m, i] : parts) {
    const Matrix& p = *packed[i].m;
    table->at_[m] =
        table->at_[&p].rows(int64_t(uint64_t(m->ptr() - p.ptr()) / m->row_bytes()), m->rows);
  }
  g_cache[w.get()] = {w, table};
  return table;
}

}  // namespace lr::cpu
