// Phi-3's fused HuggingFace modules in `lowrank import`: self_attn.qkv_proj
// (q, k and v stacked by rows) and mlp.gate_up_proj (gate, then up). A
// checkpoint of such a model factors the fused matrix: one V [r, in] and one
// U [q + 2 kv, r] (or [2 ffn, r]). lowrank's maps are the parts, so the pair
// is split: each part keeps the shared V and its own rows of U, which is
// exact (rows of U V are rows of U times V). A part whose share of the pair
// is not smaller than its dense matrix (r (out_p + in) >= out_p in, k and v
// at a high rank) is multiplied back to dense, as Dobi-SVD's loader does for
// a rank past the break-even. V is stored once per part that keeps it.
// Palu and Basis Sharing factors of a fused module, and Dobi-SVD's 8-bit
// codes of one, are refused by name (their published code factors LLaMA's
// separate projections).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "compress/compress_model.h"
#include "import/checkpoint.h"

namespace lr::ckpt {

struct FusedPart {
  Slot slot;
  int64_t r0, r1;  // its rows of the fused matrix
};
struct FusedModule {
  Names names;                   // of the fused module (x: "qkv", "gate_up")
  int64_t rows = 0;              // of the fused matrix
  std::vector<FusedPart> parts;  // in the weight table's order
};

// The fused module that holds `slot` of layer l, when the model's HF modules
// fuse it (Phi-3) and the checkpoint has a tensor of that module; nullopt
// otherwise (the parts are then read under their own names).
std::optional<FusedModule> fused_module(const Checkpoint& ck, const Config& c, Slot slot, int l);

// Imports every part of `fm` of layer l into w (factors split by rows, or
// the dense weight's rows), appending one report per part to `out`.
void import_fused(const Checkpoint& ck, const std::string& fam, const FusedModule& fm, int l,
                  Weights& w, std::vector<MatrixReport>& out);

}  // namespace lr::ckpt
