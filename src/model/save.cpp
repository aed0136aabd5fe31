#include "model/save.h"

#include <cstring>
#include <map>

#include "core/error.h"
#include "model/fused_tensors.h"
#include "model/key_calibration.h"
#include "model/load.h"

namespace lr {

namespace {

// Row r of m as a file stores it in `type`: converted from its values, or,
// where m already holds `type` (as_stored_factor), its bytes as they are.
void stored_row(const Matrix& m, int64_t r, DType type, float* tmp, uint8_t* dst) {
  if (m.dtype == type && type == DType::Q8_0) {  // scales back beside their blocks: exact
    q8_0_row_to_blocks(m.q8() + r * m.cols, m.scales.get() + r * q8_blocks(m.cols), m.cols, dst);
  } else if (m.dtype == type) {
    std::memcpy(dst, m.ptr() + uint64_t(r) * m.row_bytes(), m.row_bytes());
  } else {
    m.row_to_f32(r, tmp);
    quantize(type, tmp, dst, m.cols);
  }
}

void add_matrix(gguf::Writer& out, const std::string& name, const Matrix& m, DType type, bool vector = false) {
  std::vector<float> row(static_cast<size_t>(m.cols));
  uint64_t rb = *row_bytes(type, uint64_t(m.cols));
  std::vector<uint8_t> bytes(rb * uint64_t(m.rows));
  for (int64_t r = 0; r < m.rows; ++r)
    stored_row(m, r, type, row.data(), bytes.data() + uint64_t(r) * rb);
  out.add_tensor(name, type, vector ? std::vector<uint64_t>{uint64_t(m.cols)} : std::vector<uint64_t>{uint64_t(m.cols), uint64_t(m.rows)},
                 bytes.data(), bytes.size());
}

// A residual form's quantized W [rows, cols] as stored (its blocks copied),
// rows back in the file's order when the loader reorders them (`permute`).
void add_blocks(gguf::Writer& out, const std::string& name, const Matrix& m, bool permute,
                int head_dim, int rot_dims) {
  LR_ASSERT(is_block_format(m.dtype));
  const uint64_t rb = m.row_bytes();
  std::vector<uint8_t> bytes(rb * uint64_t(m.rows));
  for (int64_t r = 0; r < m.rows; ++r) {
    const int64_t to = permute ? hf_row_for_gguf_row(r, head_dim, rot_dims) : r;
    std::copy_n(m.ptr() + uint64_t(r) * rb, rb, bytes.data() + uint64_t(to) * rb);
  }
  out.add_tensor(name, m.dtype, {uint64_t(m.cols), uint64_t(m.rows)}, bytes.data(), bytes.size());
}

void copy_tensor(gguf::Writer& out, const TensorSource& src, const std::string& name) {
  std::optional<TensorView> t = src.find(name);
  LR_ASSERT(t.has_value());
  out.add_tensor(name, t->dtype, t->shape, t->data, t->nbytes);
}

}  // namespace

void check_factor_type(DType t) {
  for (DType ok : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K})
    if (t == ok) return;
  fail("low-rank factors can be stored as F32, F16, BF16, Q8_0, Q4_K, Q5_K or Q6_K, not {}", dtype_name(t));
}

DType factor_storage_type(DType want, int64_t cols) {
  if (row_bytes(want, uint64_t(cols))) return want;
  if (want != DType::Q8_0 && row_bytes(DType::Q8_0, uint64_t(cols))) return DType::Q8_0;
  return DType::F16;
}

Matrix as_stored_factor(const Matrix& f, DType want) {
  const DType t = factor_storage_type(want, f.cols);
  if (f.dtype == t) return f;
  Matrix s = Matrix::allocate(t, f.rows, f.cols);
  std::vector<float> row(size_t(f.cols));
  std::vector<uint8_t> bytes(*row_bytes(t, uint64_t(f.cols)));
  for (int64_t r = 0; r < f.rows; ++r) {
    f.row_to_f32(r, row.data());
    quantize(t, row.data(), bytes.data(), f.cols);
    if (t == DType::Q8_0)  // as the loader holds Q8_0
      q8_0_row_from_blocks(bytes.data(), f.cols,
                           reinterpret_cast<int8_t*>(s.data.get()) + r * f.cols,
                           s.scales.get() + r * q8_blocks(f.cols));
    else
      std::memcpy(s.data.get() + uint64_t(r) * s.row_bytes(), bytes.data(), bytes.size());
  }
  return s;
}

