// A read-only file image: mmap'd from a path, or an owned byte vector (tests,
// fuzzing). Errors name the path. An empty file is an empty image (size 0):
// the format readers say why that is not their format.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace lr {

class MappedFile {
 public:
  static std::unique_ptr<MappedFile> open(const std::string& path);
  static std::unique_ptr<MappedFile> from_bytes(std::vector<uint8_t> bytes, std::string name);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  const uint8_t* data() const { return base_; }
  uint64_t size() const { return size_; }
  // The whole pages of [p, p + n) leave this process's memory (madvise
  // DONTNEED): a caller that copied them says it needs them no more. They stay
  // valid: touched again, they are read back from the file. Nothing happens
  // for an image held in memory (from_bytes).
  void release(const uint8_t* p, uint64_t n) const;

 private:
  MappedFile() = default;
  std::string path_;
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  void* map_ = nullptr;
  std::vector<uint8_t> owned_;
};

}  // namespace lr
