// GGUF (v2 and v3) reader and writer.
//
// The reader memory-maps the file and treats every byte as hostile: magic,
// version, counts, string lengths, tensor offsets and alignment, and
// dtype x shape = bytes are all checked, and every failure throws lr::Error with
// a one-line message naming the file and the problem.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"
#include "format/mapped_file.h"

namespace lr::gguf {

enum class ValueType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6,
  BOOL = 7, STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
std::string_view value_type_name(ValueType t);

// One metadata value. Scalars live in the field matching their kind; arrays keep
// their element type in `elem` and their items in the vector of that kind
// (integers and bools -> ints, floats -> floats, strings -> strs, arrays -> items).
struct Value {
  ValueType type = ValueType::UINT32;
  int64_t i = 0;         // UINT8..INT64 (UINT64 stored bit-cast), BOOL
  double f = 0;          // FLOAT32, FLOAT64
  std::string s;         // STRING
  ValueType elem = ValueType::UINT8;  // ARRAY
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strs;
  std::vector<Value> items;  // ARRAY of ARRAY

  size_t array_size() const;  // number of items of an ARRAY (0 otherwise)

  // Member-wise (so a NaN float never compares equal; tests compare bits).
  bool operator==(const Value&) const = default;
};

// Nested arrays deeper than this are rejected by the reader and the writer.
inline constexpr int kMaxArrayDepth = 8;
// Tensors have 1..kMaxDims dimensions.
inline constexpr uint32_t kMaxDims = 4;
inline constexpr uint64_t kDefaultAlignment = 32;

struct TensorInfo {
  std::string name;
  std::vector<uint64_t> shape;  // GGML order: shape[0] is the contiguous (row) dimension
  DType dtype = DType::F32;
  uint64_t offset = 0;          // from the start of the data section
  uint64_t nbytes = 0;          // dtype x shape, validated against the file
  const uint8_t* data = nullptr;  // points into the mapping

  uint64_t elements() const;
};

class File {
 public:
  // Maps and validates a file. Throws lr::Error("<path>: <problem>").
  static std::shared_ptr<File> open(const std::string& path);
  // Parses an in-memory image (tests, fuzzing). `name` is used in messages.
  // Tensor data then is only as aligned as the vector's buffer (16 bytes with
  // glibc); with open() it is aligned to alignment() (the mapping is page-aligned).
  static std::shared_ptr<File> from_bytes(std::vector<uint8_t> bytes, std::string name);

  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t file_size() const { return size_; }
  // Absolute file offset of the data section (TensorInfo::offset is relative to it).
  uint64_t data_offset() const { return data_offset_; }

  // Metadata in file order.
  const std::vector<std::pair<std::string, Value>>& metadata() const { return kv_; }
  const Value* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }

  // Typed getters: throw lr::Error naming the file and key when the key is
  // missing or has an incompatible type. Any integer type converts to the
  // requested integer when the value fits; FLOAT32/FLOAT64 convert to double.
  // BOOL is not an integer (get_bool only). The overloads with a default return
  // it when the key is missing but still throw on a wrong type.
  std::string get_string(std::string_view key) const;
  int64_t get_int(std::string_view key) const;
  double get_float(std::string_view key) const;
  bool get_bool(std::string_view key) const;
  std::string get_string(std::string_view key, std::string def) const;
  int64_t get_int(std::string_view key, int64_t def) const;
  double get_float(std::string_view key, double def) const;
  bool get_bool(std::string_view key, bool def) const;
  // Arrays (throw when missing or of another element type). get_ints accepts any
  // integer element type (UINT64 items are bit-cast, as in Value::i);
  // get_floats accepts FLOAT32 and FLOAT64 elements.
  const std::vector<std::string>& get_strings(std::string_view key) const;
  const std::vector<int64_t>& get_ints(std::string_view key) const;
  const std::vector<double>& get_floats(std::string_view key) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const MappedFile& image() const { return *image_; }
  const TensorInfo* find_tensor(std::string_view name) const;
  // Throws lr::Error("<path>: missing tensor '<name>'").
  const TensorInfo& tensor(std::string_view name) const;

 private:
  File() = default;
  static std::shared_ptr<File> from_file(std::unique_ptr<MappedFile> image);
  void parse();

  std::string path_;
  uint32_t version_ = 0;
  uint64_t alignment_ = kDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::unique_ptr<MappedFile> image_;
  const uint8_t* base_ = nullptr;  // image_->data()
  uint64_t size_ = 0;              // image_->size()
  std::vector<std::pair<std::string, Value>> kv_;
  std::vector<TensorInfo> tensors_;
  // Name -> index; the views point into the file image (stable while mapped).
  std::unordered_map<std::string_view, size_t> kv_index_;
  std::unordered_map<std::string_view, size_t> tensor_index_;
};

// Builds a GGUF v3 file. Metadata and tensors are written in insertion order;
// tensor data is aligned to `general.alignment` (default 32; written only when
// set, and then it must be a UINT32 power of two). Invalid input (a value out of
// range for its type, a bad shape, a size mismatch, a duplicate tensor name)
// throws lr::Error("gguf writer: ...").
class Writer {
 public:
  // Setting an existing key replaces its value in place (order is kept).
  void set(std::string key, Value v);
  void set_string(std::string key, std::string v);
  void set_u32(std::string key, uint32_t v);
  void set_i32(std::string key, int32_t v);
  void set_u64(std::string key, uint64_t v);
  void set_f32(std::string key, float v);
  void set_bool(std::string key, bool v);
  void set_strings(std::string key, std::vector<std::string> v);
  void set_i32s(std::string key, std::vector<int32_t> v);
  void set_f32s(std::string key, std::vector<float> v);

  // shape in GGML order (shape[0] contiguous); `data` must hold exactly
  // dtype x shape bytes (checked). The bytes are copied.
  void add_tensor(std::string name, DType dtype, std::vector<uint64_t> shape, const void* data,
                  uint64_t nbytes);

  // A tensor whose bytes `fill` writes when the file is written (one tensor
  // in memory at a time: for models larger than what a copy would allow).
  using Fill = std::function<void(uint8_t* dst, uint64_t nbytes)>;
  void add_tensor_generated(std::string name, DType dtype, std::vector<uint64_t> shape, Fill fill);

  std::vector<uint8_t> to_bytes() const;
  void write(const std::string& path) const;  // throws lr::Error on I/O failure

 private:
  using Sink = std::function<void(const void*, size_t)>;
  void emit(const Sink& put) const;

  // Checks name, dtype and shape; returns the tensor's byte size.
  uint64_t check_tensor(const std::string& name, DType dtype, const std::vector<uint64_t>& shape) const;
  struct Tensor {
    std::string name;
    DType dtype;
    std::vector<uint64_t> shape;
    std::vector<uint8_t> bytes;  // empty when generated
    uint64_t size = 0;
    Fill fill;
  };
  std::vector<std::pair<std::string, Value>> kv_;
  std::vector<Tensor> tensors_;
};

}  // namespace lr::gguf
