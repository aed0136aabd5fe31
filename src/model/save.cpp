#include "model/save.h"
#include "model/key_calibration.h"

#include <map>

#include "core/error.h"
#include "model/load.h"

namespace lr {

namespace {

void add_matrix(gguf::Writer& out, const std::string& name, const Matrix& m, DType type) {
  std::vector<float> row(static_cast<size_t>(m.cols));
  uint64_t rb = *row_bytes(type, uint64_t(m.cols));
  std::vector<uint8_t> bytes(rb * uint64_t(m.rows));
  for (int64_t r = 0; r < m.rows; ++r) {
    m.row_to_f32(r, row.data());
    quantize(type, row.data(), bytes.data() + uint64_t(r) * rb, m.cols);
  }
  out.add_tensor(name, type, {uint64_t(m.cols), uint64_t(m.rows)}, bytes.data(), bytes.size());
}

void copy_tensor(gguf::Writer& out, const TensorSource& src, const std::string& name) {
  std::optional<TensorView> t = src.find(name);
  LR_ASSERT(t.has_value());
  out.add_tensor(name, t->dtype, t->shape, t->data, t->nbytes);
}

}  // namespace

void save_gguf(const Weights& w, const gguf::File& meta, const TensorSource& src,
               const std::string& path, const SaveOptions& opt) {
  if (opt.factor_type != DType::F32 && opt.factor_type != DType::F16 &&
      opt.factor_type != DType::BF16)
    fail("low-rank factors can be stored as F32, F16 or BF16, not {}", dtype_name(opt.factor_type));
  gguf::Writer out;
  for (const auto& [key, value] : meta.metadata()) {
    if (key.rfind("lowrank.", 0) == 0 || key == "general.file_type") continue;
    out.set(key, value);
  }
  out.set_u32("lowrank.format_version", 1);
  for (const auto& [key, value] : opt.metadata) out.set(key, value);

  const Config& c = w.cfg;
  for (const WeightSpec& spec : kWeightTable) {
    const int n = spec.per_layer ? c.n_layers : 1;
    if (!spec.is_linear()) {
      for (int l = 0; l < n; ++l) copy_tensor(out, src, spec.per_layer ? fmt::format(fmt::runtime(spec.gguf), l) : spec.gguf);
      continue;
    }
    if (spec.slot == Slot::Output && c.tied_output) continue;
    // Shared bases: an input factor whose storage appears in more than one layer.
    std::map<const uint8_t*, int> uses;
    for (int l = 0; l < n; ++l) {
      const Linear& lin = slot_linear(w, spec.slot, l);
      if (lin.low_rank()) ++uses[lin.v.data.get()];
    }
    std::map<const uint8_t*, int> group_of;
    std::vector<int32_t> groups(static_cast<size_t>(n), -1), ranks(static_cast<size_t>(n), 0);
    bool any_shared = false;
    for (int l = 0; l < n; ++l) {
      const Linear& lin = slot_linear(w, spec.slot, l);
      std::string dense_name = spec.per_layer ? fmt::format(fmt::runtime(spec.gguf), l) : spec.gguf;
      if (!lin.low_rank()) {
        if (src.find(dense_name))
          copy_tensor(out, src, dense_name);
        else
          add_matrix(out, dense_name, lin.w, opt.factor_type);
        continue;
      }
      ranks[size_t(l)] = int32_t(lin.rank());
      add_matrix(out, lowrank_out_name(spec, l), lin.u, opt.factor_type);
      const uint8_t* key = lin.v.data.get();
      if (uses[key] > 1) {
        any_shared = true;
        auto it = group_of.find(key);
        if (it == group_of.end()) {
          int g = int(group_of.size());
          it = group_of.emplace(key, g).first;
          add_matrix(out, shared_basis_name(spec, g), lin.v, opt.factor_type);
        }
        groups[size_t(l)] = it->second;
      } else {
        add_matrix(out, lowrank_in_name(spec, l), lin.v, opt.factor_type);
      }
    }
    out.set_i32s(fmt::format("lowrank.rank.{}", spec.kind), ranks);
    if (any_shared) out.set_i32s(shared_map_key(spec), groups);
  }
  write_key_calibration(out, w);
  out.write(path);
}

}  // namespace lr
