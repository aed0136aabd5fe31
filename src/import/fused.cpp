#include "import/fused.h"

#include "core/error.h"
#include "linalg/linalg.h"
#include "model/load.h"

namespace lr::ckpt {

namespace {

// Rows [r0, r1) of a 2-D tensor of `total` rows (any element type).
TensorView rows_view(const TensorView& t, int64_t r0, int64_t r1, int64_t total) {
  const uint64_t row_bytes = t.nbytes / uint64_t(total);
  TensorView v = t;
  v.shape[1] = uint64_t(r1 - r0);
  v.data = t.data + uint64_t(r0) * row_bytes;
  v.nbytes = uint64_t(r1 - r0) * row_bytes;
  v.mapping = nullptr;  // a view: the file's pages stay
  return v;
}

linalg::MatD to_double(const Matrix& m) {
  linalg::MatD d(m.rows, m.cols);
  for (int64_t i = 0; i < m.rows * m.cols; ++i) d.a[size_t(i)] = double(m.f32()[i]);
  return d;
}

// Whether the checkpoint has a tensor whose name starts with `prefix`.
bool has_prefix(const Checkpoint& ck, const std::string& prefix) {
  auto it = ck.names.lower_bound(prefix);
  return it != ck.names.end() && it->compare(0, prefix.size(), prefix) == 0;
}

}  // namespace

std::optional<FusedModule> fused_module(const Checkpoint& ck, const Config& c, Slot slot, int l) {
  if (c.arch != "phi3") return std::nullopt;
  FusedModule fm;
  const std::string layer = fmt::format("model.layers.{}.", l);
  if (slot == Slot::Q || slot == Slot::K || slot == Slot::V) {
    const int64_t q = c.q_dim(), kv = c.kv_dim();
    fm.names = names_of_module(layer + "self_attn.qkv_proj.weight");
    fm.rows = q + 2 * kv;
    fm.parts = {{Slot::Q, 0, q}, {Slot::K, q, q + kv}, {Slot::V, q + kv, q + 2 * kv}};
  } else if (slot == Slot::Gate || slot == Slot::Up) {
    const int64_t f = c.ffn_dim;
    fm.names = names_of_module(layer + "mlp.gate_up_proj.weight");
    fm.rows = 2 * f;
    fm.parts = {{Slot::Gate, 0, f}, {Slot::Up, f, 2 * f}};
  } else {
    return std::nullopt;
  }
  // Its own tensors (M.*: dense, v_proj/u_proj, A/BLinear) or SVD-LLM v1's
  // P.<x>_u_proj / P.<x>_v_proj beside it.
  const Names& n = fm.names;
  if (!has_prefix(ck, n.M + ".") && !has_prefix(ck, n.P + "." + n.x + "_")) return std::nullopt;
  return fm;
}

void import_fused(const Checkpoint& ck, const std::string& fam, const FusedModule& fm, int l,
                  Weights& w, std::vector<MatrixReport>& out) {
  const Config& c = w.cfg;
  const Names& n = fm.names;
  const bool palu = fam == "palu" && ck.has(n.M + ".VT.weight");
  const bool basis =
      fam == "basis-sharing" && (ck.has(n.P + "." + n.x + "_basis.weight") ||
                                 ck.has(fmt::format("model.{}_basis.{}.weight", n.x, l)));
  const bool codes = fam == "dobi" && ck.find_raw(n.M + ".us_quan");
  if (palu || basis || codes)
    fail(
        "{}: '{}' is {}'s fused {}_proj module: {} factors of a fused module are not supported "
        "(SVD-LLM, ASVD and Dobi-SVD factor pairs are: split by rows)",
        ck.path, n.M, c.arch, n.x,
        palu    ? "Palu's per-head-group"
        : basis ? "Basis Sharing's"
                : "Dobi-SVD's 8-bit remapped");
  const int64_t in = c.dim;
  const std::string what = fmt::format("{}_proj of layer {}", n.x, l);
  std::string note;
  const auto pairs = factor_names(fam, n, l);
  const std::optional<FactorPair> pair = find_factor_pair(ck, pairs, fm.rows, in, what, &note);
  std::optional<TensorView> dense;
  if (!pair) {
    dense = ck.find(n.hf);
    if (!dense) {
      std::string looked;
      for (const auto& [a, b] : pairs) looked += fmt::format("'{}' / '{}' and ", a, b);
      fail("{}: no factors and no dense weight for {} (looked for {}'{}')", ck.path, what, looked,
           n.hf);
    }
    if (rc(*dense) != std::pair{uint64_t(fm.rows), uint64_t(in)})
      fail("{}: dense tensor '{}' has shape {}, expected [{}, {}]", ck.path, n.hf, dims(*dense),
           fm.rows, in);
  }
  const Matrix v = pair ? read_matrix(pair->v, DType::F32, false, c.head_dim) : Matrix{};
  const int64_t r = v.rows;
  for (const FusedPart& p : fm.parts) {
    const WeightSpec& spec = weight_spec(p.slot);
    Linear& lin = slot_linear(w, p.slot, l);
    const int64_t rows = p.r1 - p.r0;
    MatrixReport mr{fmt::format("blk.{}.{}", l, spec.kind), rows, in, 0, false, note};
    if (dense) {
      lin.w = read_dense(rows_view(*dense, p.r0, p.r1, fm.rows), c, p.slot);
      mr.note = fmt::format("rows {}..{} of the dense {}_proj", p.r0, p.r1, n.x);
    } else if (r * (rows + in) < rows * in) {  // the part's share of the pair is smaller: kept
      lin.u = read_factor_u(rows_view(pair->u, p.r0, p.r1, fm.rows), c, p.slot);
      lin.v = read_matrix(pair->v, DType::F32, false, c.head_dim);  // its own copy
      mr.rank = r;
      mr.note = fmt::format("{}_proj's rank-{} pair split: rows {}..{} of U, V copied", n.x, r,
                            p.r0, p.r1);
    } else {  // U_p V multiplied back, as a dense map is read
      const Matrix up =
          read_matrix(rows_view(pair->u, p.r0, p.r1, fm.rows), DType::F32, false, c.head_dim);
      const linalg::MatD prod = linalg::matmul(to_double(up), to_double(v));
      const std::vector<float> wf(prod.a.begin(), prod.a.end());
      lin.w = read_dense(f32_view(wf, rows, in), c, p.slot);
      mr.note = fmt::format(
          "{}_proj's rank-{} pair split: rank {} is not smaller than this part: multiplied back "
          "to dense",
          n.x, r, r);
    }
    out.push_back(mr);
  }
}

}  // namespace lr::ckpt
