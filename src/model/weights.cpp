#include "model/weights.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <set>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "core/half.h"

namespace lr {

void q8_0_row_from_blocks(const uint8_t* blocks, int64_t cols, int8_t* q, uint16_t* scales) {
  for (int64_t b = 0; b < cols / 32; ++b) {
    std::memcpy(scales + b, blocks + b * 34, 2);
    std::memcpy(q + b * 32, blocks + b * 34 + 2, 32);
  }
}

void q8_0_row_to_blocks(const int8_t* q, const uint16_t* scales, int64_t cols, uint8_t* blocks) {
  for (int64_t b = 0; b < cols / 32; ++b) {
    std::memcpy(blocks + b * 34, scales + b, 2);
    std::memcpy(blocks + b * 34 + 2, q + b * 32, 32);
  }
}

Matrix Matrix::allocate(DType dtype, int64_t rows, int64_t cols) {
  LR_ASSERT(rows >= 0 && cols >= 0);
  LR_ASSERT(!is_block_format(dtype) || cols % dtype_info(dtype).block_elems == 0);
  Matrix m;
  m.dtype = dtype;
  m.rows = rows;
  m.cols = cols;
  size_t bytes = size_t(m.bytes());
  size_t padded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, padded == 0 ? 64 : padded);
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, padded == 0 ? 64 : padded);
  m.data = std::shared_ptr<uint8_t[]>(static_cast<uint8_t*>(p), [](uint8_t* q) { std::free(q); });
  if (dtype == DType::Q8_0)
    m.scales = std::shared_ptr<uint16_t[]>(
        new uint16_t[size_t(std::max<int64_t>(rows * q8_blocks(cols), 1))]());
  return m;
}

Matrix Matrix::view(DType dtype, int64_t rows, int64_t cols, std::shared_ptr<const void> owner,
                    const uint8_t* bytes) {
  LR_ASSERT(is_block_format(dtype) && cols % dtype_info(dtype).block_elems == 0);
  Matrix m;
  m.dtype = dtype;
  m.rows = rows;
  m.cols = cols;
  // Aliasing constructor: shares ownership of the mapping; never written through.
  m.data = std::shared_ptr<uint8_t[]>(std::const_pointer_cast<void>(owner), const_cast<uint8_t*>(bytes));
  return m;
}

uint64_t Matrix::row_bytes() const {
  switch (dtype) {
    case DType::F32: return uint64_t(cols) * 4;
    case DType::F16:
    case DType::BF16: return uint64_t(cols) * 2;
    case DType::Q8_0: return uint64_t(cols);
    default: return *lr::row_bytes(dtype, uint64_t(cols));
  }
}

const float* Matrix::f32() const {
  LR_ASSERT(dtype == DType::F32);
  return reinterpret_cast<const float*>(data.get());
}
const uint16_t* Matrix::half() const {
  LR_ASSERT(dtype == DType::BF16 || dtype == DType::F16);
  return reinterpret_cast<const uint16_t*>(data.get());
}
float* Matrix::f32_mut() {
  LR_ASSERT(dtype == DType::F32);
  return reinterpret_cast<float*>(data.get());
}
const int8_t* Matrix::q8() const {
  LR_ASSERT(dtype == DType::Q8_0);
  return reinterpret_cast<const int8_t*>(data.get());
}
uint16_t* Matrix::half_mut() {
  LR_ASSERT(dtype == DType::BF16 || dtype == DType::F16);
  return reinterpret_cast<uint16_t*>(data.get());
}

uint64_t Matrix::data_bytes() const { return uint64_t(rows) * row_bytes(); }

uint64_t Matrix::bytes() const {
  return data_bytes() + (dtype == DType::Q8_0 ? uint64_t(rows) * uint64_t(q8_blocks(cols)) * 2 : 0);
}

