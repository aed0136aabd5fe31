#include "core/zero_pages.h"

#include <sys/mman.h>
#include <unistd.h>

#include <new>
#include <utility>
#include <vector>

#include "core/error.h"

namespace lr {

size_t page_bytes() {
  static const size_t p = size_t(sysconf(_SC_PAGESIZE));
  return p;
}

ZeroMap::ZeroMap(size_t bytes, bool shared_file) : bytes_(bytes) {
  if (bytes == 0) return;
  void* p = MAP_FAILED;
  if (shared_file) {
    fd_ = memfd_create("lowrank-kv", MFD_CLOEXEC);
    if (fd_ >= 0 && ftruncate(fd_, off_t(bytes)) == 0)
      p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  } else {
    // MAP_NORESERVE: no swap is set aside for what may never be written.
    p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
             -1, 0);
  }
  if (p == MAP_FAILED) {
    if (fd_ >= 0) close(fd_);
    throw std::bad_alloc();
  }
  p_ = p;
  // Small pages, so RAM follows the positions written page by page also
  // where transparent huge pages are on for every mapping (advice only).
  if (!shared_file) madvise(p_, bytes_, MADV_NOHUGEPAGE);
}

ZeroMap::ZeroMap(ZeroMap&& o) noexcept
    : p_(std::exchange(o.p_, nullptr)),
      bytes_(std::exchange(o.bytes_, 0)),
      fd_(std::exchange(o.fd_, -1)) {}

ZeroMap& ZeroMap::operator=(ZeroMap&& o) noexcept {
  if (this != &o) {
    this->~ZeroMap();
    p_ = std::exchange(o.p_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

ZeroMap::~ZeroMap() {
  if (p_) munmap(p_, bytes_);
  if (fd_ >= 0) close(fd_);
  p_ = nullptr;
  fd_ = -1;
}

uint64_t ZeroMap::resident_bytes() const {
  if (!p_) return 0;
  const size_t page = page_bytes(), pages = (bytes_ + page - 1) / page;
  std::vector<unsigned char> in(pages);
  const int rc = mincore(p_, bytes_, in.data());
  LR_ASSERT(rc == 0);
  uint64_t n = 0;
  for (unsigned char c : in) n += c & 1;
  return n * page;
}

void ZeroMap::release_from(size_t from) {
  const size_t page = page_bytes();
  const size_t first = (from + page - 1) / page * page;
  if (!p_ || first >= bytes_) return;
  const int rc = madvise(static_cast<char*>(p_) + first, bytes_ - first, MADV_DONTNEED);
  LR_ASSERT(rc == 0);
}

size_t ZeroMap::map_from(const ZeroMap& src, size_t offset, size_t n) {
  const size_t page = page_bytes();
  LR_ASSERT(offset + n <= bytes_ && offset + n <= src.bytes_);
  const size_t len = n / page * page;
  if (src.fd_ < 0 || !p_ || offset % page != 0 || len == 0) return 0;
  void* at = static_cast<char*>(p_) + offset;
  void* p = mmap(at, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, src.fd_, off_t(offset));
  LR_ASSERT(p == at);
  return len;
}

}  // namespace lr
