#include "format/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace lr {

std::unique_ptr<MappedFile> MappedFile::open(const std::string& path) {
  std::unique_ptr<MappedFile> f(new MappedFile);
  f->path_ = path;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    const int e = errno;
    ::close(fd);
    fail("{}: cannot stat: {}", path, std::strerror(e));
  }
  if (!S_ISREG(sb.st_mode)) {
    ::close(fd);
    fail("{}: not a regular file", path);
  }
  f->size_ = uint64_t(sb.st_size);
  if (f->size_ == 0) {  // nothing to map; readers say why an empty file is not theirs
    ::close(fd);
    return f;
  }
  void* m = mmap(nullptr, size_t(f->size_), PROT_READ, MAP_PRIVATE, fd, 0);
  int e = errno;
  ::close(fd);
  if (m == MAP_FAILED) fail("{}: cannot mmap {} bytes: {}", path, f->size_, std::strerror(e));
  f->map_ = m;
  f->base_ = static_cast<const uint8_t*>(m);
  return f;
}

std::unique_ptr<MappedFile> MappedFile::from_bytes(std::vector<uint8_t> bytes, std::string name) {
  std::unique_ptr<MappedFile> f(new MappedFile);
  f->path_ = std::move(name);
  f->owned_ = std::move(bytes);
  f->base_ = f->owned_.data();
  f->size_ = f->owned_.size();
  return f;
}

void MappedFile::release(const uint8_t* p, uint64_t n) const {
  if (!map_ || p < base_ || p + n > base_ + size_) return;
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t b = (uintptr_t(p) + page - 1) / page * page, e = (uintptr_t(p) + n) / page * page;
  if (e > b) madvise(reinterpret_cast<void*>(b), e - b, MADV_DONTNEED);
}

MappedFile::~MappedFile() {
  if (map_) munmap(map_, size_t(size_));
}

}  // namespace lr