void Matrix::row_to_f32(int64_t r, float* out) const {
  LR_ASSERT(r >= 0 && r < rows);
  if (dtype == DType::Q8_0) {
    const int8_t* q = q8() + r * cols;
    const uint16_t* s = scales.get() + r * q8_blocks(cols);
    for (int64_t c = 0; c < cols; ++c) out[c] = f16_to_f32(s[c / 32]) * float(q[c]);
    return;
  }
  dequantize(dtype, data.get() + uint64_t(r) * row_bytes(), out, cols);
}

Matrix Matrix::rows_view(int64_t r0, int64_t n) const {
  LR_ASSERT(r0 >= 0 && n >= 0 && r0 + n <= rows);
  Matrix m;
  m.dtype = dtype;
  m.rows = n;
  m.cols = cols;
  // Aliasing constructors: share ownership of the whole buffers.
  m.data = std::shared_ptr<uint8_t[]>(data, data.get() + uint64_t(r0) * row_bytes());
  if (scales) m.scales = std::shared_ptr<uint16_t[]>(scales, scales.get() + r0 * q8_blocks(cols));
  return m;
}

void Matrix::set_row(int64_t r, const float* x) {
  LR_ASSERT(r >= 0 && r < rows);
  if (dtype != DType::Q8_0) {
    quantize(dtype, x, data.get() + uint64_t(r) * row_bytes(), cols);
    return;
  }
  // As GGUF's Q8_0 (llama.cpp's quantize_row_q8_0): values rounded against
  // the f32 scale, the scale stored as f16.
  thread_local std::vector<float> s;
  s.resize(size_t(q8_blocks(cols)));
  quantize_q8_blocks(x, reinterpret_cast<int8_t*>(data.get()) + r * cols, s.data(), cols);
  uint16_t* d = scales.get() + r * q8_blocks(cols);
  for (size_t b = 0; b < s.size(); ++b) d[b] = f32_to_f16(s[b]);
}

std::pair<int64_t, int64_t> slot_shape(const Config& c, Slot s) {
  switch (s) {
    case Slot::TokEmbd:
    case Slot::Output: return {c.vocab, c.dim};
    case Slot::OutNorm:
    case Slot::AttnNorm:
    case Slot::FfnNorm:
    case Slot::AttnPostNorm:
    case Slot::FfnPostNorm:
      return {1, c.dim};
    case Slot::QNorm:
      return {1, c.qk_norm_full ? c.q_dim() : c.head_dim};
    case Slot::KNorm:
      return {1, c.qk_norm_full ? c.kv_dim() : c.head_dim};
    case Slot::Q: return {c.q_dim(), c.dim};
    case Slot::K:
    case Slot::V: return {c.kv_dim(), c.dim};
    case Slot::O: return {c.dim, c.q_dim()};
    case Slot::Gate:
    case Slot::Up: return {c.ffn_dim, c.dim};
    case Slot::Down: return {c.dim, c.ffn_dim};
  }
  LR_ASSERT(false);
  return {0, 0};
}

