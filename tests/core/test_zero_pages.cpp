// core/zero_pages.h: memory that reads as zeros and takes RAM page by page
// as it is written (mincore counts the pages).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>

#include "core/zero_pages.h"

namespace lr {
namespace {

TEST(ZeroPages, RamFollowsThePagesWritten) {
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  ZeroPages<uint16_t> z(size_t(8) << 20);  // 16 MiB
  EXPECT_EQ(z.size(), size_t(8) << 20);
  EXPECT_EQ(z.resident_bytes(), 0u);
  z[0] = 7;
  z[size_t(5) << 20] = 9;
  EXPECT_EQ(z.resident_bytes(), 2 * page);
  z[1] = 8;  // the same page
  EXPECT_EQ(z.resident_bytes(), 2 * page);
  // Pages wholly from element 2 on are given back: the first stays, the other reads 0.
  z.release_from(2);
  EXPECT_EQ(z.resident_bytes(), page);
  EXPECT_EQ(z[0], 7);
  EXPECT_EQ(z[1], 8);
  EXPECT_EQ(z[size_t(5) << 20], 0);
  // Moved: the mapping goes along; assigned: a fresh one of zeros.
  ZeroPages<uint16_t> m = std::move(z);
  EXPECT_EQ(m[0], 7);
  EXPECT_EQ(z.size(), 0u);
  EXPECT_EQ(z.resident_bytes(), 0u);
  m.assign(100);
  EXPECT_EQ(m.size(), 100u);
  EXPECT_EQ(m[0], 0);
  ZeroPages<float> none(0);
  EXPECT_EQ(none.resident_bytes(), 0u);
}

// Pages of a file in memory mapped into another mapping: it reads them, its
// writes stay its own (copy on write), and only whole pages from a page
// boundary are taken.
TEST(ZeroPages, FilePagesAreMappedByReference) {
  const size_t page = page_bytes(), n = 4 * page;  // bytes
  ZeroPages<uint8_t> file(n, /*shared_file=*/true), a(n), b(n), anon(n);
  for (size_t i = 0; i < n; ++i) file[i] = uint8_t(i * 7 + 1);
  EXPECT_EQ(a.map_from(file, 0, 2 * page + 100), 2 * page);  // the whole pages
  EXPECT_EQ(b.map_from(file, page, 3 * page), 3 * page);
  EXPECT_EQ(a.map_from(file, 10, page), 0u);     // not at a page boundary
  EXPECT_EQ(a.map_from(anon, 0, 2 * page), 0u);  // not a file
  for (size_t i = 0; i < 2 * page; ++i) ASSERT_EQ(a[i], file[i]) << i;
  EXPECT_EQ(a[2 * page], 0);
  EXPECT_EQ(b[page - 1], 0);
  EXPECT_EQ(b[3 * page + 5], file[3 * page + 5]);
  a[5] = 0;  // a's own copy of the page
  EXPECT_EQ(file[5], uint8_t(5 * 7 + 1));
  EXPECT_EQ(b[page + 5], file[page + 5]);
  // The file may go: the mappings keep its pages.
  const uint8_t want = file[page + 9];
  file.clear();
  EXPECT_EQ(a[page + 9], want);
  EXPECT_EQ(b[page + 9], want);
}

}  // namespace
}  // namespace lr
