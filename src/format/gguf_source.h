// TensorSource over a GGUF file.
#pragma once

#include <memory>

#include "format/gguf.h"
#include "format/tensor_source.h"

namespace lr {

class GgufSource final : public TensorSource {
 public:
  explicit GgufSource(std::shared_ptr<const gguf::File> f) : file_(std::move(f)) {}
  const std::string& path() const override { return file_->path(); }
  std::optional<TensorView> find(const std::string& name) const override {
    const gguf::TensorInfo* t = file_->find_tensor(name);
    if (!t) return std::nullopt;
    return TensorView{t->dtype, t->shape, t->data, t->nbytes, file_, &file_->image()};
  }
  std::vector<int64_t> int_array(const std::string& key) const override {
    if (!file_->has(key)) return {};
    return file_->get_ints(key);
  }

 private:
  std::shared_ptr<const gguf::File> file_;
};

}  // namespace lr
