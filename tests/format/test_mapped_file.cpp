// MappedFile::release: the pages of a copied range leave the process's
// resident memory (RssFile) and read back from the file when touched again;
// an image held in memory (from_bytes) is never released (its bytes would
// be lost).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "format/mapped_file.h"

namespace lr {
namespace {

// This process's resident file-backed memory (RssFile in /proc/self/status), KiB.
long rss_file_kb() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("RssFile:", 0) == 0) return std::stol(line.substr(8));
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
    const long before = rss_file_kb();
    ASSERT_GE(before, 0) << "no RssFile in /proc/self/status";
    uint64_t sum = 0;
    for (size_t i = 0; i < bytes.size(); i += 4096) sum += p[i];  // touch every page
    EXPECT_GT(sum, 0u);
    const long touched = rss_file_kb();
    EXPECT_GE(touched - before, 15 * 1024);
    f->release(p + 100, bytes.size() - 200);  // edges not page-aligned: the whole pages inside
    EXPECT_LE(rss_file_kb() - before, 64);
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
