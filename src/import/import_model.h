// `lowrank import`: checkpoints of published SVD-compression methods turned
// into lowrank's low-rank GGUF. Every family's factor pair is read into the
// one representation (V [rank, in] applied first, U [out, rank]); which
// tensor is which is decided by shape against the base model's config, never
// by name alone.
//
// Families read now (names below are per projection module M, e.g.
// model.layers.3.self_attn.q_proj, and its parent P):
//   svdllm        SVD-LLM v1 whole-model pickle: P.q_v_proj.weight / P.q_u_proj.weight;
//                 HF-style export (v1/v2): M.v_proj.weight / M.u_proj.weight
//   asvd, dobi    M.BLinear.weight / M.ALinear.weight (the two families name the
//                 sides oppositely; shapes decide), dense M.weight elsewhere;
//                 dobi also reads remapping_weight.pt (8-bit codes M.us_quan /
//                 M.vt_quan with f16 scales, format/dobi_remap.h), dequantized
//   basis-sharing M's basis model.layers.N.<attn|mlp>.x_basis.weight (shared by a
//                 group of layers; checked identical), coefficients M.weight
//   palu          k/v only: M.VT.weight [sum r_g, in] and M.U.<g>.weight
//                 [group rows, r_g] per head group (block-diagonal U, stored
//                 dense with its zeros); config.json head_wise_ranks checked
// Architectures: the base GGUF's (llama, qwen3, gemma3, smollm3, granite,
// phi3, olmo2). Non-linear tensors come from the checkpoint under the
// model's HF names (Gemma 3's norms, stored as w for a scale of 1 + w, get
// the 1), else from --base; Phi-3's fused qkv_proj / gate_up_proj pairs are
// split by rows (import/fused.h).
#pragma once

#include <string>
#include <vector>

#include "core/dtype.h"
#include "compress/compress_model.h"

namespace lr {

struct ImportOptions {
  std::string from = "auto";  // svdllm, asvd, dobi, basis-sharing, palu or auto
  std::string base;           // dense GGUF model: config, tokenizer, and the weights the checkpoint omits
  DType factor_type = DType::F16;
};

struct ImportReport {
  std::string family;                 // what was read
  std::string detected_by;            // why (auto)
  std::vector<MatrixReport> matrices; // per layer and projection (rank 0: dense)
  std::vector<std::string> from_base; // non-linear tensors taken from --base
  uint64_t params_before = 0, params_after = 0;
};

// Reads the checkpoint at `in` (a .pt/.bin/.safetensors file or a directory of
// shards) and writes `out`. Throws lr::Error naming the tensor on any
// mismatch.
ImportReport import_checkpoint(const std::string& in, const std::string& out, const ImportOptions& opt);

}  // namespace lr
