// MappedFile::release: the pages of a copied range leave the process's
// resident memory (the mapping's Rss in smaps) and read back from the file when touched again;
// an image held in memory (from_bytes) is never released (its bytes would
// be lost).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "format/mapped_file.h"

namespace lr {
namespace {

// The resident memory of the one mapping that holds `p` (its Rss line in
// /proc/self/smaps), KiB; -1 when no mapping holds it. Per mapping, so pages
// of code or libraries faulted in meanwhile do not count.
long mapping_rss_kb(const void* p) {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  std::ifstream in("/proc/self/smaps");
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find('-') < 17) {
      inside = lo <= addr && addr < hi;
    } else if (inside && line.rfind("Rss:", 0) == 0) {
      return std::stol(line.substr(4));
    }
  }
  return -1;
}

TEST(MappedFile, ReleasedPagesLeaveAndReadBack) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("lowrank-mapped-" + std::to_string(::getpid())))
          .string();
  std::vector<uint8_t> bytes(16 << 20);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = uint8_t(i * 7 + i / 4096);
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), long(bytes.size()));
  {
    auto f = MappedFile::open(path);
    const uint8_t* p = f->data();
    const long before = mapping_rss_kb(p);
    ASSERT_GE(before, 0) << "the mapping is not in /proc/self/smaps";
    uint64_t sum = 0;
    for (size_t i = 0; i < bytes.size(); i += 4096) sum += p[i];  // touch every page
    EXPECT_GT(sum, 0u);
    EXPECT_EQ(mapping_rss_kb(p), 16 * 1024);
    f->release(p + 100, bytes.size() - 200);  // edges not page-aligned: the whole pages inside
    // At most the first and the last page stay (a kernel with large page-cache
    // folios may drop those too).
    EXPECT_LE(mapping_rss_kb(p), 8);
    for (size_t i = 0; i < bytes.size(); ++i)
      ASSERT_EQ(p[i], bytes[i]) << i;  // read back from the file
  }
  std::remove(path.c_str());

  auto m = MappedFile::from_bytes(bytes, "in-memory");
  m->release(m->data(), m->size());
  for (size_t i = 0; i < bytes.size(); ++i) ASSERT_EQ(m->data()[i], bytes[i]) << i;
}

}  // namespace
}  // namespace lr
