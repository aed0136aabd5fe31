#include "model/fused_tensors.h"

#include <cstdio>

#include "core/error.h"

namespace lr {

namespace {

// Rows [r0, r1) of a matrix (GGML shape {cols, rows}) or elements of a vector.
std::optional<TensorView> rows_of(const std::optional<TensorView>& t, int64_t r0, int64_t r1,
                                  int64_t total, const std::string& path, const std::string& name) {
  if (!t) return std::nullopt;
  const size_t row_dim = t->shape.size() == 2 ? 1 : 0;
  if (t->shape.size() > 2 || int64_t(t->shape[row_dim]) != total)
    fail("{}: fused tensor '{}' has {} rows, expected {}", path, name,
         t->shape.empty() ? 0 : t->shape[row_dim], total);
  const uint64_t row_bytes = t->nbytes / uint64_t(total);
  TensorView v = *t;
  v.shape[row_dim] = uint64_t(r1 - r0);
  v.data = t->data + uint64_t(r0) * row_bytes;
  v.nbytes = uint64_t(r1 - r0) * row_bytes;
  return v;
}

}  // namespace

// HuggingFace names (Phi-3): model.layers.<l>.self_attn.{q,k,v}_proj.<weight|bias>
// are rows of self_attn.qkv_proj, model.layers.<l>.mlp.{gate,up}_proj.weight
// rows of mlp.gate_up_proj (the gate's first), when the parts are not there.
std::optional<TensorView> SplitFused::find_hf(const std::string& name) const {
  int layer = -1, end = 0;
  char parent[16] = {}, part[16] = {}, kind[8] = {};
  if (std::sscanf(name.c_str(), "model.layers.%d.%15[a-z_].%15[a-z_].%7[a-z]%n", &layer, parent,
                  part, kind, &end) != 4 ||
      size_t(end) != name.size())
    return src_.find(name);
  if (std::optional<TensorView> t = src_.find(name)) return t;
  const std::string pa = parent, p = part, k = kind;
  const std::string blk = "model.layers." + std::to_string(layer) + "." + pa + ".";
  if (pa == "self_attn" && (p == "q_proj" || p == "k_proj" || p == "v_proj")) {
    const int64_t q = c_.q_dim(), kv = c_.kv_dim();
    const int64_t r0 = p == "q_proj" ? 0 : p == "k_proj" ? q : q + kv;
    const int64_t r1 = p == "q_proj" ? q : r0 + kv;
    return rows_of(src_.find(blk + "qkv_proj." + k), r0, r1, q + 2 * kv, path(),
                   blk + "qkv_proj." + k);
  }
  if (pa == "mlp" && (p == "gate_proj" || p == "up_proj") && k == "weight") {
    const int64_t f = c_.ffn_dim;
    const int64_t r0 = p == "gate_proj" ? 0 : f;
    return rows_of(src_.find(blk + "gate_up_proj.weight"), r0, r0 + f, 2 * f, path(),
                   blk + "gate_up_proj.weight");
  }
  return std::nullopt;
}

std::optional<TensorView> SplitFused::find(const std::string& name) const {
  if (name.rfind("model.layers.", 0) == 0) return find_hf(name);
  int layer = -1, end = 0;
  char part[16] = {}, kind[8] = {};
  // blk.<l>.<part>.<weight|bias>
  if (std::sscanf(name.c_str(), "blk.%d.%15[a-z_].%7[a-z]%n", &layer, part, kind, &end) != 3 ||
      size_t(end) != name.size())
    return src_.find(name);
  const std::string p = part, k = kind, blk = "blk." + std::to_string(layer) + ".";
  if (p == "attn_q" || p == "attn_k" || p == "attn_v") {
    if (std::optional<TensorView> t = src_.find(name)) return t;
    const int64_t q = c_.q_dim(), kv = c_.kv_dim();
    const int64_t r0 = p == "attn_q" ? 0 : p == "attn_k" ? q : q + kv;
    const int64_t r1 = p == "attn_q" ? q : r0 + kv;
    return rows_of(src_.find(blk + "attn_qkv." + k), r0, r1, q + 2 * kv, path(),
                   blk + "attn_qkv." + k);
  }
  if ((p == "ffn_gate" || p == "ffn_up") && k == "weight") {
    std::optional<TensorView> up = src_.find(blk + "ffn_up.weight");
    const bool fused = !src_.find(blk + "ffn_gate.weight") && up && up->shape.size() == 2 &&
                       int64_t(up->shape[1]) == 2 * int64_t(c_.ffn_dim);
    if (!fused) return src_.find(name);
    const int64_t f = c_.ffn_dim;
    return p == "ffn_gate" ? rows_of(up, 0, f, 2 * f, path(), blk + "ffn_up.weight")
                           : rows_of(up, f, 2 * f, 2 * f, path(), blk + "ffn_up.weight");
  }
  return src_.find(name);
}

}  // namespace lr
