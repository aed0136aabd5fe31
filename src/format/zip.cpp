#include "format/zip.h"

#include <algorithm>
#include <unordered_set>

#include "core/error.h"

namespace lr {

namespace {

constexpr uint32_t kEocd = 0x06054b50, kEocd64 = 0x06064b50, kLocator64 = 0x07064b50;
constexpr uint32_t kCentral = 0x02014b50, kLocal = 0x04034b50;
constexpr size_t kEocdSize = 22, kMaxComment = 65535;

// Little-endian reads at [at, at + n), checked against the file.
struct Reader {
  const uint8_t* base;
  uint64_t size;
  const std::string& path;
  uint64_t u(uint64_t at, int n, const char* what) const {
    if (at > size || uint64_t(n) > size - at)
      fail("{}: zip {} at offset {} runs past the end of the file ({} bytes)", path, what, at, size);
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = v << 8 | base[at + uint64_t(i)];
    return v;
  }
};

}  // namespace

ZipArchive::ZipArchive(std::unique_ptr<MappedFile> f) : file_(std::move(f)) {}

std::unique_ptr<ZipArchive> ZipArchive::from_file(std::unique_ptr<MappedFile> file) {
  std::unique_ptr<ZipArchive> z(new ZipArchive(std::move(file)));
  z->parse();
  return z;
}

std::unique_ptr<ZipArchive> ZipArchive::open(const std::string& path) { return from_file(MappedFile::open(path)); }

std::unique_ptr<ZipArchive> ZipArchive::from_bytes(std::vector<uint8_t> bytes, std::string name) {
  return from_file(MappedFile::from_bytes(std::move(bytes), std::move(name)));
}

const ZipArchive::Entry* ZipArchive::find(std::string_view name) const {
  for (const Entry& e : entries_)
    if (e.name == name) return &e;
  return nullptr;
}

void ZipArchive::parse() {
  const std::string& p = file_->path();
  const Reader r{file_->data(), file_->size(), p};
  const uint64_t size = file_->size();
  if (size < kEocdSize) fail("{}: not a zip archive ({} bytes, too short)", p, size);
  // The end-of-central-directory record: the last signature within the
  // final 22 + 65535 bytes whose comment length reaches the end exactly.
  uint64_t eocd = UINT64_MAX;
  const uint64_t lowest = size > kEocdSize + kMaxComment ? size - kEocdSize - kMaxComment : 0;
  for (uint64_t at = size - kEocdSize + 1; at-- > lowest;) {
    if (r.u(at, 4, "record") == kEocd && at + kEocdSize + r.u(at + 20, 2, "comment length") == size) {
      eocd = at;
      break;
    }
  }
  if (eocd == UINT64_MAX) fail("{}: not a zip archive (no end-of-central-directory record)", p);
  if (r.u(eocd + 4, 2, "disk number") != 0 || r.u(eocd + 6, 2, "disk number") != 0)
    fail("{}: multi-disk zip archives are not supported", p);
  uint64_t n = r.u(eocd + 10, 2, "entry count");
  uint64_t cd_size = r.u(eocd + 12, 4, "directory size");
  uint64_t cd_off = r.u(eocd + 16, 4, "directory offset");
  if (n == 0xffff || cd_size == 0xffffffff || cd_off == 0xffffffff) {  // ZIP64
    if (eocd < 20 || r.u(eocd - 20, 4, "zip64 locator") != kLocator64)
      fail("{}: zip64 archive without a zip64 end-of-directory locator", p);
    const uint64_t z = r.u(eocd - 20 + 8, 8, "zip64 record offset");
    if (r.u(z, 4, "zip64 record") != kEocd64) fail("{}: bad zip64 end-of-directory record at {}", p, z);
    n = r.u(z + 32, 8, "zip64 entry count");
    cd_size = r.u(z + 40, 8, "zip64 directory size");
    cd_off = r.u(z + 48, 8, "zip64 directory offset");
  }
  if (cd_off > size || cd_size > size - cd_off)
    fail("{}: central directory [{}, +{}) lies outside the file ({} bytes)", p, cd_off, cd_size, size);
  if (n > cd_size / 46) fail("{}: {} entries cannot fit a central directory of {} bytes", p, n, cd_size);
  std::unordered_set<std::string> names;
  uint64_t at = cd_off;
  for (uint64_t i = 0; i < n; ++i) {
    if (at + 46 > cd_off + cd_size) fail("{}: central directory entry {} runs past the directory's end", p, i);
    if (r.u(at, 4, "directory entry") != kCentral) fail("{}: bad central directory entry {} at offset {}", p, i, at);
    const uint64_t flags = r.u(at + 8, 2, "flags"), method = r.u(at + 10, 2, "method");
    uint64_t csize = r.u(at + 20, 4, "size"), usize = r.u(at + 24, 4, "size");
    const uint64_t nlen = r.u(at + 28, 2, "name length"), elen = r.u(at + 30, 2, "extra length"),
                   clen = r.u(at + 32, 2, "comment length");
    uint64_t local = r.u(at + 42, 4, "local header offset");
    if (at + 46 + nlen + elen + clen > cd_off + cd_size)
      fail("{}: central directory entry {} runs past the directory's end", p, i);
    if (at + 46 + nlen > size) fail("{}: entry {} name runs past the end of the file", p, i);
    std::string name(reinterpret_cast<const char*>(file_->data() + at + 46), size_t(nlen));
    // ZIP64 extra field: the 64-bit values of the fields that read 0xffffffff, in order.
    for (uint64_t x = at + 46 + nlen, xend = x + elen; x + 4 <= xend;) {
      const uint64_t id = r.u(x, 2, "extra id"), len = r.u(x + 2, 2, "extra length");
      if (x + 4 + len > xend) fail("{}: entry '{}': extra field runs past its end", p, name);
      if (id == 0x0001) {
        uint64_t f = x + 4;
        auto next = [&](uint64_t& v) {
          if (v != 0xffffffff) return;
          if (f + 8 > x + 4 + len) fail("{}: entry '{}': short zip64 extra field", p, name);
          v = r.u(f, 8, "zip64 value");
          f += 8;
        };
        next(usize);
        next(csize);
        next(local);
      }
      x += 4 + len;
    }
    if (flags & 1) fail("{}: entry '{}' is encrypted", p, name);
    if (method != 0)
      fail("{}: entry '{}' is compressed (method {}); only stored entries are read (torch.save writes them stored)",
           p, name, method);
    if (csize != usize) fail("{}: stored entry '{}' has sizes {} and {}", p, name, csize, usize);
    if (r.u(local, 4, "local header") != kLocal) fail("{}: entry '{}': bad local header at {}", p, name, local);
    const uint64_t data = local + 30 + r.u(local + 26, 2, "name length") + r.u(local + 28, 2, "extra length");
    if (data > size || usize > size - data)
      fail("{}: entry '{}' data [{}, +{}) lies outside the file ({} bytes)", p, name, data, usize, size);
    if (!names.insert(name).second) fail("{}: duplicate entry '{}'", p, name);
    entries_.push_back({std::move(name), data, usize});
    at += 46 + nlen + elen + clen;
  }
}

}  // namespace lr
