// A compressed checkpoint as lowrank import reads it (a torch or
// safetensors file, or a directory of shards with its config.json), and the
// names and shapes every family's reader shares.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "format/safetensors.h"
#include "format/tensor_source.h"
#include "format/torch_checkpoint.h"
#include "model/weights.h"

namespace lr::ckpt {

using json = nlohmann::json;

// The tensors of a checkpoint: one file or a directory of shards.
struct Checkpoint {
  std::string path;
  std::vector<std::unique_ptr<TensorSource>> parts;
  std::vector<const TorchCheckpoint*> pickles;  // the parts that are torch files
  std::set<std::string> names;
  std::set<std::string> globals;  // classes named in pickles (family hints)
  json config;                    // config.json of a directory; null otherwise

  std::optional<TensorView> find(const std::string& name) const {
    if (!names.count(name)) return std::nullopt;
    for (const auto& p : parts)
      if (auto t = p->find(name)) return t;
    return std::nullopt;
  }
  bool has(const std::string& name) const { return names.count(name) > 0; }
  std::optional<TorchCheckpoint::Raw> find_raw(const std::string& name) const {
    for (const TorchCheckpoint* p : pickles)
      if (auto t = p->find_raw(name)) return t;
    return std::nullopt;
  }
  std::optional<std::string> find_string(const std::string& name) const {
    for (const TorchCheckpoint* p : pickles)
      if (auto s = p->find_string(name)) return s;
    return std::nullopt;
  }

  void add_torch(const std::string& file) {
    auto c = TorchCheckpoint::open(file);
    for (const std::string& n : c->names()) names.insert(n);
    globals.insert(c->globals().begin(), c->globals().end());
    pickles.push_back(c.get());
    parts.push_back(std::move(c));
  }
  void add_safetensors(std::unique_ptr<SafetensorsSource> s) {
    for (const std::string& n : s->names()) names.insert(n);
    parts.push_back(std::move(s));
  }

  // path: a .safetensors or torch file, or a directory of either (with
  // config.json, a shard index, and Dobi-SVD's remapping_weight.pt).
  static Checkpoint open(const std::string& path);
};

// The family the checkpoint's tensor names (and config.json, and the
// classes its pickles name) show: svdllm, asvd, dobi, basis-sharing or palu;
// why: what decided it. lr::Error when none does.
std::string detect(const Checkpoint& c, std::string* why);

// The HuggingFace names of one projection of layer l: its weight
// ("model.layers.3.self_attn.q_proj.weight"), module M (without ".weight"),
// parent P ("model.layers.3.self_attn") and short name x ("q").
struct Names {
  std::string hf, M, P, x;
};
Names names_of(const WeightSpec& spec, int l);
// A module's names from its weight's ("model.layers.3.self_attn.qkv_proj.weight").
Names names_of_module(const std::string& weight);

// Names of the two factors of module n, (first, second), in each naming the
// family uses (empty: the family has its own reader, Palu).
std::vector<std::pair<std::string, std::string>> factor_names(const std::string& fam,
                                                              const Names& n, int l);

// The first pair of `pairs` the checkpoint holds, as the two factors of an
// [out, in] matrix told apart by shape: V [r, in] (applied first) and U
// [out, r]. nullopt: the checkpoint holds none; shapes that are not such a
// pair: an error naming both tensors and `what`. A square pair takes its
// sides from the names, and says so in *note.
struct FactorPair {
  TensorView v, u;
};
using NamePairs = std::vector<std::pair<std::string, std::string>>;
std::optional<FactorPair> find_factor_pair(const Checkpoint& ck, const NamePairs& pairs,
                                           int64_t out, int64_t in, const std::string& what,
                                           std::string* note);

// An integer of config.json, or a message naming where it was.
int64_t config_int(const std::string& path, const json& v, const std::string& where);

// "[rows, cols]" of a tensor, outermost first.
std::string dims(const TensorView& t);

// rows, cols of a 2-D tensor (GGML shape {cols, rows}); 0, 0 otherwise.
std::pair<uint64_t, uint64_t> rc(const TensorView& t);

// A row-major f32 [rows, cols] buffer as a tensor view (for read_matrix).
TensorView f32_view(const std::vector<float>& x, int64_t rows, int64_t cols);

// A map of `slot` from the checkpoint (HuggingFace row order) as the
// importer's f32 weights. A factor U: q/k rows into the runtime's interleaved
// RoPE order (the loader reads factors as stored). A dense W: the same,
// except for a NEOX-RoPE architecture (Qwen3, Gemma 3, Phi-3, OLMo 2), whose
// GGUF keeps HuggingFace's order: save_gguf writes a dense W's rows as they
// are and the loader reorders them.
Matrix read_factor_u(const TensorView& t, const Config& c, Slot slot);
Matrix read_dense(const TensorView& t, const Config& c, Slot slot);

}  // namespace lr::ckpt
