// Tensors some files store fused, seen as the parts the weight table reads:
// q, k and v as one attn_qkv (Phi-3), the FFN's gate and up as one ffn_up of
// twice the FFN's rows (Phi-3: the gate's rows first); under HuggingFace
// names, self_attn.qkv_proj and mlp.gate_up_proj. The parts are row ranges
// of the fused tensor, so they are views of the file, not copies.
#pragma once

#include "format/tensor_source.h"
#include "model/config.h"

namespace lr {

class SplitFused final : public TensorSource {
 public:
  SplitFused(const TensorSource& src, const Config& c) : src_(src), c_(c) {}
  const std::string& path() const override { return src_.path(); }
  std::optional<TensorView> find(const std::string& name) const override;
  std::vector<int64_t> int_array(const std::string& key) const override {
    return src_.int_array(key);
  }

 private:
  std::optional<TensorView> find_hf(const std::string& name) const;
  const TensorSource& src_;
  const Config& c_;
};

}  // namespace lr
