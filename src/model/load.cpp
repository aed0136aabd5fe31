#include "model/load.h"

#include <cstdlib>
#include <vector>

#include "core/error.h"

namespace lr {

namespace {

std::string tensor_name(const WeightSpec& spec, Naming naming, int layer) {
  std::string pattern = naming == Naming::Gguf ? spec.gguf : spec.hf;
  if (!spec.per_layer) return pattern;
  return fmt::format(fmt::runtime(pattern), layer);
}

// HuggingFace stores q/k rows per head as [two halves][head_dim/2] (rotate_half
// RoPE); GGUF interleaves them as [head_dim/2][two]. Row i*2+j of a GGUF head is
// row j*hd/2+i of the HF head.
int64_t hf_row_for_gguf_row(int64_t r, int head_dim) {
  int64_t head = r / head_dim, within = r % head_dim;
  int64_t i = within / 2, j = within % 2;
  return head * head_dim + j * (head_dim / 2) + i;
}

void fill_matrix(Matrix& m, const TensorView& t, bool permute_rope, int head_dim) {
  std::vector<float> row(size_t(m.cols));
  uint64_t row_bytes_src = t.nbytes / uint64_t(m.rows);
  for (int64_t r = 0; r < m.rows; ++r) {
    int64_t src_row = permute_rope ? hf_row_for_gguf_row(r, head_dim) : r;
    dequantize(t.dtype, t.data + uint64_t(src_row) * row_bytes_src, row.data(), m.cols);
    if (m.dtype == DType::F32) {
      std::copy(row.begin(), row.end(), m.f32_mut() + r * m.cols);
    } else {
      quantize(m.dtype, row.data(), m.half_mut() + r * m.cols, m.cols);
    }
  }
}

}  // namespace

std::shared_ptr<Weights> load_weights(const Config& cfg_in, const TensorSource& src, Naming naming,
                                      DType wtype) {
  if (wtype != DType::F32 && wtype != DType::F16 && wtype != DType::BF16)
    fail("unsupported runtime weight type {} (use F32, F16 or BF16)", dtype_name(wtype));
  auto w = std::make_shared<Weights>();
  w->cfg = cfg_in;
  w->wtype = wtype;
  w->layers.resize(size_t(cfg_in.n_layers));
  const std::string out_name = tensor_name(kWeightTable[2], naming, 0);
  w->cfg.tied_output = !src.find(out_name).has_value();
  const Config& cfg = w->cfg;

  for (const WeightSpec& spec : kWeightTable) {
    int n = spec.per_layer ? cfg.n_layers : 1;
    for (int layer = 0; layer < n; ++layer) {
      if (spec.slot == Slot::Output && cfg.tied_output) {
        w->output = w->tok_embd;  // shared storage
        continue;
      }
      std::string name = tensor_name(spec, naming, layer);
      std::optional<TensorView> t = src.find(name);
      if (!t) fail("{}: missing tensor '{}'", src.path(), name);
      auto [rows, cols] = slot_shape(cfg, spec.slot);
      bool shape_ok = spec.is_norm ? (t->shape.size() == 1 && int64_t(t->shape[0]) == cols)
                                   : (t->shape.size() == 2 && int64_t(t->shape[0]) == cols &&
                                      int64_t(t->shape[1]) == rows);
      if (!shape_ok) {
        std::string got;
        for (size_t i = t->shape.size(); i-- > 0;) got += fmt::format("{}{}", t->shape[i], i ? ", " : "");
        fail("{}: tensor '{}' has shape [{}], expected [{}, {}] ([out, in])", src.path(), name, got,
             rows, cols);
      }
      Matrix& m = slot_matrix(*w, spec.slot, layer);
      m = Matrix::allocate(spec.is_norm ? DType::F32 : wtype, rows, cols);
      bool permute = naming == Naming::HuggingFace && (spec.slot == Slot::Q || spec.slot == Slot::K);
      fill_matrix(m, *t, permute, cfg.head_dim);
    }
  }
  return w;
}

std::string default_model_path() {
  if (const char* env = std::getenv("LOWRANK_MODEL"); env && *env) return env;
  std::string cache;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
    cache = xdg;
  } else if (const char* home = std::getenv("HOME"); home && *home) {
    cache = std::string(home) + "/.cache";
  } else {
    cache = ".cache";
  }
  return cache + "/lowrank/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

}  // namespace lr
