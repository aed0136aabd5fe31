#include "model/load.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

#include "core/error.h"
#include "model/fused_tensors.h"
#include "model/key_calibration.h"
#include "model/pack.h"

namespace lr {

namespace {

std::string tensor_name(const WeightSpec& spec, const Config& c, Naming naming, int layer) {
  if (naming == Naming::HuggingFace) return hf_tensor_name(spec, c, layer);
  if (!spec.per_layer) return spec.gguf;
  return fmt::format(fmt::runtime(spec.gguf), layer);
}

void fill_matrix(Matrix& m, const TensorView& t, bool permute_rope, int head_dim, int rot_dims) {
  std::vector<float> row(size_t(m.cols));
  uint64_t row_bytes_src = t.nbytes / uint64_t(m.rows);
  for (int64_t r = 0; r < m.rows; ++r) {
    int64_t src_row = permute_rope ? hf_row_for_gguf_row(r, head_dim, rot_dims) : r;
    const uint8_t* src = t.data + uint64_t(src_row) * row_bytes_src;
    if (m.dtype == t.dtype && is_block_format(m.dtype)) {  // blocks copied as they are
      std::memcpy(m.data.get() + uint64_t(r) * m.row_bytes(), src, row_bytes_src);
      continue;
    }
    if (m.dtype == DType::Q8_0 && t.dtype == DType::Q8_0) {  // GGUF's blocks, scales apart: exact
      q8_0_row_from_blocks(src, m.cols, reinterpret_cast<int8_t*>(m.data.get()) + r * m.cols,
                           m.scales.get() + r * q8_blocks(m.cols));
      continue;
    }
    dequantize(t.dtype, src, row.data(), m.cols);
    m.set_row(r, row.data());
  }
}

}  // namespace

namespace {

std::string shape_str(const std::vector<uint64_t>& ggml_shape) {
  std::string got;
  for (size_t i = ggml_shape.size(); i-- > 0;)
    got += fmt::format("{}{}", ggml_shape[i], i ? ", " : "");
  return "[" + got + "]";
}

// A 2-D tensor [rows, cols] (GGML shape {cols, rows}).
TensorView require_matrix(const TensorSource& src, const std::string& name, int64_t rows,
                          int64_t cols, const char* what) {
  std::optional<TensorView> t = src.find(name);
  if (!t) fail("{}: missing tensor '{}'", src.path(), name);
  bool ok = t->shape.size() == 2 && int64_t(t->shape[0]) == cols && int64_t(t->shape[1]) == rows;
  if (!ok)
    fail("{}: tensor '{}' has shape {}, expected [{}, {}] ({})", src.path(), name,
         shape_str(t->shape), rows, cols, what);
  return *t;
}

}  // namespace

std::string hf_tensor_name(const WeightSpec& spec, const Config& c, int layer) {
  const char* pattern = spec.hf;
  // Gemma 3: the FFN's norm is pre_feedforward_layernorm (post_attention_layernorm
  // is the attention output's, as in OLMo 2).
  if (spec.slot == Slot::FfnNorm && c.post_norms)
    pattern = "model.layers.{}.pre_feedforward_layernorm.weight";
  return spec.per_layer ? fmt::format(fmt::runtime(pattern), layer) : std::string(pattern);
}

bool hf_norm_offset(const Config& c) {
  return c.arch == "gemma3";
}

// HuggingFace stores q/k rows per head as [two halves][head_dim/2] (rotate_half
// RoPE); GGUF interleaves them as [head_dim/2][two]. Row i*2+j of a GGUF head is
// row j*hd/2+i of the HF head.
int64_t hf_row_for_gguf_row(int64_t r, int head_dim, int rot_dims) {
  const int rot = rot_dims > 0 ? rot_dims : head_dim;
  int64_t head = r / head_dim, within = r % head_dim;
  if (within >= rot) return r;  // past the rotary dims: as it is
  int64_t i = within / 2, j = within % 2;
  return head * head_dim + j * (rot / 2) + i;
}

Matrix read_matrix(const TensorView& t, std::optional<DType> wtype, bool permute_rope, int head_dim,
                   int rot_dims) {
  const DType type = wtype.value_or(t.dtype);  // as stored: Q8_0 in the runtime's layout
  const int64_t rows = int64_t(t.shape[1]), cols = int64_t(t.shape[0]);
  if (is_block_format(type) && type == t.dtype && !permute_rope && t.owner)
    return Matrix::view(type, rows, cols, t.owner, t.data);  // in place: no copy
  Matrix m = Matrix::allocate(type, rows, cols);
  fill_matrix(m, t, permute_rope, head_dim, rot_dims);
  // The copy is what runs: the file's pages of it need not stay resident too
  // (a Q8_0 output head, say, would otherwise count twice).
  if (t.mapping) t.mapping->release(t.data, t.nbytes);
  return m;
}

std::string bias_name(const std::string& weight_name) {
  const std::string suffix = ".weight";
  if (weight_name.size() > suffix.size() &&
      weight_name.compare(weight_name.size() - suffix.size(), suffix.size(), suffix) == 0)
    return weight_name.substr(0, weight_name.size() - suffix.size()) + ".bias";
  return weight_name + ".bias";
}

std::string lowrank_in_name(const WeightSpec& spec, int layer) {
  return spec.per_layer ? fmt::format("blk.{}.{}.lr_in", layer, spec.kind)
                        : fmt::format("{}.lr_in", spec.kind);
}
std::string lowrank_out_name(const WeightSpec& spec, int layer) {
  return spec.per_layer ? fmt::format("blk.{}.{}.lr_out", layer, spec.kind)
                        : fmt::format("{}.lr_out", spec.kind);
}
std::string shared_basis_name(const WeightSpec& spec, int group) {
  return fmt::format("shared.{}.{}.lr_in", group, spec.kind);
}
std::string pivots_key(const WeightSpec& spec, int layer) {
  return spec.per_layer ? fmt::format("lowrank.pivots.blk.{}.{}", layer, spec.kind)
                        : fmt::format("lowrank.pivots.{}", spec.kind);
}
std::string shared_map_key(const WeightSpec& spec) {
  return fmt::format("lowrank.shared.{}", spec.kind);
}

namespace {

// A pivoted map's pivot rows (lowrank.pivots.<name>), checked against its
// rank, its rows and its input factor (its own, not a shared basis).
std::shared_ptr<const Pivots> read_pivots(const TensorSource& src, const WeightSpec& spec,
                                          int layer, const std::vector<int64_t>& pivot_rows,
                                          int64_t rows, int64_t rank, bool shared_basis) {
  const std::string key = pivots_key(spec, layer);
  if (int64_t(pivot_rows.size()) != rank)
    fail("{}: '{}' lists {} pivot rows for rank {} (one per rank expected)", src.path(), key,
         pivot_rows.size(), rank);
  if (shared_basis)
    fail("{}: '{}': a pivoted map keeps its own input factor, not a shared basis", src.path(), key);
  std::vector<int32_t> r32;
  for (int64_t r : pivot_rows) {
    if (r < 0 || r >= rows)
      fail("{}: '{}': pivot row {} is outside [0, {})", src.path(), key, r, rows);
    r32.push_back(int32_t(r));
  }
  return std::make_shared<const Pivots>(
      Pivots::make(std::move(r32), rows, fmt::format("{}: '{}'", src.path(), key)));
}

}  // namespace

std::shared_ptr<Weights> load_weights(const Config& cfg_in, const TensorSource& file, Naming naming,
                                      std::optional<DType> wtype) {
  const SplitFused src(file, cfg_in);  // fused q/k/v and gate/up seen as their parts
  if (wtype && *wtype != DType::F32 && *wtype != DType::F16 && *wtype != DType::BF16 &&
      *wtype != DType::Q8_0)
    fail("unsupported runtime weight type {} (use F32, F16, BF16 or Q8_0)", dtype_name(*wtype));
  auto w = std::make_shared<Weights>();
  w->cfg = cfg_in;
  w->wtype = wtype.value_or(DType::F32);
  w->as_stored = !wtype;
  w->layers.resize(size_t(cfg_in.n_layers));
  const WeightSpec& out_spec = weight_spec(Slot::Output);
  w->cfg.tied_output = !src.find(tensor_name(out_spec, cfg_in, naming, 0)).has_value() &&
                       !(naming == Naming::Gguf && src.find(lowrank_out_name(out_spec, 0)));
  const Config& cfg = w->cfg;
  std::map<std::string, Matrix> shared;  // shared bases by tensor name, loaded once

  // lowrank.shared.<kind>: which shared basis each layer's map uses (-1: its own), read once per
  // kind.
  std::map<Slot, std::vector<int64_t>> shared_maps;
  auto groups_of = [&](const WeightSpec& spec) -> const std::vector<int64_t>& {
    auto it = shared_maps.find(spec.slot);
    if (it != shared_maps.end()) return it->second;
    std::vector<int64_t> g = naming == Naming::Gguf && spec.is_linear() && spec.per_layer
                                 ? src.int_array(shared_map_key(spec))
                                 : std::vector<int64_t>{};
    if (!g.empty() && int64_t(g.size()) != cfg.n_layers)
      fail("{}: metadata '{}' has {} entries, expected {} (one per layer)", src.path(),
           shared_map_key(spec), g.size(), cfg.n_layers);
    return shared_maps.emplace(spec.slot, std::move(g)).first->second;
  };

  for_each_tensor(cfg, [&](const WeightSpec& spec, int layer) {
    const std::vector<int64_t>& groups = groups_of(spec);
    auto [rows, cols] = slot_shape(cfg, spec.slot);
    std::string name = tensor_name(spec, cfg, naming, layer);
    if (!spec.is_linear()) {
      std::optional<TensorView> t = src.find(name);
      if (!t) fail("{}: missing tensor '{}'", src.path(), name);
      bool ok = spec.is_norm ? (t->shape.size() == 1 && int64_t(t->shape[0]) == cols)
                             : (t->shape.size() == 2 && int64_t(t->shape[0]) == cols &&
                                int64_t(t->shape[1]) == rows);
      if (!ok)
        fail("{}: tensor '{}' has shape {}, expected [{}, {}] ([out, in])", src.path(), name,
             shape_str(t->shape), rows, cols);
      Matrix& m = slot_matrix(*w, spec.slot, layer);
      m = spec.is_norm
              ? read_matrix(TensorView{t->dtype, {t->shape[0], 1}, t->data, t->nbytes, t->owner},
                            DType::F32, false, cfg.head_dim)
              : read_matrix(*t, wtype, false, cfg.head_dim);
      if (spec.is_norm && naming == Naming::HuggingFace && hf_norm_offset(cfg))
        for (int64_t i = 0; i < cols; ++i) m.f32_mut()[i] += 1.f;  // Gemma's (1 + w)
      // A head's norm in the order its q and k rows take (see below).
      if ((spec.slot == Slot::QNorm || spec.slot == Slot::KNorm) &&
          (naming == Naming::HuggingFace || cfg.rope_neox)) {
        std::vector<float> v(m.f32(), m.f32() + cols);
        for (int64_t r = 0; r < cols; ++r)
          m.f32_mut()[r] = v[size_t(hf_row_for_gguf_row(r, cfg.head_dim, cfg.rotary_dims()))];
      }
      return;
    }
    Linear& lin = slot_linear(*w, spec.slot, layer);
    if (spec.slot == Slot::Output && cfg.tied_output) {
      lin.w = w->tok_embd;  // shared storage
      return;
    }
    // q and k rows into the runtime's interleaved RoPE order (HuggingFace and
    // NEOX-RoPE GGUFs keep each head's two halves apart).
    bool permute = (naming == Naming::HuggingFace || cfg.rope_neox) &&
                   (spec.slot == Slot::Q || spec.slot == Slot::K);
    if (std::optional<TensorView> b = src.find(bias_name(name))) {
      if (b->shape.size() != 1 || int64_t(b->shape[0]) != rows)
        fail("{}: tensor '{}' has shape {}, expected [{}] (the bias of '{}')", src.path(),
             bias_name(name), shape_str(b->shape), rows, name);
      lin.b = read_matrix(TensorView{b->dtype, {b->shape[0], 1}, b->data, b->nbytes, b->owner},
                          DType::F32, false, cfg.head_dim);
      if (permute) {  // the same row order as the weights
        std::vector<float> v(lin.b.f32(), lin.b.f32() + rows);
        for (int64_t r = 0; r < rows; ++r)
          lin.b.f32_mut()[r] = v[size_t(hf_row_for_gguf_row(r, cfg.head_dim, cfg.rotary_dims()))];
      }
    }
    bool has_dense = src.find(name).has_value();
    bool has_lowrank = naming == Naming::Gguf && src.find(lowrank_out_name(spec, layer));
    if (has_dense) {
      lin.w = read_matrix(require_matrix(src, name, rows, cols, "[out, in]"), wtype, permute,
                          cfg.head_dim, cfg.rotary_dims());
      if (!has_lowrank) return;  // with factors too: the residual form W + U V
    }
    if (!has_lowrank) fail("{}: missing tensor '{}'", src.path(), name);
    // Low-rank: U [out, r] and V [r, in] (private or a shared basis); pivoted,
    // U holds the out - r rows that are not pivots (lowrank.pivots.<name>).
    std::string out_name = lowrank_out_name(spec, layer);
    const std::vector<int64_t> pivot_rows = src.int_array(pivots_key(spec, layer));
    const int64_t u_rows = rows - int64_t(pivot_rows.size());
    std::optional<TensorView> ut = src.find(out_name);
    if (!ut || ut->shape.size() != 2 || int64_t(ut->shape[1]) != u_rows || ut->shape[0] == 0)
      fail("{}: tensor '{}' has shape {}, expected [{}, rank] (low-rank output factor{})",
           src.path(), out_name, ut ? shape_str(ut->shape) : "none", u_rows,
           pivot_rows.empty() ? ""
                              : fmt::format(", {} rows less {} pivots", rows, pivot_rows.size()));
    int64_t rank = int64_t(ut->shape[0]);
    if (!pivot_rows.empty())
      lin.pivots = read_pivots(src, spec, layer, pivot_rows, rows, rank,
                               !groups.empty() && groups[size_t(layer)] >= 0);
    std::string in_name = lowrank_in_name(spec, layer);
    bool is_shared = !groups.empty() && groups[size_t(layer)] >= 0;
    // A private pair never needs more than min(out, in); a basis shared by g
    // layers can have up to min(in, g*out) directions.
    int64_t max_rank = is_shared ? cols : std::min(rows, cols);
    if (rank > max_rank)
      fail("{}: tensor '{}' has rank {}, more than {} = {}", src.path(), out_name, rank,
           is_shared ? "in (shared basis)" : "min(out, in)", max_rank);
    if (is_shared) in_name = shared_basis_name(spec, int(groups[size_t(layer)]));
    TensorView vt = require_matrix(src, in_name, rank, cols, "low-rank input factor [rank, in]");
    lin.u = read_matrix(*ut, wtype, false, cfg.head_dim);
    if (is_shared) {
      auto it = shared.find(in_name);
      if (it == shared.end())
        it = shared.emplace(in_name, read_matrix(vt, wtype, false, cfg.head_dim)).first;
      lin.v = it->second;
    } else {
      lin.v = read_matrix(vt, wtype, false, cfg.head_dim);
    }
  });
  if (naming == Naming::Gguf) read_key_calibration(src, *w);
  pack_projections(*w);
  return w;
}

std::string model_cache_dir() {
  std::string cache;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
    cache = xdg;
  } else if (const char* home = std::getenv("HOME"); home && *home) {
    cache = std::string(home) + "/.cache";
  } else {
    cache = ".cache";
  }
  return cache + "/lowrank/models";
}

std::string default_model_path() {
  if (const char* env = std::getenv("LOWRANK_MODEL"); env && *env) return env;
  return model_cache_dir() + "/SmolLM2-135M-Instruct.Q4_1.gguf";
}

}  // namespace lr
