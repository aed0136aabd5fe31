// Memory that reads as zeros and takes RAM only where it has been written:
// an anonymous mapping, whose pages the OS provides on first touch. A KV
// cache is sized for its whole context, yet holds RAM for the positions it
// has used (as vAttention keeps each sequence's cache contiguous in virtual
// memory and commits physical pages as it grows); a slot's RAM is what its
// requests used, not its context.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

namespace lr {

// The untyped mapping: private anonymous memory, or (shared_file) the pages
// of a file in memory (memfd) that other mappings can take by reference:
// map_from puts a file's pages in place of a range of this one, copy on
// write (a stored prompt prefix mapped into the slots that use it).
class ZeroMap {
 public:
  ZeroMap() = default;
  explicit ZeroMap(size_t bytes, bool shared_file = false);
  ZeroMap(ZeroMap&& o) noexcept;
  ZeroMap& operator=(ZeroMap&& o) noexcept;
  ZeroMap(const ZeroMap&) = delete;
  ZeroMap& operator=(const ZeroMap&) = delete;
  ~ZeroMap();

  void* data() const { return p_; }
  size_t bytes() const { return bytes_; }
  // Bytes of it in RAM now (whole pages; pages mapped from a file count in
  // every mapping that holds them).
  uint64_t resident_bytes() const;
  // Gives back the pages that lie wholly at or after byte `from`: they read
  // as zeros again (pages mapped from a file: as the file holds them).
  void release_from(size_t from);
  // Bytes [offset, offset + n) of src's file in place of the same bytes of
  // this mapping, as far as whole pages go: offset must start a page (else
  // nothing is mapped). Returns the bytes mapped (a whole number of pages;
  // 0 where src is not a file). Writes to them stay in this mapping.
  size_t map_from(const ZeroMap& src, size_t offset, size_t n);

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
  int fd_ = -1;  // shared_file: the memfd
};

// The page size, in bytes.
size_t page_bytes();

// n elements of E, zeros until written.
template <typename E>
class ZeroPages {
  static_assert(std::is_trivially_copyable_v<E>);

 public:
  ZeroPages() = default;
  explicit ZeroPages(size_t n, bool shared_file = false) : m_(n * sizeof(E), shared_file), n_(n) {}
  ZeroPages(ZeroPages&& o) noexcept : m_(std::move(o.m_)), n_(std::exchange(o.n_, 0)) {}
  ZeroPages& operator=(ZeroPages&& o) noexcept {
    m_ = std::move(o.m_);
    n_ = std::exchange(o.n_, 0);
    return *this;
  }
  // n zeros, in a fresh mapping (what was held is given back).
  void assign(size_t n) { *this = ZeroPages(n); }
  void clear() { *this = ZeroPages(); }

  E* data() { return static_cast<E*>(m_.data()); }
  const E* data() const { return static_cast<const E*>(m_.data()); }
  size_t size() const { return n_; }
  E& operator[](size_t i) { return data()[i]; }
  const E& operator[](size_t i) const { return data()[i]; }
  uint64_t resident_bytes() const { return m_.resident_bytes(); }
  // Elements [from, size) read as zeros again, their whole pages given back.
  void release_from(size_t from) { m_.release_from(from * sizeof(E)); }
  // Elements [from, from + n) of src (a shared_file one of the same size) by
  // reference, whole pages of them (ZeroMap::map_from): how many were mapped.
  size_t map_from(const ZeroPages& src, size_t from, size_t n) {
    return m_.map_from(src.m_, from * sizeof(E), n * sizeof(E)) / sizeof(E);
  }

 private:
  ZeroMap m_;
  size_t n_ = 0;
};

}  // namespace lr
