#include "core/zero_pages.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <utility>
#include <vector>

#include "core/error.h"

namespace lr {

namespace {
size_t page_size() {
  static const size_t p = size_t(sysconf(_SC_PAGESIZE));
  return p;
}
}  // namespace

ZeroMap::ZeroMap(size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  // MAP_NORESERVE: no swap is set aside for what may never be written.
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  p_ = p;
  // Small pages, so RAM follows the positions written page by page also
  // where transparent huge pages are on for every mapping (advice only).
  madvise(p_, bytes_, MADV_NOHUGEPAGE);
}

ZeroMap::ZeroMap(ZeroMap&& o) noexcept
    : p_(std::exchange(o.p_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

ZeroMap& ZeroMap::operator=(ZeroMap&& o) noexcept {
  if (this != &o) {
    if (p_) munmap(p_, bytes_);
    p_ = std::exchange(o.p_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

ZeroMap::~ZeroMap() {
  if (p_) munmap(p_, bytes_);
}

uint64_t ZeroMap::resident_bytes() const {
  if (!p_) return 0;
  const size_t page = page_size(), pages = (bytes_ + page - 1) / page;
  std::vector<unsigned char> in(pages);
  const int rc = mincore(p_, bytes_, in.data());
  LR_ASSERT(rc == 0);
  uint64_t n = 0;
  for (unsigned char c : in) n += c & 1;
  return n * page;
}

void ZeroMap::release_from(size_t from) {
  const size_t page = page_size();
  const size_t first = (from + page - 1) / page * page;
  if (!p_ || first >= bytes_) return;
  const int rc = madvise(static_cast<char*>(p_) + first, bytes_ - first, MADV_DONTNEED);
  LR_ASSERT(rc == 0);
}

}  // namespace lr
