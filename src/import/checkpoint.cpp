#include "import/checkpoint.h"

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "model/load.h"

namespace lr::ckpt {

namespace fs = std::filesystem;

Checkpoint Checkpoint::open(const std::string& path) {
  Checkpoint c;
  c.path = path;
  std::error_code ec;
  if (!fs::exists(path, ec)) fail("{}: no such file or directory", path);
  if (!fs::is_directory(path, ec)) {
    if (path.size() > 12 && path.compare(path.size() - 12, 12, ".safetensors") == 0)
      c.add_safetensors(SafetensorsSource::open_file(path));
    else
      c.add_torch(path);
    return c;
  }
  const fs::path dir(path);
  if (fs::exists(dir / "config.json")) {
    std::ifstream in(dir / "config.json");
    try {
      c.config = json::parse(in);
    } catch (const json::exception& e) {
      fail("{}/config.json: not valid JSON: {}", path, e.what());
    }
  }
  if (fs::exists(dir / "model.safetensors") || fs::exists(dir / "model.safetensors.index.json")) {
    c.add_safetensors(SafetensorsSource::open_dir(path));
  } else if (fs::exists(dir / "pytorch_model.bin.index.json")) {
    std::ifstream in(dir / "pytorch_model.bin.index.json");
    json idx;
    try {
      idx = json::parse(in);
    } catch (const json::exception& e) {
      fail("{}/pytorch_model.bin.index.json: not valid JSON: {}", path, e.what());
    }
    if (!idx.contains("weight_map") || !idx["weight_map"].is_object())
      fail("{}/pytorch_model.bin.index.json: no \"weight_map\" object", path);
    std::set<std::string> files;
    for (auto& [k, v] : idx["weight_map"].items()) {
      if (!v.is_string() || v.get<std::string>().find('/') != std::string::npos)
        fail("{}/pytorch_model.bin.index.json: weight_map entry '{}' is not a file name", path, k);
      files.insert(v.get<std::string>());
    }
    for (const std::string& f : files) c.add_torch((dir / f).string());
  } else if (fs::exists(dir / "pytorch_model.bin")) {
    c.add_torch((dir / "pytorch_model.bin").string());
  } else {
    fail(
        "{}: no model.safetensors, pytorch_model.bin or pytorch_model.bin.index.json in the "
        "directory",
        path);
  }
  // Dobi-SVD remapping: the factors' 8-bit codes beside the non-linear weights.
  if (fs::exists(dir / "remapping_weight.pt")) c.add_torch((dir / "remapping_weight.pt").string());
  return c;
}

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::string detect(const Checkpoint& c, std::string* why) {
  bool basis = false, ab = false, uv = false, palu = false, remap = false;
  for (const std::string& n : c.names) {
    remap |= ends_with(n, ".us_quan");
    basis |= ends_with(n, "_basis.weight");
    ab |= ends_with(n, ".BLinear.weight") || ends_with(n, ".ALinear.weight");
    uv |= ends_with(n, "_u_proj.weight") || ends_with(n, ".u_proj.weight");
    palu |= ends_with(n, ".VT.weight");
  }
  if (remap) {
    *why = "8-bit factor codes *.us_quan / *.vt_quan (Dobi-SVD remapping_weight.pt)";
    return "dobi";
  }
  if (palu) {
    *why = "tensors named *.VT.weight (Palu: k/v factors per head group)";
    return "palu";
  }
  if (basis) {
    *why = "tensors named *_basis.weight";
    return "basis-sharing";
  }
  if (ab) {
    const bool dobi = c.config.is_object() && c.config.contains("dobi_target_modules");
    const bool dobi_pickle = c.globals.count("modules.module.SVDTransformLayer") > 0;
    *why = dobi          ? "ALinear/BLinear tensors and dobi_target_modules in config.json"
           : dobi_pickle ? "ALinear/BLinear tensors in modules.module.SVDTransformLayer objects"
                         : "ALinear/BLinear tensors (ASVD naming; shapes decide the sides)";
    return dobi || dobi_pickle ? "dobi" : "asvd";
  }
  if (uv) {
    *why = "tensors named *_u_proj.weight / *.u_proj.weight";
    return "svdllm";
  }
  std::string some;
  int k = 0;
  for (const std::string& n : c.names)
    if (k++ < 4) some += (some.empty() ? "" : ", ") + n;
  fail(
      "{}: no factor tensors of a known family (svdllm, asvd, dobi, basis-sharing, palu); tensors "
      "include {}",
      c.path, some);
}

Names names_of(const WeightSpec& spec, int l) {
  return names_of_module(fmt::format(fmt::runtime(spec.hf), l));
}

Names names_of_module(const std::string& weight) {
  Names n;
  n.hf = weight;
  n.M = n.hf.substr(0, n.hf.size() - 7);
  n.P = n.M.substr(0, n.M.rfind('.'));
  n.x = n.M.substr(n.P.size() + 1, n.M.size() - n.P.size() - 6);
  return n;
}

std::vector<std::pair<std::string, std::string>> factor_names(const std::string& fam,
                                                              const Names& n, int l) {
  const auto& [hf, M, P, x] = n;
  if (fam == "svdllm")
    return {{P + "." + x + "_v_proj.weight", P + "." + x + "_u_proj.weight"},
            {M + ".v_proj.weight", M + ".u_proj.weight"}};
  if (fam == "asvd") return {{M + ".BLinear.weight", M + ".ALinear.weight"}};
  if (fam == "dobi") return {{M + ".ALinear.weight", M + ".BLinear.weight"}};
  if (fam == "palu") return {};
  return {{P + "." + x + "_basis.weight", M + ".weight"},
          {fmt::format("model.{}_basis.{}.weight", x, l), M + ".weight"}};
}

std::optional<FactorPair> find_factor_pair(const Checkpoint& ck, const NamePairs& pairs,
                                           int64_t out, int64_t in, const std::string& what,
                                           std::string* note) {
  for (const auto& [fa, fb] : pairs) {
    auto ta = ck.find(fa), tb = ck.find(fb);
    if (!ta || !tb) continue;
    // Orientation by shape: first = [r, in] and second = [out, r], or the other way round.
    auto [ar, ac] = rc(*ta);
    auto [br, bc] = rc(*tb);
    const bool as_named = ac == uint64_t(in) && br == uint64_t(out) && bc == ar && ar > 0;
    const bool swapped = bc == uint64_t(in) && ar == uint64_t(out) && ac == br && br > 0;
    if (!as_named && !swapped)
      fail("{}: '{}' {} and '{}' {} are not the two factors of a [{}, {}] matrix ({})", ck.path, fa,
           dims(*ta), fb, dims(*tb), out, in, what);
    if (as_named && swapped) *note = "square factors: sides taken from the family's names";
    return as_named ? FactorPair{*ta, *tb} : FactorPair{*tb, *ta};
  }
  return std::nullopt;
}

// An integer of config.json, or a message naming where it was.
int64_t config_int(const std::string& path, const json& v, const std::string& where) {
  if (!v.is_number_integer())
    fail("{}: config.json {}: expected an integer, found {}", path, where, v.dump());
  return v.get<int64_t>();
}

std::string dims(const TensorView& t) {
  std::string s;
  for (size_t i = t.shape.size(); i-- > 0;) s += fmt::format("{}{}", t.shape[i], i ? ", " : "");
  return "[" + s + "]";
}

// rows, cols of a 2-D tensor (GGML shape {cols, rows}); 0, 0 otherwise.
std::pair<uint64_t, uint64_t> rc(const TensorView& t) {
  return t.shape.size() == 2 ? std::pair{t.shape[1], t.shape[0]}
                             : std::pair{uint64_t(0), uint64_t(0)};
}

TensorView f32_view(const std::vector<float>& x, int64_t rows, int64_t cols) {
  return TensorView{DType::F32,
                    {uint64_t(cols), uint64_t(rows)},
                    reinterpret_cast<const uint8_t*>(x.data()),
                    x.size() * 4,
                    nullptr};
}

Matrix read_factor_u(const TensorView& t, const Config& c, Slot slot) {
  const bool qk = slot == Slot::Q || slot == Slot::K;
  return read_matrix(t, DType::F32, qk, c.head_dim, c.rotary_dims());
}

Matrix read_dense(const TensorView& t, const Config& c, Slot slot) {
  const bool qk = slot == Slot::Q || slot == Slot::K;
  return read_matrix(t, DType::F32, qk && !c.rope_neox, c.head_dim, c.rotary_dims());
}

}  // namespace lr::ckpt
