// A read-only collection of named tensors in some file format (GGUF,
// safetensors). The model loader reads weights through this interface only.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "format/mapped_file.h"

namespace lr {

struct TensorView {
  DType dtype = DType::F32;
  std::vector<uint64_t> shape;  // GGML order: shape[0] is the contiguous dimension
  const uint8_t* data = nullptr;
  uint64_t nbytes = 0;          // validated: dtype x shape
  std::shared_ptr<const void> owner;  // keeps `data` alive (a file mapping), when it can be shared
  const MappedFile* mapping = nullptr;  // the file image `data` lies in, when known (to release copied pages)
};

class TensorSource {
 public:
  virtual ~TensorSource() = default;
  virtual const std::string& path() const = 0;  // for messages
  virtual std::optional<TensorView> find(const std::string& name) const = 0;
  // An integer-array metadata value (GGUF); empty when absent or unsupported.
  virtual std::vector<int64_t> int_array(const std::string& /*key*/) const { return {}; }
};

}  // namespace lr
