#include "import/import_model.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "format/dobi_remap.h"
#include "format/gguf_source.h"
#include "format/safetensors.h"
#include "format/torch_checkpoint.h"
#include "import/checkpoint.h"
#include "import/fused.h"
#include "linalg/linalg.h"
#include "model/config.h"
#include "model/load.h"
#include "model/save.h"

namespace lr {

namespace {

using ckpt::Checkpoint;
using ckpt::config_int;
using ckpt::dims;
using ckpt::f32_view;
using ckpt::json;
using ckpt::names_of;
using ckpt::rc;

// GGUF-named non-linear tensors (embedding, norms, output head) for the
// writer: from the checkpoint under their HuggingFace names, else from --base.
// Gemma's norms, stored in HuggingFace as w for a scale of (1 + w), are
// written as 1 + w (as llama.cpp's converter writes them and the loader reads).
class ImportSource final : public TensorSource {
 public:
  ImportSource(const Checkpoint& ck, const TensorSource& base, const Config& c)
      : ck_(ck), base_(base), norm_offset_(hf_norm_offset(c)) {
    for (const WeightSpec& spec : kWeightTable) {
      if ((spec.is_linear() && spec.slot != Slot::Output) || !spec.present(c)) continue;
      const int n = spec.per_layer ? c.n_layers : 1;
      for (int l = 0; l < n; ++l) {
        const std::string gguf_name =
            spec.per_layer ? fmt::format(fmt::runtime(spec.gguf), l) : std::string(spec.gguf);
        hf_[gguf_name] = {hf_tensor_name(spec, c, l), slot_shape(c, spec.slot), spec.is_norm};
      }
    }
  }
  const std::string& path() const override { return ck_.path; }
  std::optional<TensorView> find(const std::string& name) const override {
    auto it = hf_.find(name);
    if (it == hf_.end()) return std::nullopt;  // linear maps are written from the weights
    const Entry& e = it->second;
    if (auto t = ck_.find(e.hf)) {
      const bool ok = e.norm
                          ? t->shape == std::vector<uint64_t>{uint64_t(e.shape.second)}
                          : rc(*t) == std::pair{uint64_t(e.shape.first), uint64_t(e.shape.second)};
      if (!ok)
        fail("{}: tensor '{}' has shape {}, expected [{}, {}]", ck_.path, e.hf, dims(*t),
             e.shape.first, e.shape.second);
      if (!e.norm || !norm_offset_) return t;
      std::vector<float>& v = shifted_[name];
      v.resize(size_t(e.shape.second));
      dequantize(t->dtype, t->data, v.data(), int64_t(v.size()));
      for (float& x : v) x += 1.f;
      return TensorView{DType::F32, t->shape, reinterpret_cast<const uint8_t*>(v.data()),
                        v.size() * 4, nullptr};
    }
    from_base_.insert(name);
    return base_.find(name);
  }
  const std::set<std::string>& from_base() const { return from_base_; }
  bool has_output() const { return ck_.has("lm_head.weight"); }