namespace {
template <typename W, typename L>
L& linear_ref(W& w, Slot s, int layer);

template <typename W, typename M>
M& matrix_ref(W& w, Slot s, int layer) {
  switch (s) {
    case Slot::TokEmbd: return w.tok_embd;
    case Slot::OutNorm: return w.out_norm;
    case Slot::AttnNorm: LR_ASSERT(size_t(layer) < w.layers.size()); return w.layers[size_t(layer)].attn_norm;
    case Slot::FfnNorm: LR_ASSERT(size_t(layer) < w.layers.size()); return w.layers[size_t(layer)].ffn_norm;
    case Slot::AttnPostNorm:
      LR_ASSERT(size_t(layer) < w.layers.size());
      return w.layers[size_t(layer)].attn_post_norm;
    case Slot::FfnPostNorm:
      LR_ASSERT(size_t(layer) < w.layers.size());
      return w.layers[size_t(layer)].ffn_post_norm;
    case Slot::QNorm:
      LR_ASSERT(size_t(layer) < w.layers.size());
      return w.layers[size_t(layer)].q_norm;
    case Slot::KNorm:
      LR_ASSERT(size_t(layer) < w.layers.size());
      return w.layers[size_t(layer)].k_norm;
    default: break;
  }
  return linear_ref<W, std::conditional_t<std::is_const_v<W>, const Linear, Linear>>(w, s, layer).w;
}

template <typename W, typename L>
L& linear_ref(W& w, Slot s, int layer) {
  if (s == Slot::Output) return w.output;
  LR_ASSERT(layer >= 0 && size_t(layer) < w.layers.size());
  auto& l = w.layers[size_t(layer)];
  switch (s) {
    case Slot::Q: return l.q;
    case Slot::K: return l.k;
    case Slot::V: return l.v;
    case Slot::O: return l.o;
    case Slot::Gate: return l.gate;
    case Slot::Up: return l.up;
    case Slot::Down: return l.down;
    default: break;
  }
  LR_ASSERT(false && "slot is not a linear map");
  return w.output;
}
}  // namespace

Matrix& slot_matrix(Weights& w, Slot s, int layer) { return matrix_ref<Weights, Matrix>(w, s, layer); }
const Matrix& slot_matrix(const Weights& w, Slot s, int layer) {
  return matrix_ref<const Weights, const Matrix>(w, s, layer);
}
Linear& slot_linear(Weights& w, Slot s, int layer) { return linear_ref<Weights, Linear>(w, s, layer); }
const Linear& slot_linear(const Weights& w, Slot s, int layer) {
  return linear_ref<const Weights, const Linear>(w, s, layer);
}

Pivots Pivots::make(std::vector<int32_t> rows, int64_t out, const std::string& what) {
  Pivots p;
  if (rows.empty() || int64_t(rows.size()) >= out)
    fail("{}: {} pivot rows for an output of {} (expected 1 to {})", what, rows.size(), out, out - 1);
  p.source.assign(size_t(out), 0);
  for (size_t k = 0; k < rows.size(); ++k) {
    const int32_t r = rows[k];
    if (r < 0 || r >= out) fail("{}: pivot row {} is outside [0, {})", what, r, out);
    if (p.source[size_t(r)] < 0) fail("{}: pivot row {} appears twice", what, r);
    p.source[size_t(r)] = -1 - int32_t(k);
  }
  p.before.assign(size_t(out) + 1, 0);
  int32_t u = 0;
  for (int64_t i = 0; i < out; ++i) {
    p.before[size_t(i)] = u;
    if (p.source[size_t(i)] >= 0) p.source[size_t(i)] = u++;
  }
  p.before[size_t(out)] = u;
  p.rows = std::move(rows);
  return p;
}

const WeightSpec& weight_spec(Slot s) {
  for (const WeightSpec& spec : kWeightTable)
    if (spec.slot == s) return spec;
  LR_ASSERT(false);
  return kWeightTable[0];
}

const WeightSpec& block_linear_spec(const std::string& kind) {
  for (const WeightSpec& spec : kWeightTable)
    if (spec.is_linear() && spec.per_layer && kind == spec.kind) return spec;
  fail("unknown matrix type '{}' (expected attn_q, attn_k, attn_v, attn_output, ffn_gate, ffn_up, ffn_down)",
       kind);
}

void for_each_matrix(const Weights& w, const std::function<void(const WeightSpec&, const Matrix&)>& f) {
  std::set<const uint8_t*> seen;
  for_each_tensor(w.cfg, [&](const WeightSpec& spec, int l) {
    auto visit = [&](const Matrix& m) {
      if (m.rows > 0 && seen.insert(m.data.get()).second) f(spec, m);
    };
    if (!spec.is_linear()) return visit(slot_matrix(w, spec.slot, l));
    const Linear& lin = slot_linear(w, spec.slot, l);
    for (const Matrix* m : {&lin.w, &lin.v, &lin.u}) visit(*m);
  });
}

