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

}  // namespace
}  // namespace lr
