// Helpers shared by the GGUF tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "format/gguf.h"
#include "../error_of.h"

// msg contains sub.
#define EXPECT_HAS(msg, sub)                               \
  EXPECT_NE(std::string(msg).find(sub), std::string::npos) \
      << "message: " << (msg) << "\nexpected to contain: " << (sub)

namespace lr::gguf::test {

// Hand-built GGUF images (little-endian), for inputs the writer refuses to make.
struct Bytes {
  std::vector<uint8_t> b;

  Bytes& raw(const void* p, size_t n) {
    const auto* c = static_cast<const uint8_t*>(p);
    b.insert(b.end(), c, c + n);
    return *this;
  }
  Bytes& u8(uint8_t v) { return raw(&v, 1); }
  Bytes& u32(uint32_t v) { return raw(&v, 4); }
  Bytes& u64(uint64_t v) { return raw(&v, 8); }
  Bytes& str(std::string_view s) {
    u64(s.size());
    return raw(s.data(), s.size());
  }
  Bytes& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    return raw("GGUF", 4).u32(version).u64(n_tensors).u64(n_kv);
  }
  Bytes& kv_u32(std::string_view key, uint32_t v) {
    return str(key).u32(uint32_t(ValueType::UINT32)).u32(v);
  }
  Bytes& kv_str(std::string_view key, std::string_view v) {
    return str(key).u32(uint32_t(ValueType::STRING)).str(v);
  }
  Bytes& tensor(std::string_view name, std::initializer_list<uint64_t> dims, uint32_t type,
                uint64_t offset) {
    str(name).u32(uint32_t(dims.size()));
    for (uint64_t d : dims) u64(d);
    return u32(type).u64(offset);
  }
  Bytes& pad(size_t alignment = 32) {
    while (b.size() % alignment) b.push_back(0);
    return *this;
  }
  Bytes& zeros(size_t n) {
    b.insert(b.end(), n, 0);
    return *this;
  }
};

// Parses `bytes` as "bad.gguf" and returns the error message ("" and a test
// failure if it parsed). Also checks the message is one line naming the file.
inline std::string parse_error(std::vector<uint8_t> bytes) {
  try {
    File::from_bytes(std::move(bytes), "bad.gguf");
  } catch (const lr::Error& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.rfind("bad.gguf: ", 0), 0u) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    return msg;
  }
  ADD_FAILURE() << "parsed without error";
  return "";
}

// The message of the lr::Error thrown by f ("" and a failure if none).
using lr::test::error_of;

inline Value int_value(ValueType t, int64_t i) {
  Value v;
  v.type = t;
  v.i = i;
  return v;
}
inline Value float_value(ValueType t, double f) {
  Value v;
  v.type = t;
  v.f = f;
  return v;
}
inline Value string_value(std::string s) {
  Value v;
  v.type = ValueType::STRING;
  v.s = std::move(s);
  return v;
}
inline Value int_array(ValueType elem, std::vector<int64_t> xs) {
  Value v;
  v.type = ValueType::ARRAY;
  v.elem = elem;
  v.ints = std::move(xs);
  return v;
}
inline Value float_array(ValueType elem, std::vector<double> xs) {
  Value v;
  v.type = ValueType::ARRAY;
  v.elem = elem;
  v.floats = std::move(xs);
  return v;
}
inline Value string_array(std::vector<std::string> xs) {
  Value v;
  v.type = ValueType::ARRAY;
  v.elem = ValueType::STRING;
  v.strs = std::move(xs);
  return v;
}
inline Value array_of_arrays(std::vector<Value> xs) {
  Value v;
  v.type = ValueType::ARRAY;
  v.elem = ValueType::ARRAY;
  v.items = std::move(xs);
  return v;
}

inline uint64_t bits(double d) {
  uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
}

// Value equality with floats compared bit for bit (so NaNs compare).
inline bool same(const Value& a, const Value& b) {
  if (a.type != b.type || a.i != b.i || bits(a.f) != bits(b.f) || a.s != b.s || a.strs != b.strs ||
      a.ints != b.ints || a.floats.size() != b.floats.size() || a.items.size() != b.items.size() ||
      (a.type == ValueType::ARRAY && a.elem != b.elem))
    return false;
  for (size_t k = 0; k < a.floats.size(); ++k)
    if (bits(a.floats[k]) != bits(b.floats[k])) return false;
  for (size_t k = 0; k < a.items.size(); ++k)
    if (!same(a.items[k], b.items[k])) return false;
  return true;
}

}  // namespace lr::gguf::test