uint64_t Weights::bytes() const {
  uint64_t total = 0;
  for_each_matrix(*this, [&](const WeightSpec&, const Matrix& m) { total += m.bytes(); });
  for_each_linear(*this, [&](const WeightSpec&, int, const Linear& l) { total += l.b.bytes(); });
  return total;
}

uint64_t Weights::parameters() const {
  uint64_t total = 0;
  for_each_matrix(*this, [&](const WeightSpec&, const Matrix& m) { total += uint64_t(m.rows) * uint64_t(m.cols); });
  for_each_linear(*this, [&](const WeightSpec&, int, const Linear& l) { total += uint64_t(l.b.cols); });
  return total;
}

uint64_t Weights::bytes_per_token() const {
  uint64_t total = out_norm.bytes() + tok_embd.bytes() / uint64_t(std::max<int64_t>(tok_embd.rows, 1));
  auto lin = [](const Linear& l) { return l.w.bytes() + l.v.bytes() + l.u.bytes() + l.b.bytes(); };
  total += lin(output);
  for (const Layer& l : layers)
    total += l.attn_norm.bytes() + l.q_norm.bytes() + l.k_norm.bytes() + l.ffn_norm.bytes() +
             l.attn_post_norm.bytes() + l.ffn_post_norm.bytes() + lin(l.q) + lin(l.k) + lin(l.v) +
             lin(l.o) + lin(l.gate) + lin(l.up) + lin(l.down);
  return total;
}

uint64_t parameter_count(const Config& c) {
  uint64_t total = 0;
  for (const WeightSpec& spec : kWeightTable) {
    if ((spec.slot == Slot::Output && c.tied_output) || !spec.present(c)) continue;
    auto [rows, cols] = slot_shape(c, spec.slot);
    total += uint64_t(rows) * uint64_t(cols) * (spec.per_layer ? uint64_t(c.n_layers) : 1);
  }
  return total;
}

std::vector<MatrixShape> matrix_shapes(const Weights& w) {
  std::vector<MatrixShape> out;
  for_each_matrix(w, [&](const WeightSpec& spec, const Matrix& m) { out.push_back({m.rows, m.cols, spec.is_norm}); });
  for_each_linear(w, [&](const WeightSpec&, int, const Linear& l) {
    if (l.b.rows > 0) out.push_back({1, l.b.cols, true});  // biases are f32 like the norms
  });
  return out;
}

std::vector<MatrixShape> matrix_shapes(const Config& c) {
  std::vector<MatrixShape> out;
  for_each_tensor(c, [&](const WeightSpec& spec, int) {
    if (spec.slot == Slot::Output && c.tied_output) return;
    const auto [rows, cols] = slot_shape(c, spec.slot);
    out.push_back({rows, cols, spec.is_norm});
  });
  return out;
}

uint64_t matrix_bytes(DType t, int64_t rows, int64_t cols, int64_t row_pad) {
  const uint64_t ld = uint64_t((cols + row_pad - 1) / row_pad * row_pad);
  if (is_block_format(t)) return uint64_t(rows) * lr::row_bytes(t, ld).value_or(0);
  const uint64_t elem = t == DType::F32 ? 4 : t == DType::Q8_0 ? 1 : 2;
  return uint64_t(rows) * ld * elem +
         (t == DType::Q8_0 ? uint64_t(rows) * uint64_t(q8_blocks(cols)) * 2 : 0);
}

uint64_t estimate_bytes(const std::vector<MatrixShape>& shapes, DType wtype, int64_t row_pad) {
  uint64_t total = 0;
  for (const MatrixShape& m : shapes)
    total += m.norm ? uint64_t(m.rows) * uint64_t(m.cols) * 4 : matrix_bytes(wtype, m.rows, m.cols, row_pad);
  return total;
}

}  // namespace lr
