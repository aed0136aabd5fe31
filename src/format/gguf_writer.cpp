// GGUF v3 writer. Values are validated when set, tensors when added, so
// serialisation itself cannot fail except on I/O.
#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "format/gguf.h"
#include "format/gguf_internal.h"

namespace lr::gguf {

namespace {

bool int_fits(ValueType t, int64_t v) {
  switch (t) {
    case ValueType::UINT8:
      return v >= 0 && v <= 0xff;
    case ValueType::INT8:
      return v >= -128 && v <= 127;
    case ValueType::UINT16:
      return v >= 0 && v <= 0xffff;
    case ValueType::INT16:
      return v >= -32768 && v <= 32767;
    case ValueType::UINT32:
      return v >= 0 && v <= 0xffffffffll;
    case ValueType::INT32:
      return v >= std::numeric_limits<int32_t>::min() && v <= std::numeric_limits<int32_t>::max();
    case ValueType::BOOL:
      return v == 0 || v == 1;
    default:
      return true;  // UINT64 (bit-cast), INT64
  }
}

void validate(const std::string& key, const Value& v, int depth) {
  if (!detail::known_value_type(uint32_t(v.type)))
    fail("gguf writer: metadata key '{}' has unknown value type {}", key, uint32_t(v.type));
  if (v.type != ValueType::ARRAY) {
    if (!int_fits(v.type, v.i))
      fail("gguf writer: metadata key '{}': value {} is out of range for {}", key, v.i,
           value_type_name(v.type));
    return;
  }
  if (depth >= kMaxArrayDepth)
    fail("gguf writer: metadata key '{}': arrays nested deeper than {} levels", key,
         kMaxArrayDepth);
  if (!detail::known_value_type(uint32_t(v.elem)))
    fail("gguf writer: metadata key '{}': array has unknown element type {}", key,
         uint32_t(v.elem));
  // Items must live in the vector that matches the element type.
  bool want_ints =
      !detail::is_float(v.elem) && v.elem != ValueType::STRING && v.elem != ValueType::ARRAY;
  if ((!want_ints && !v.ints.empty()) || (!detail::is_float(v.elem) && !v.floats.empty()) ||
      (v.elem != ValueType::STRING && !v.strs.empty()) ||
      (v.elem != ValueType::ARRAY && !v.items.empty()))
    fail("gguf writer: metadata key '{}': array of {} has items in a field of another kind", key,
         value_type_name(v.elem));
  if (want_ints)
    for (int64_t x : v.ints)
      if (!int_fits(v.elem, x))
        fail("gguf writer: metadata key '{}': array item {} is out of range for {}", key, x,
             value_type_name(v.elem));
  if (v.elem == ValueType::ARRAY)
    for (const Value& item : v.items) {
      if (item.type != ValueType::ARRAY)
        fail("gguf writer: metadata key '{}': array of ARRAY holds an item of type {}", key,
             value_type_name(item.type));
      validate(key, item, depth + 1);
    }
}

// Little-endian encoder over a sink.
class Enc {
 public:
  explicit Enc(const std::function<void(const void*, size_t)>& put) : put_(put) {}
  uint64_t pos() const { return pos_; }
  void bytes(const void* p, size_t n) {
    if (n) put_(p, n);
    pos_ += n;
  }
  template <typename T>
  void pod(T v) {
    bytes(&v, sizeof v);
  }
  void str(std::string_view s) {
    pod<uint64_t>(s.size());
    bytes(s.data(), s.size());
  }
  void pad_to(uint64_t alignment) {
    static constexpr uint8_t zeros[256] = {};
    uint64_t pad = (alignment - pos_ % alignment) % alignment;
    while (pad) {
      size_t n = size_t(std::min<uint64_t>(pad, sizeof zeros));
      bytes(zeros, n);
      pad -= n;
    }
  }

  void scalar(ValueType t, int64_t i, double f) {
    switch (t) {
      case ValueType::UINT8:
      case ValueType::INT8:
      case ValueType::BOOL:
        pod(uint8_t(i));
        break;
      case ValueType::UINT16:
      case ValueType::INT16:
        pod(uint16_t(i));
        break;
      case ValueType::UINT32:
      case ValueType::INT32:
        pod(uint32_t(i));
        break;
      case ValueType::UINT64:
      case ValueType::INT64:
        pod(uint64_t(i));
        break;
      case ValueType::FLOAT32:
        pod(detail::double_to_f32_bits(f));
        break;
      case ValueType::FLOAT64:
        pod(f);
        break;
      default:
        LR_ASSERT(false && "not a fixed-size scalar");
    }
  }

