// Helpers shared by the GGUF reader (gguf.cpp) and writer (gguf_writer.cpp).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "format/gguf.h"

namespace lr::gguf::detail {

inline constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
inline constexpr uint32_t kMaxValueType = uint32_t(ValueType::FLOAT64);
inline constexpr uint64_t kMaxAlignment = uint64_t(1) << 31;  // largest u32 power of two

inline bool known_value_type(uint32_t t) {
  return t <= kMaxValueType;
}

inline bool is_integer(ValueType t) {
  switch (t) {
    case ValueType::UINT8:
    case ValueType::INT8:
    case ValueType::UINT16:
    case ValueType::INT16:
    case ValueType::UINT32:
    case ValueType::INT32:
    case ValueType::UINT64:
    case ValueType::INT64:
      return true;
    default:
      return false;
  }
}
inline bool is_float(ValueType t) {
  return t == ValueType::FLOAT32 || t == ValueType::FLOAT64;
}

// Encoded size of a fixed-size scalar; 0 for STRING and ARRAY.
inline uint64_t scalar_size(ValueType t) {
  switch (t) {
    case ValueType::UINT8:
    case ValueType::INT8:
    case ValueType::BOOL:
      return 1;
    case ValueType::UINT16:
    case ValueType::INT16:
      return 2;
    case ValueType::UINT32:
    case ValueType::INT32:
    case ValueType::FLOAT32:
      return 4;
    case ValueType::UINT64:
    case ValueType::INT64:
    case ValueType::FLOAT64:
      return 8;
    default:
      return 0;
  }
}

// Smallest possible encoding of one item of type t (string: its length field;
// array: element type + count).
inline uint64_t min_encoded_size(ValueType t) {
  if (t == ValueType::STRING) return 8;
  if (t == ValueType::ARRAY) return 12;
  return scalar_size(t);
}

// f32 <-> f64 by bit manipulation for NaNs, so a signalling NaN's payload
// survives the round trip through Value::f (hardware conversion would quiet it).
inline double f32_bits_to_double(uint32_t u) {
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) {
    uint64_t d = uint64_t(u >> 31) << 63 | uint64_t(0x7ff) << 52 | uint64_t(u & 0x007fffffu) << 29;
    double r;
    std::memcpy(&r, &d, 8);
    return r;
  }
  float f;
  std::memcpy(&f, &u, 4);
  return double(f);
}

inline uint32_t double_to_f32_bits(double v) {
  uint64_t d;
  std::memcpy(&d, &v, 8);
  if ((d & 0x7ff0000000000000ull) == 0x7ff0000000000000ull && (d & 0x000fffffffffffffull) != 0) {
    uint32_t mant = uint32_t((d >> 29) & 0x007fffffu);
    if (mant == 0) mant = 0x00400000u;  // payload only in the low bits: keep it a NaN
    return uint32_t(d >> 63) << 31 | 0x7f800000u | mant;
  }
  float f = float(v);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// "ARRAY[STRING]" for arrays, the type name otherwise.
std::string describe_type(const Value& v);

}  // namespace lr::gguf::detail
