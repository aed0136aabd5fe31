// The dense KV cache (kv/dense_cache.h): copying a prefix from another cache
// copies only what the destination lacks, and a stored prefix (a cache in a
// file in memory) is taken by reference: its whole pages are mapped, the rest
// copied.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "core/zero_pages.h"
#include "kv/dense_cache.h"

namespace lr::kv {
namespace {

// 2 layers (the second windowed: a ring of 8 + 1 - 1 positions), 2 KV heads of 64.
DenseLayout layout(int ctx) {
  Config c;
  c.n_layers = 2;
  c.n_kv_heads = 2;
  c.head_dim = 64;
  c.swa_window = 8;
  c.swa_layers = {0, 1};
  return DenseLayout::of(c, ctx, 1);
}

// Position p of every layer and head holds `tag` + p in each element.
void fill(DenseCache& c, int from, int n, float tag) {
  std::vector<float> k(64), v(64);
  for (int l = 0; l < 2; ++l)
    for (int h = 0; h < 2; ++h)
      for (int p = from; p < n; ++p) {
        for (float& x : k) x = tag + float(p);
        for (float& x : v) x = -tag - float(p);
        c.append(l, h, p, k.data(), v.data(), 1, 64);
      }
}

TEST(DenseCache, CopyPrefixCopiesWhatIsNotHeld) {
  DenseCache src(layout(256)), dst(layout(256));
  fill(src, 0, 100, 1000.f);
  fill(dst, 0, 40, 5000.f);  // what dst holds "already" (other values, to see what is copied)
  dst.copy_prefix(src, 100, 40);
  for (int h = 0; h < 2; ++h) {
    EXPECT_EQ(*dst.key(0, h, 39), 5039.f);  // held: not copied
    EXPECT_EQ(*dst.key(0, h, 40), 1040.f);
    EXPECT_EQ(*dst.value(0, h, 99), -1099.f);
    // The ring holds the last 8 positions, copied where not held.
    for (int p = 92; p < 100; ++p) EXPECT_EQ(*dst.key(1, h, p), 1000.f + float(p)) << p;
  }
}

TEST(DenseCache, StoredPrefixPagesAreMappedByReference) {
  const int n = 300;
  DenseCache src(layout(1024)), dst(layout(1024));
  DenseCache stored(layout(1024), /*shared_file=*/true);
  fill(src, 0, n, 1000.f);
  stored.copy_prefix(src, n);
  dst.share_prefix(stored, n);
  const int per_page = int(page_bytes() / (64 * sizeof(float)));  // positions in a page
  const int mapped = n / per_page * per_page;
  ASSERT_GT(mapped, 0);
  for (int h = 0; h < 2; ++h)
    for (int p = 0; p < n; ++p) {
      ASSERT_EQ(*dst.key(0, h, p), 1000.f + float(p));
      ASSERT_EQ(*dst.value(0, h, p), -1000.f - float(p));
    }
  for (int p = n - 8; p < n; ++p) EXPECT_EQ(*dst.key(1, 0, p), 1000.f + float(p));
  // A write to the stored file shows in dst's mapped pages, not in its copied tail.
  *stored.key(0, 1, 0) = 7.f;
  *stored.key(0, 1, mapped) = 7.f;
  EXPECT_EQ(*dst.key(0, 1, 0), 7.f);
  EXPECT_EQ(*dst.key(0, 1, mapped), 1000.f + float(mapped));
  // dst's own writes stay its own.
  *dst.key(0, 0, 5) = 3.f;
  EXPECT_EQ(*stored.key(0, 0, 5), 1005.f);
  // rest = false: only the pages are mapped (a cache holding the same positions).
  DenseCache again(layout(1024));
  again.share_prefix(stored, n, /*rest=*/false);
  EXPECT_EQ(*again.key(0, 1, 0), 7.f);
  EXPECT_EQ(*again.key(0, 1, mapped), 0.f);  // not copied
  EXPECT_EQ(*again.key(1, 1, n - 1), 0.f);   // rings: not copied
}

}  // namespace
}  // namespace lr::kv