  void array(const Value& v) {
    pod<uint32_t>(uint32_t(v.elem));
    pod<uint64_t>(v.array_size());
    switch (v.elem) {
      case ValueType::STRING:
        for (const std::string& s : v.strs) str(s);
        break;
      case ValueType::ARRAY:
        for (const Value& item : v.items) array(item);
        break;
      case ValueType::FLOAT32:
      case ValueType::FLOAT64:
        for (double f : v.floats) scalar(v.elem, 0, f);
        break;
      default:
        for (int64_t i : v.ints) scalar(v.elem, i, 0);
        break;
    }
  }

  void value(const Value& v) {
    pod<uint32_t>(uint32_t(v.type));
    if (v.type == ValueType::STRING)
      str(v.s);
    else if (v.type == ValueType::ARRAY)
      array(v);
    else
      scalar(v.type, v.i, v.f);
  }

 private:
  const std::function<void(const void*, size_t)>& put_;
  uint64_t pos_ = 0;
};

Value int_value(ValueType t, int64_t i) {
  Value v;
  v.type = t;
  v.i = i;
  return v;
}

}  // namespace

void Writer::set(std::string key, Value v) {
  validate(key, v, 0);
  if (key == "general.alignment") {
    if (v.type != ValueType::UINT32)
      fail("gguf writer: general.alignment has type {}, expected UINT32", detail::describe_type(v));
    uint64_t a = uint64_t(v.i);
    if (a == 0 || (a & (a - 1)) != 0)
      fail("gguf writer: general.alignment must be a nonzero power of two, got {}", a);
  }
  for (auto& [k, old] : kv_)
    if (k == key) {
      old = std::move(v);
      return;
    }
  kv_.emplace_back(std::move(key), std::move(v));
}

void Writer::set_string(std::string key, std::string v) {
  Value val;
  val.type = ValueType::STRING;
  val.s = std::move(v);
  set(std::move(key), std::move(val));
}
void Writer::set_u32(std::string key, uint32_t v) {
  set(std::move(key), int_value(ValueType::UINT32, v));
}
void Writer::set_i32(std::string key, int32_t v) {
  set(std::move(key), int_value(ValueType::INT32, v));
}
void Writer::set_u64(std::string key, uint64_t v) {
  set(std::move(key), int_value(ValueType::UINT64, int64_t(v)));
}
void Writer::set_f32(std::string key, float v) {
  Value val;
  val.type = ValueType::FLOAT32;
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  val.f = detail::f32_bits_to_double(bits);
  set(std::move(key), std::move(val));
}
void Writer::set_bool(std::string key, bool v) {
  set(std::move(key), int_value(ValueType::BOOL, v ? 1 : 0));
}
void Writer::set_strings(std::string key, std::vector<std::string> v) {
  Value val;
  val.type = ValueType::ARRAY;
  val.elem = ValueType::STRING;
  val.strs = std::move(v);
  set(std::move(key), std::move(val));
}
void Writer::set_i32s(std::string key, std::vector<int32_t> v) {
  Value val;
  val.type = ValueType::ARRAY;
  val.elem = ValueType::INT32;
  val.ints.assign(v.begin(), v.end());
  set(std::move(key), std::move(val));
}
void Writer::set_f32s(std::string key, std::vector<float> v) {
  Value val;
  val.type = ValueType::ARRAY;
  val.elem = ValueType::FLOAT32;
  val.floats.reserve(v.size());
  for (float f : v) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    val.floats.push_back(detail::f32_bits_to_double(bits));
  }
  set(std::move(key), std::move(val));
}

void Writer::add_tensor(std::string name, DType dtype, std::vector<uint64_t> shape,
                        const void* data, uint64_t nbytes) {
  const uint64_t expect = check_tensor(name, dtype, shape);
  if (nbytes != expect)
    fail("gguf writer: tensor '{}' ({} {}): got {} bytes, expected {}", name, dtype_name(dtype),
         fmt::format("[{}]", fmt::join(shape, ", ")), nbytes, expect);
  if (nbytes && !data) fail("gguf writer: tensor '{}': null data", name);
  Tensor t{std::move(name), dtype, std::move(shape), {}, nbytes, {}};
  const auto* p = static_cast<const uint8_t*>(data);
  t.bytes.assign(p, p + nbytes);
  tensors_.push_back(std::move(t));
}