 private:
  struct Entry {
    std::string hf;
    std::pair<int64_t, int64_t> shape;
    bool norm;
  };
  const Checkpoint& ck_;
  const TensorSource& base_;
  bool norm_offset_;
  std::map<std::string, Entry> hf_;
  mutable std::set<std::string> from_base_;
  mutable std::map<std::string, std::vector<float>> shifted_;  // Gemma's norms, 1 + w
};

// Palu's k or v projection of layer l, when its factors are there: U is
// block-diagonal over head groups, and is stored as one dense [out, sum r_g]
// factor (exact; the off-block zeros are counted in the report's note).
bool import_palu(const Checkpoint& ck, const Config& c, const WeightSpec& spec, int l,
                 const std::string& M, Linear& lin, ImportReport& rep) {
  if (spec.slot != Slot::K && spec.slot != Slot::V) return false;
  const auto vt = ck.find(M + ".VT.weight");
  if (!vt) return false;
  const auto [out_dim, in_dim] = slot_shape(c, spec.slot);
  const auto [R, vcols] = rc(*vt);
  if (vcols != uint64_t(in_dim) || R == 0)
    fail("{}: '{}.VT.weight' has shape {}, expected [rank, {}] ({} of layer {})", ck.path, M,
         dims(*vt), in_dim, spec.kind, l);
  std::vector<TensorView> us;
  std::vector<int64_t> ranks;
  uint64_t rows = 0;
  for (int g = 0;; ++g) {
    const auto u = ck.find(fmt::format("{}.U.{}.weight", M, g));
    if (!u) break;
    if (ck.find(fmt::format("{}.U.{}.bias", M, g)))
      fail("{}: '{}.U.{}.bias': biased k/v projections are not supported (LLaMA models have none)",
           ck.path, M, g);
    const auto [ur, uc] = rc(*u);
    if (ur == 0 || uc == 0)
      fail("{}: '{}.U.{}.weight' has shape {}, expected [group rows, rank]", ck.path, M, g,
           dims(*u));
    us.push_back(*u);
    ranks.push_back(int64_t(uc));
    rows += ur;
  }
  uint64_t rsum = 0;
  for (int64_t r : ranks) rsum += uint64_t(r);
  if (us.empty()) fail("{}: '{}.VT.weight' has no '{}.U.0.weight' beside it", ck.path, M, M);
  if (rows != uint64_t(out_dim) || rsum != R)
    fail(
        "{}: the {} U.* blocks of '{}' have {} rows and ranks summing to {}; expected {} rows and "
        "the {} rows "
        "of its VT",
        ck.path, us.size(), M, rows, rsum, out_dim, R);
  if (ck.config.is_object()) {
    auto hw = ck.config.find("head_wise_ranks");
    if (hw != ck.config.end() && hw->is_object() && hw->contains(M)) {
      const json& want = (*hw)[M];
      std::vector<int64_t> w;
      if (want.is_array())
        for (const json& x : want) w.push_back(config_int(ck.path, x, "head_wise_ranks." + M));
      if (w != ranks)
        fail("{}: config.json head_wise_ranks says {} has group ranks {}, its U.* blocks have {}",
             ck.path, M, want.dump(), json(ranks).dump());
    }
  }
  // Block g: rows [r0, r0 + group rows), columns [c0, c0 + r_g), in HuggingFace row order.
  std::vector<float> U(size_t(out_dim) * size_t(R), 0.f);
  uint64_t r0 = 0, c0 = 0;
  for (const TensorView& u : us) {
    const Matrix m = read_matrix(u, DType::F32, false, c.head_dim);
    for (int64_t i = 0; i < m.rows; ++i)
      std::copy_n(m.f32() + i * m.cols, m.cols,
                  &U[size_t(r0 + uint64_t(i)) * size_t(R) + size_t(c0)]);
    r0 += uint64_t(m.rows);
    c0 += uint64_t(m.cols);
  }
  lin.u = ckpt::read_factor_u(f32_view(U, out_dim, int64_t(R)), c, spec.slot);
  lin.v = read_matrix(*vt, DType::F32, false, c.head_dim);
  MatrixReport mr{fmt::format("blk.{}.{}", l, spec.kind), out_dim, in_dim, int64_t(R), false, ""};
  std::string rs;
  for (int64_t r : ranks) rs += (rs.empty() ? "" : "+") + std::to_string(r);
  uint64_t nonzero = 0;  // entries inside the blocks
  for (size_t g = 0; g < us.size(); ++g) nonzero += rc(us[g]).first * uint64_t(ranks[g]);
  mr.note =
      fmt::format("Palu: {} head group(s), ranks {}; block-diagonal U stored dense ({:.0f}% zeros)",
                  us.size(), rs, 100.0 * (1.0 - double(nonzero) / double(U.size())));
  rep.matrices.push_back(mr);
  return true;
}

// Dobi-SVD's remapped projection M of layer l, when its 8-bit codes are there:
// dequantized as Dobi's loader does, kept as the factor pair when that is
// smaller than the matrix ((out + in) k < out in), else multiplied back to a
// dense matrix, as the loader also does.
bool import_dobi_remap(const Checkpoint& ck, const Config& c, const WeightSpec& spec, int l,
                       const std::string& M, Linear& lin, ImportReport& rep) {
  auto us_quan = ck.find_raw(M + ".us_quan");
  if (!us_quan) return false;
  const auto [out_dim, in_dim] = slot_shape(c, spec.slot);
  const std::string what = fmt::format("{}: {}", ck.path, M);
  auto need_raw = [&](const char* f) {
    auto t = ck.find_raw(M + "." + f);
    if (!t) fail("{}: '{}.us_quan' has no '{}.{}' beside it", ck.path, M, M, f);
    return *t;
  };
  auto need = [&](const char* f) {
    auto t = ck.find(M + "." + f);
    if (!t) fail("{}: '{}.us_quan' has no '{}.{}' beside it", ck.path, M, M, f);
    return *t;
  };
  dobi::RemappedTensors t{*us_quan,
                          need_raw("vt_quan"),
                          need("us_absmax"),
                          need("vt_absmax"),
                          ck.find_string(M + ".tuple_info.0"),
                          ck.find(M + ".tuple_info.1")};
  const dobi::Factors f = dobi::dequantize(what, t, out_dim, in_dim);
  MatrixReport mr{fmt::format("blk.{}.{}", l, spec.kind), out_dim, in_dim, f.k, false, ""};
  if ((out_dim + in_dim) * f.k < out_dim * in_dim) {
    lin.u = ckpt::read_factor_u(f32_view(f.us, out_dim, f.k), c, spec.slot);
    lin.v = read_matrix(f32_view(f.vt, f.k, in_dim), DType::F32, false, c.head_dim);
    mr.note = "Dobi-SVD remapped: 8-bit codes dequantized";
  } else {
    linalg::MatD us(out_dim, f.k), vt(f.k, in_dim);
    std::copy(f.us.begin(), f.us.end(), us.a.begin());
    std::copy(f.vt.begin(), f.vt.end(), vt.a.begin());
    const linalg::MatD prod = linalg::matmul(us, vt);
    const std::vector<float> w(prod.a.begin(), prod.a.end());
    lin.w = ckpt::read_dense(f32_view(w, out_dim, in_dim), c, spec.slot);
    mr.rank = 0;
    mr.note = fmt::format(
        "Dobi-SVD remapped rank {} is not smaller than the matrix: multiplied back to dense", f.k);
  }
  rep.matrices.push_back(mr);
  return true;
}

// The first pair of `pairs` the checkpoint holds, as lin's factors (a basis
// read once for all the matrices that share its storage). False: none held.
bool import_factors(const Checkpoint& ck, const Config& c, const WeightSpec& spec, int l,
                    const std::vector<std::pair<std::string, std::string>>& pairs,
                    std::map<const uint8_t*, Matrix>& bases, Linear& lin, MatrixReport& mr) {
  const auto [out_dim, in_dim] = slot_shape(c, spec.slot);
  const auto pair = ckpt::find_factor_pair(ck, pairs, out_dim, in_dim,
                                           fmt::format("{} of layer {}", spec.kind, l), &mr.note);
  if (!pair) return false;
  auto it = bases.find(pair->v.data);
  if (it == bases.end())
    it = bases.emplace(pair->v.data, read_matrix(pair->v, DType::F32, false, c.head_dim)).first;
  lin.v = it->second;
  lin.u = ckpt::read_factor_u(pair->u, c, spec.slot);
  mr.rank = lin.v.rows;
  return true;
}

// The dense weight of a matrix the checkpoint did not factor; an error
// naming every name looked for when it is not there either.
void import_dense(const Checkpoint& ck, const Config& c, const std::string& fam,
                  const WeightSpec& spec, int l,
                  const std::vector<std::pair<std::string, std::string>>& pairs, Linear& lin) {
  const auto [out_dim, in_dim] = slot_shape(c, spec.slot);
  const auto [hf, M, P, x] = names_of(spec, l);
  auto t = ck.find(hf);
  if (!t) {
    std::string looked;
    for (const auto& [a, b] : pairs) looked += fmt::format("'{}' / '{}' and ", a, b);
    if (fam == "palu" && (spec.slot == Slot::K || spec.slot == Slot::V))
      looked += fmt::format("'{}.VT.weight' / '{}.U.0.weight' and ", M, M);
    fail("{}: no factors and no dense weight for {} of layer {} (looked for {}'{}')", ck.path,
         spec.kind, l, looked, hf);
  }
  if (rc(*t) != std::pair{uint64_t(out_dim), uint64_t(in_dim)})
    fail("{}: dense tensor '{}' has shape {}, expected [{}, {}]", ck.path, hf, dims(*t), out_dim,
         in_dim);
  lin.w = ckpt::read_dense(*t, c, spec.slot);
}

// Every linear map of every layer from the checkpoint, as `fam` stores them.
void import_layers(const Checkpoint& ck, const std::string& fam, Weights& w, ImportReport& rep) {
  const Config& c = w.cfg;
  std::map<const uint8_t*, Matrix> bases;  // a shared basis is one matrix (by checkpoint storage)
  for (int l = 0; l < c.n_layers; ++l)
    for (const WeightSpec& spec : kWeightTable) {
      if (!spec.is_linear() || !spec.per_layer) continue;
      // Phi-3's fused qkv_proj and gate_up_proj: the group at its first part (import/fused.h).
      if (const auto fm = ckpt::fused_module(ck, c, spec.slot, l)) {
        if (fm->parts.front().slot == spec.slot)
          ckpt::import_fused(ck, fam, *fm, l, w, rep.matrices);
        continue;
      }
      const std::string M = names_of(spec, l).M;
      Linear& lin = slot_linear(w, spec.slot, l);
      if (fam == "dobi" && import_dobi_remap(ck, c, spec, l, M, lin, rep)) continue;
      // Palu's k and v: V^T [sum r_g, in] and one U.g [group rows, r_g] per head group; the rest
      // dense.
      if (fam == "palu" && import_palu(ck, c, spec, l, M, lin, rep)) continue;
      const auto pairs = ckpt::factor_names(fam, names_of(spec, l), l);
      const auto [out_dim, in_dim] = slot_shape(c, spec.slot);
      MatrixReport mr{fmt::format("blk.{}.{}", l, spec.kind), out_dim, in_dim, 0, false, ""};
      if (!import_factors(ck, c, spec, l, pairs, bases, lin, mr))
        import_dense(ck, c, fam, spec, l, pairs, lin);
      rep.matrices.push_back(mr);
    }
}

// Rank maps in config.json must agree with the tensors.
void check_config_ranks(const Checkpoint& ck, const std::string& fam, const Weights& w) {
  const Config& c = w.cfg;
  if (!ck.config.is_object()) return;
  for (const char* key : {"svd_ranks", "truncation_ranks", "dobi_target_modules"}) {
    auto m = ck.config.find(key);
    if (m == ck.config.end() || !m->is_object()) continue;
    for (int l = 0; l < c.n_layers; ++l)
      for (const WeightSpec& spec : kWeightTable) {
        if (!spec.is_linear() || !spec.per_layer) continue;
        const std::string module = names_of(spec, l).M;
        auto r = m->find(module);
        if (r == m->end()) continue;
        const int64_t want = config_int(ck.path, *r, std::string(key) + "." + module);
        const int64_t have = slot_linear(w, spec.slot, l).rank();
        if (want != have)
          fail("{}: config.json {} says {} has rank {}, its tensors have rank {}", ck.path, key,
               module, want, have);
      }
  }
  for (const WeightSpec& spec : kWeightTable) {  // Basis Sharing: num_basis_<x>
    if (!spec.is_linear() || !spec.per_layer || fam != "basis-sharing") continue;
    const std::string x = names_of(spec, 0).x;
    auto n = ck.config.find("num_basis_" + x);
    if (n == ck.config.end()) continue;
    const int64_t want = config_int(ck.path, *n, "num_basis_" + x);
    for (int l = 0; l < c.n_layers; ++l) {
      const int64_t have = slot_linear(w, spec.slot, l).rank();
      if (have != want)
        fail("{}: config.json num_basis_{} is {}, layer {} has a {} basis of {} vectors", ck.path,
             x, want, l, x, have);
    }
  }
}

// Basis Sharing: layers whose config says they share must hold identical
// bases, then stored once.
void check_shared_bases(const Checkpoint& ck, Weights& w) {
  const Config& c = w.cfg;
  if (!ck.config.is_object()) return;
  for (const WeightSpec& spec : kWeightTable) {
    if (!spec.is_linear() || !spec.per_layer) continue;
    const std::string x = names_of(spec, 0).x;
    auto g = ck.config.find(x + "_groups");
    if (g == ck.config.end() || !g->is_array()) continue;
    for (const auto& group : *g) {
      if (!group.is_array() || group.empty())
        fail("{}: config.json {}_groups has an empty or non-list group", ck.path, x);
      const int64_t first = config_int(ck.path, group[0], x + "_groups");
      for (const auto& m : group) {
        const int64_t l = config_int(ck.path, m, x + "_groups");
        if (l < 0 || l >= c.n_layers || first < 0 || first >= c.n_layers)
          fail("{}: config.json {}_groups names layer {}, the model has {}", ck.path, x, l,
               c.n_layers);
        const Linear& a = slot_linear(w, spec.slot, first);
        const Linear& b = slot_linear(w, spec.slot, l);
        if (!a.low_rank() || !b.low_rank()) continue;
        if (a.v.ptr() == b.v.ptr()) continue;
        if (a.v.rows != b.v.rows || std::memcmp(a.v.ptr(), b.v.ptr(), size_t(a.v.bytes())) != 0)
          fail(
              "{}: layers {} and {} claim to share the {} basis ({}_groups) but their bases differ",
              ck.path, first, l, x, x);
        slot_linear(w, spec.slot, l).v = a.v;  // identical: stored once
      }
    }
  }
}

// Which imported maps share their basis with another, in rep.matrices' order.
void mark_shared(const Weights& w, ImportReport& rep) {
  // The block's maps layer by layer, as rep.matrices lists them.
  auto block = [&](auto&& f) {
    for_each_linear(w, [&](const WeightSpec& spec, int, const Linear& lin) {
      if (spec.per_layer) f(lin);
    });
  };
  std::map<const uint8_t*, int> uses;
  block([&](const Linear& lin) { uses[lin.v.ptr()] += lin.low_rank(); });
  size_t i = 0;
  block([&](const Linear& lin) {
    rep.matrices[i++].shared = lin.low_rank() && uses[lin.v.ptr()] > 1;
  });
}

}  // namespace

ImportReport import_checkpoint(const std::string& in, const std::string& out,
                               const ImportOptions& opt) {
  if (opt.base.empty())
    fail(
        "import needs --base: the dense GGUF model the checkpoint was compressed from (config, "
        "tokenizer, and "
        "any embedding, norm or output weights the checkpoint omits)");
  const std::set<std::string> families = {"auto", "svdllm",        "asvd",
                                          "dobi", "basis-sharing", "palu"};
  if (!families.count(opt.from))
    fail(
        "unknown family '{}' for --from (expected auto, svdllm, asvd, dobi, basis-sharing or palu)",
        opt.from);
  auto base = gguf::File::open(opt.base);
  GgufSource base_src(base);
  Weights w;
  w.cfg = config_from_gguf(*base);
  const Config& c = w.cfg;
  w.layers.resize(size_t(c.n_layers));
  Checkpoint ck = Checkpoint::open(in);

  ImportReport rep;
  rep.family = opt.from;
  if (opt.from == "auto") rep.family = ckpt::detect(ck, &rep.detected_by);
  const std::string& fam = rep.family;
  rep.params_before = parameter_count(c);

  import_layers(ck, fam, w, rep);
  check_config_ranks(ck, fam, w);
  if (fam == "basis-sharing") check_shared_bases(ck, w);
  mark_shared(w, rep);
  ImportSource src(ck, base_src, c);
  w.cfg.tied_output = !src.has_output() && !base_src.find("output.weight");
  SaveOptions so;
  so.factor_type = opt.factor_type;
  gguf::Value method;
  method.type = gguf::ValueType::STRING;
  method.s = "import:" + fam;
  so.metadata.push_back({"lowrank.method", method});
  save_gguf(w, *base, src, out, so);
  rep.from_base.assign(src.from_base().begin(), src.from_base().end());
  // Parameters: the linear maps as imported (a shared basis once) plus the
  // embedding, norms and head of the dense model.
  uint64_t dense_linear = 0;
  for_each_tensor(c, [&](const WeightSpec& spec, int) {
    if (!spec.is_linear() || !spec.per_layer) return;
    const auto [r, cc] = slot_shape(c, spec.slot);
    dense_linear += uint64_t(r) * uint64_t(cc);
  });
  rep.params_after = w.parameters() + rep.params_before - dense_linear;
  return rep;
}

}  // namespace lr
