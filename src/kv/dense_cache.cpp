#include "kv/dense_cache.h"

#include <algorithm>
#include <type_traits>

#include "core/error.h"
#include "core/half.h"

namespace lr::kv {

DenseLayout DenseLayout::of(const Config& c, int ctx, int rows, bool windowed_only,
                            int elem_bytes) {
  LR_ASSERT(elem_bytes == 4 || elem_bytes == 2);
  DenseLayout d;
  d.n_kv_heads = c.n_kv_heads;
  d.head_dim = c.head_dim;
  d.ctx = ctx;
  d.window = c.swa_window;
  d.elem_bytes = elem_bytes;
  d.ring.assign(size_t(c.n_layers), 0);
  const int ring = c.swa_window + std::max(rows, 1) - 1;
  for (int l = 0; l < c.n_layers; ++l)
    if (!c.windowed(l))
      d.ring[size_t(l)] = windowed_only ? kNotHeld : 0;
    else if (2 * int64_t(ring) < ctx)
      d.ring[size_t(l)] = ring;
  return d;
}

uint64_t DenseLayout::bytes() const {
  uint64_t slots_all = 0;
  for (size_t l = 0; l < ring.size(); ++l) slots_all += uint64_t(slots(int(l)));
  return 2 * slots_all * uint64_t(n_kv_heads) * uint64_t(head_dim) * uint64_t(elem_bytes);
}

uint64_t DenseLayout::full_bytes() const {
  return 2 * uint64_t(ring.size()) * uint64_t(ctx) * uint64_t(n_kv_heads) * uint64_t(head_dim) *
         uint64_t(elem_bytes);
}

template <typename E>
DenseCacheOf<E>::DenseCacheOf(DenseLayout layout, bool shared_file) : layout_(std::move(layout)) {
  LR_ASSERT(size_t(layout_.elem_bytes) == sizeof(E));
  // Each KV head's positions start a page, so a prefix's whole pages can be
  // mapped from a stored one (share_prefix); the padding is never written.
  const size_t page = std::max<size_t>(1, page_bytes() / sizeof(E));
  size_t n = 0;
  for (size_t l = 0; l < layout_.ring.size(); ++l) {
    base_.push_back(n);
    const size_t elems = size_t(layout_.slots(int(l))) * size_t(layout_.head_dim);
    stride_.push_back((elems + page - 1) / page * page);
    n += stride_.back() * size_t(layout_.n_kv_heads);
  }
  k_ = ZeroPages<E>(n, shared_file);
  v_ = ZeroPages<E>(n, shared_file);
}

template <typename E>
template <typename Src>
void DenseCacheOf<E>::store(ZeroPages<E>& to, int l, size_t s, const Src* x, int64_t n) {
  LR_ASSERT(layout_.held(l));
  E* d = &to[s];
  if constexpr (std::is_same_v<E, Src>)
    std::copy_n(x, n, d);
  else
    f32_to_f16_row(x, d, n);
  if (const int r = layout_.ring[size_t(l)]; r > 0)  // the mirror, a ring further on
    std::copy_n(d, n, d + size_t(r) * size_t(layout_.head_dim));
}

template <typename E>
void DenseCacheOf<E>::put(bool value, int l, int h, int p, int64_t off, const float* x, int64_t n) {
  store(value ? v_ : k_, l, slot(l, h, p) + size_t(off), x, n);
}

template <typename E>
void DenseCacheOf<E>::append(int l, int h, int pos, const float* k, const float* v, int n,
                             int64_t stride) {
  const int hd = layout_.head_dim;
  for (int t = 0; t < n; ++t) {
    put(false, l, h, pos + t, 0, k + t * stride, hd);
    put(true, l, h, pos + t, 0, v + t * stride, hd);
  }
}

template <typename E>
void DenseCacheOf<E>::copy(const DenseCacheOf& from, int l, int h, int p) {
  const int hd = layout_.head_dim;
  store(k_, l, slot(l, h, p), from.key(l, h, p), hd);
  store(v_, l, slot(l, h, p), from.value(l, h, p), hd);
}

template <typename E>
void DenseCacheOf<E>::copy_prefix(const DenseCacheOf& from, int n, int held) {
  for (int l = 0; l < int(layout_.ring.size()); ++l) {
    if (!layout_.held(l)) continue;
    // A ring holds the last `ring` positions.
    const int ring = std::max(0, layout_.ring[size_t(l)]);
    for (int h = 0; h < layout_.n_kv_heads; ++h)
      for (int p = std::max(held, ring ? n - ring : 0); p < n; ++p) copy(from, l, h, p);
  }
}

template <typename E>
void DenseCacheOf<E>::share_prefix(const DenseCacheOf& stored, int n, bool rest) {
  const size_t hd = size_t(layout_.head_dim);
  for (int l = 0; l < int(layout_.ring.size()); ++l) {
    if (!layout_.held(l)) continue;
    const int ring = layout_.ring[size_t(l)];
    for (int h = 0; h < layout_.n_kv_heads; ++h) {
      int from = ring ? std::max(0, n - ring) : 0;  // the first position copied
      if (ring == 0) {
        const size_t at = slot(l, h, 0), want = size_t(n) * hd;
        const size_t mapped = std::min(k_.map_from(stored.k_, at, want),  // (the same: one layout)
                                       v_.map_from(stored.v_, at, want));
        from = int(mapped / hd);
      }
      if (rest)
        for (int p = from; p < n; ++p) copy(stored, l, h, p);
    }
  }
}

template <typename E>
int DenseCacheOf<E>::rewindable(int n_past, int n) const {
  LR_ASSERT(0 <= n && n <= n_past);
  for (size_t l = 0; l < layout_.ring.size(); ++l) {
    // A query at n attends to the held positions from n - window + 1 on; the
    // ring has overwritten every position up to n_past - 1 - ring.
    const int r = layout_.ring[l];
    if (r > 0 && n > 0 && std::max(0, n - layout_.window + 1) <= n_past - 1 - r) return 0;
  }
  return n;
}

template class DenseCacheOf<float>;
template class DenseCacheOf<uint16_t>;

}  // namespace lr::kv