void Writer::add_tensor_generated(std::string name, DType dtype, std::vector<uint64_t> shape, Fill fill) {
  const uint64_t nbytes = check_tensor(name, dtype, shape);
  LR_ASSERT(fill);
  tensors_.push_back({std::move(name), dtype, std::move(shape), {}, nbytes, std::move(fill)});
}

uint64_t Writer::check_tensor(const std::string& name, DType dtype, const std::vector<uint64_t>& shape) const {
  for (const Tensor& t : tensors_)
    if (t.name == name) fail("gguf writer: duplicate tensor name '{}'", name);
  auto info = dtype_info(uint32_t(dtype));
  if (!info) fail("gguf writer: tensor '{}' has unknown dtype id {}", name, uint32_t(dtype));
  if (shape.empty() || shape.size() > kMaxDims)
    fail("gguf writer: tensor '{}' has {} dimensions, expected 1 to {}", name, shape.size(),
         kMaxDims);
  uint64_t elems = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) fail("gguf writer: tensor '{}' dimension {} is 0", name, d);
    if (__builtin_mul_overflow(elems, shape[d], &elems) ||
        elems > uint64_t(std::numeric_limits<int64_t>::max()))
      fail("gguf writer: tensor '{}' has too many elements (overflows int64)", name);
  }
  auto row = row_bytes(dtype, shape[0]);
  if (!row)
    fail("gguf writer: tensor '{}': row of {} elements is not a multiple of the {} block size {}",
         name, shape[0], info->name, info->block_elems);
  uint64_t expect = *row;
  for (size_t d = 1; d < shape.size(); ++d)
    if (__builtin_mul_overflow(expect, shape[d], &expect))
      fail("gguf writer: tensor '{}': byte size overflows", name);
  return expect;
}

void Writer::emit(const Sink& put) const {
  uint64_t alignment = kDefaultAlignment;
  for (const auto& [k, v] : kv_)
    if (k == "general.alignment") alignment = uint64_t(v.i);  // validated by set()

  Enc e(put);
  e.pod<uint32_t>(detail::kMagic);
  e.pod<uint32_t>(3);
  e.pod<uint64_t>(tensors_.size());
  e.pod<uint64_t>(kv_.size());
  for (const auto& [k, v] : kv_) {
    e.str(k);
    e.value(v);
  }
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    e.str(t.name);
    e.pod<uint32_t>(uint32_t(t.shape.size()));
    for (uint64_t d : t.shape) e.pod<uint64_t>(d);
    e.pod<uint32_t>(uint32_t(t.dtype));
    e.pod<uint64_t>(offset);
    offset += t.size;
    offset += (alignment - offset % alignment) % alignment;
  }
  // Like llama.cpp and the gguf Python package: a file without tensors has no
  // data section, so it ends right after the metadata.
  if (!tensors_.empty()) e.pad_to(alignment);
  std::vector<uint8_t> made;  // a generated tensor, one at a time
  for (const Tensor& t : tensors_) {
    if (t.fill) {
      made.resize(t.size);
      t.fill(made.data(), t.size);
      e.bytes(made.data(), made.size());
    } else {
      e.bytes(t.bytes.data(), t.bytes.size());
    }
    e.pad_to(alignment);
  }
}

std::vector<uint8_t> Writer::to_bytes() const {
  std::vector<uint8_t> out;
  emit([&out](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
  });
  return out;
}

void Writer::write(const std::string& path) const {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) fail("{}: cannot open for writing: {}", path, std::strerror(errno));
  bool ok = true;
  int err = 0;
  emit([&](const void* p, size_t n) {
    if (ok && std::fwrite(p, 1, n, f) != n) {
      ok = false;
      err = errno;
    }
  });
  if (std::fclose(f) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (!ok) {
    std::remove(path.c_str());
    fail("{}: write failed: {}", path, std::strerror(err));
  }
}

}  // namespace lr::gguf