SaveReport save_gguf(const Weights& w, const gguf::File& meta, const TensorSource& file,
                     const std::string& path, const SaveOptions& opt) {
  const SplitFused src(file, w.cfg);  // a fused q/k/v or gate/up is written as its parts
  check_factor_type(opt.factor_type);
  SaveReport report;
  gguf::Writer out;
  auto add_factor = [&](const std::string& name, const Matrix& m) {
    const DType t = factor_storage_type(opt.factor_type, m.cols);
    ++report.written_types[t];
    add_matrix(out, name, m, t);
  };
  for (const auto& [key, value] : meta.metadata()) {
    if (key.rfind("lowrank.", 0) == 0 || key == "general.file_type") continue;
    out.set(key, value);
  }
  out.set_u32("lowrank.format_version", 1);
  for (const auto& [key, value] : opt.metadata) out.set(key, value);

  const Config& c = w.cfg;
  // A shared basis: an input factor whose storage more than one layer uses.
  std::map<const uint8_t*, int> uses;
  for_each_linear(w, [&](const WeightSpec&, int, const Linear& lin) {
    if (lin.low_rank()) ++uses[lin.v.data.get()];
  });
  // Per kind of map: the ranks of its layers (0: dense), and the shared basis
  // each layer uses (-1: its own), stored as lowrank.* metadata.
  struct Kind {
    std::vector<int32_t> ranks, groups;
    std::map<const uint8_t*, int> group_of;
  };
  std::map<Slot, Kind> kinds;
  for_each_tensor(c, [&](const WeightSpec& spec, int l) {
    const std::string name = spec.per_layer ? fmt::format(fmt::runtime(spec.gguf), l) : spec.gguf;
    if (!spec.is_linear()) return copy_tensor(out, src, name);
    if (spec.slot == Slot::Output && c.tied_output) return;
    Kind& k = kinds[spec.slot];
    k.ranks.resize(size_t(spec.per_layer ? c.n_layers : 1), 0);
    k.groups.resize(k.ranks.size(), -1);
    const Linear& lin = slot_linear(w, spec.slot, l);
    // A bias as stored (the loader reorders it again), or in the runtime's
    // order when the source names it otherwise (HuggingFace imports).
    if (lin.b.rows && src.find(bias_name(name))) copy_tensor(out, src, bias_name(name));
    else if (lin.b.rows) add_matrix(out, bias_name(name), lin.b, DType::F32, /*vector=*/true);
    // A block-format W this writes itself: loaded Q and K rows go back to the file's order.
    const bool permute = c.rope_neox && (spec.slot == Slot::Q || spec.slot == Slot::K);
    if (!lin.low_rank()) {
      // As stored, unless a block-format W is not the source's (the residual
      // form's W where its correction got rank 0); the permuted rows of a
      // loaded Q or K go back to the file's order either way.
      const std::optional<TensorView> t = src.find(name);
      const bool own_blocks = is_block_format(lin.w.dtype) && (!t || t->data != lin.w.ptr());
      if (own_blocks) {
        add_blocks(out, name, lin.w, permute, c.head_dim, c.rotary_dims());
        if (!t || t->dtype != lin.w.dtype) ++report.written_types[lin.w.dtype];
      } else if (t) {
        copy_tensor(out, src, name);
      } else {
        add_factor(name, lin.w);
      }
      return;
    }
    if (lin.residual()) {
      if (!is_block_format(lin.w.dtype))
        fail("{}: the residual form stores its W in a block format, not {}", name,
             dtype_name(lin.w.dtype));
      add_blocks(out, name, lin.w, permute, c.head_dim, c.rotary_dims());
      ++report.written_types[lin.w.dtype];
    }
    k.ranks[size_t(l)] = int32_t(lin.rank());
    add_factor(lowrank_out_name(spec, l), lin.u);
    if (lin.pivoted()) out.set_i32s(pivots_key(spec, l), lin.pivots->rows);
    const uint8_t* key = lin.v.data.get();
    if (uses[key] == 1) return add_factor(lowrank_in_name(spec, l), lin.v);
    auto it = k.group_of.find(key);
    if (it == k.group_of.end()) {
      it = k.group_of.emplace(key, int(k.group_of.size())).first;
      add_factor(shared_basis_name(spec, it->second), lin.v);
    }
    k.groups[size_t(l)] = it->second;
  });
  for (const char* t : {"rope_factors_short.weight", "rope_factors_long.weight"})  // LongRoPE
    if (src.find(t)) copy_tensor(out, src, t);
  if (!c.rope_freq_factors.empty() && !src.find("rope_factors_short.weight")) {
    // Llama-3.1 RoPE scaling travels as llama.cpp writes it
    if (src.find("rope_freqs.weight"))
      copy_tensor(out, src, "rope_freqs.weight");
    else
      out.add_tensor("rope_freqs.weight", DType::F32, {uint64_t(c.rope_freq_factors.size())},
                     c.rope_freq_factors.data(), c.rope_freq_factors.size() * 4);
  }
  for (const auto& [slot, k] : kinds) {
    const WeightSpec& spec = weight_spec(slot);
    out.set_i32s(fmt::format("lowrank.rank.{}", spec.kind), k.ranks);
    if (!k.group_of.empty()) out.set_i32s(shared_map_key(spec), k.groups);
  }
  write_key_calibration(out, w);
  out.write(path);
  return report;
}

}  // namespace lr
