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

// The untyped mapping.
class ZeroMap {
 public:
  ZeroMap() = default;
  explicit ZeroMap(size_t bytes);
  ZeroMap(ZeroMap&& o) noexcept;
  ZeroMap& operator=(ZeroMap&& o) noexcept;
  ZeroMap(const ZeroMap&) = delete;
  ZeroMap& operator=(const ZeroMap&) = delete;
  ~ZeroMap();

  void* data() const { return p_; }
  size_t bytes() const { return bytes_; }
  // Bytes of it in RAM now (whole pages).
  uint64_t resident_bytes() const;
  // Gives back the pages that lie wholly at or after byte `from`: they read as zeros again.
  void release_from(size_t from);

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

// n elements of E, zeros until written.
template <typename E>
class ZeroPages {
  static_assert(std::is_trivially_copyable_v<E>);

 public:
  ZeroPages() = default;
  explicit ZeroPages(size_t n) : m_(n * sizeof(E)), n_(n) {}
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

 private:
  ZeroMap m_;
  size_t n_ = 0;
};

}  // namespace lr
