// The dense KV cache of a session: post-RoPE keys and values, f32 or f16
// (the CPU's default cache, KeyCacheConfig::half, and the rings beside a
// typed cache, KeyCacheConfig::ring_elem_bytes), head-major: the keys of one
// KV head of one layer are contiguous [positions, head_dim], so attention
// streams them.
//
// A layer attends to the whole context, or (a sliding-window layer) to its
// last `window` positions. A full layer keeps every position of the context.
// A windowed layer keeps a ring of window + rows - 1 positions (rows: the
// most a call appends before it attends, so a chunk's first query still sees
// its whole window), and keeps it twice over: position p at slots p % ring
// and p % ring + ring. Any window is then one contiguous run of slots, read
// in the order and with the bits a full cache gives. The ring is used where
// it is smaller than the context (DenseLayout::of). Beside a compressed key
// cache (which holds the full layers) a dense cache holds the windowed
// layers only: the full layers' ring is kNotHeld.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/zero_pages.h"
#include "model/config.h"

namespace lr::kv {

struct DenseLayout {
  int n_kv_heads = 0, head_dim = 0, ctx = 0, window = 0;
  int elem_bytes = 4;  // 4: f32, 2: f16 keys and values
  static constexpr int kNotHeld = -1;
  std::vector<int> ring;  // [n_layers] 0: the whole context; kNotHeld; else the ring's positions

  // The layout for config c, a context of ctx positions and calls of at most
  // rows tokens; windowed_only: the full layers are not held; elem_bytes 4
  // (f32) or 2 (f16).
  static DenseLayout of(const Config& c, int ctx, int rows, bool windowed_only = false,
                        int elem_bytes = 4);
  // Slots of one KV head of layer l (a ring's are mirrored).
  int64_t slots(int l) const {
    const int r = ring[size_t(l)];
    return r > 0 ? 2 * int64_t(r) : r == 0 ? ctx : 0;
  }
  bool held(int l) const { return ring[size_t(l)] != kNotHeld; }
  // The largest ring (0: none).
  int max_ring() const {
    return ring.empty() ? 0 : std::max(0, *std::max_element(ring.begin(), ring.end()));
  }
  // Bytes of the keys and values.
  uint64_t bytes() const;
  // Bytes a cache of the whole context in every layer would take (same type).
  uint64_t full_bytes() const;
};

// E: float (f32) or uint16_t (f16, rounded to nearest even as it is put).
template <typename E>
class DenseCacheOf {
 public:
  // shared_file: held in a file in memory, so other caches can map its
  // pages (share_prefix): a stored prompt prefix.
  explicit DenseCacheOf(DenseLayout layout, bool shared_file = false);

  // Position p of KV head h in layer l; from there on a window's positions
  // follow one another (head_dim elements apart).
  E* key(int l, int h, int p) { return &k_[slot(l, h, p)]; }
  E* value(int l, int h, int p) { return &v_[slot(l, h, p)]; }
  const E* key(int l, int h, int p) const { return &k_[slot(l, h, p)]; }
  const E* value(int l, int h, int p) const { return &v_[slot(l, h, p)]; }
  int head_dim() const { return layout_.head_dim; }
  const DenseLayout& layout() const { return layout_; }

  // Writes floats [off, off + n) of position p's key (or value) of KV head h.
  void put(bool value, int l, int h, int p, int64_t off, const float* x, int64_t n);
  // Writes the keys and values of KV head h at positions [pos, pos + n)
  // (rows `stride` floats apart).
  void append(int l, int h, int pos, const float* k, const float* v, int n, int64_t stride);
  // Position p's key and value of KV head h in layer l as `from` holds them.
  void copy(const DenseCacheOf& from, int l, int h, int p);
  // Positions [0, n) as `from` (same layout) holds them: every layer's, a
  // ring's last positions; those before `held` are taken as held already.
  void copy_prefix(const DenseCacheOf& from, int n, int held = 0);
  // Positions [0, n) of `stored` (same layout, shared_file): the whole
  // pages of the full layers' positions by reference (copy on write), the
  // rest copied. rest = false: only the pages by reference, for a cache
  // that holds those positions already (the one `stored` was copied from;
  // its later positions and rings stay as they are).
  void share_prefix(const DenseCacheOf& stored, int n, bool rest = true);
  // The largest m <= n such that, after positions [m, n_past) are dropped,
  // every position a query at m attends to is still held: n itself, or 0
  // where a ring has overwritten part of that window.
  int rewindable(int n_past, int n) const;
  uint64_t bytes() const { return layout_.bytes(); }
  // Gives every page back (positions read as zeros, or as a mapped stored
  // prefix holds them: either way, to be written before they are read).
  void release() {
    k_.release_from(0);
    v_.release_from(0);
  }
  // Bytes in RAM: the pages written so far (core/zero_pages.h).
  uint64_t resident_bytes() const { return k_.resident_bytes() + v_.resident_bytes(); }

 private:
  size_t slot(int l, int h, int p) const {
    const int r = layout_.ring[size_t(l)];
    return base_[size_t(l)] + size_t(h) * stride_[size_t(l)] +
           size_t(r > 0 ? p % r : p) * size_t(layout_.head_dim);
  }
  // Stores n elements at slot s and, in a ring, at its mirror.
  template <typename Src>
  void store(ZeroPages<E>& to, int l, size_t s, const Src* x, int64_t n);
  DenseLayout layout_;
  std::vector<size_t> base_;    // [n_layers] first element of each layer
  std::vector<size_t> stride_;  // [n_layers] elements from one KV head to the next (whole pages)
  ZeroPages<E> k_, v_;        // RAM for the positions written, not the whole context
};

using DenseCache = DenseCacheOf<float>;
using DenseCacheF16 = DenseCacheOf<uint16_t>;

}  // namespace lr::kv
