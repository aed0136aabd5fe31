// A read-only ZIP archive of stored (uncompressed) entries, as torch.save
// writes its checkpoints. ZIP64 is read; compressed entries, encrypted
// entries and multi-disk archives are refused with a message. Every offset
// and size is checked against the file.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "format/mapped_file.h"

namespace lr {

class ZipArchive {
 public:
  struct Entry {
    std::string name;
    uint64_t offset = 0;  // of the entry's data within the file
    uint64_t size = 0;
  };

  static std::unique_ptr<ZipArchive> open(const std::string& path);
  static std::unique_ptr<ZipArchive> from_bytes(std::vector<uint8_t> bytes, std::string name);
  static std::unique_ptr<ZipArchive> from_file(std::unique_ptr<MappedFile> file);

  const std::string& path() const { return file_->path(); }
  const std::vector<Entry>& entries() const { return entries_; }
  const Entry* find(std::string_view name) const;
  const uint8_t* data(const Entry& e) const { return file_->data() + e.offset; }
  const MappedFile& file() const { return *file_; }

 private:
  explicit ZipArchive(std::unique_ptr<MappedFile> f);
  void parse();

  std::unique_ptr<MappedFile> file_;
  std::vector<Entry> entries_;
};

}  // namespace lr
