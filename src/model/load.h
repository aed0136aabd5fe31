// Loading a model: GGUF file or HuggingFace directory -> Config + Weights.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "core/dtype.h"
#include "format/tensor_source.h"
#include "model/weights.h"

namespace lr {

enum class Naming { Gguf, HuggingFace };

// Fills every entry of the weight table from `src`, checking each tensor's
// shape against the config. Matrices are converted to `wtype` (F32, F16, BF16
// or Q8_0), or with nullopt kept as stored (block formats used in place,
// Q8_0 in the runtime's layout); norms and biases are always F32.
// HuggingFace and NEOX-RoPE q/k rows are permuted into GGUF's interleaved
// RoPE order. A linear map's bias is the tensor named like its weight with
// ".bias" for ".weight", when the source has one.
std::shared_ptr<Weights> load_weights(const Config& cfg, const TensorSource& src, Naming naming,
                                      std::optional<DType> wtype);

// The HuggingFace name of a table entry in a model of config c (the table's
// `hf`, but Gemma 3's FFN norm: pre_feedforward_layernorm). Phi-3's fused
// qkv_proj and gate_up_proj are found under the parts' names by SplitFused
// (model/fused_tensors.h).
std::string hf_tensor_name(const WeightSpec& spec, const Config& c, int layer);
// Whether the model's HuggingFace norm weights are stored as w for a scale
// of (1 + w) (Gemma 3): the loader adds 1, as llama.cpp's converter does.
bool hf_norm_offset(const Config& c);

// HuggingFace stores q/k rows per head as [two halves][head_dim/2] (rotate-half
// RoPE); GGUF interleaves them. The HF row that GGUF row r comes from. With
// partial RoPE only the first rot_dims of a head are so arranged (0: all).
int64_t hf_row_for_gguf_row(int64_t r, int head_dim, int rot_dims = 0);

// A 2-D tensor (GGML shape {cols, rows}) as a matrix of type `wtype`; with
// permute_rope, rows are reordered from HuggingFace's rotate-half q/k layout
// into GGUF's interleaved one.
Matrix read_matrix(const TensorView& t, std::optional<DType> wtype, bool permute_rope, int head_dim,
                   int rot_dims = 0);
// "blk.0.attn_q.weight" -> "blk.0.attn_q.bias".
std::string bias_name(const std::string& weight_name);

// GGUF names of low-rank tensors (docs/lowrank-gguf.md): blk.N.<kind>.lr_in
// [rank, in], blk.N.<kind>.lr_out [out, rank]; a shared input basis is
// shared.G.<kind>.lr_in, and metadata lowrank.shared.<kind> (one int per layer,
// -1 = private) says which group each layer uses.
std::string lowrank_in_name(const WeightSpec& spec, int layer);
std::string lowrank_out_name(const WeightSpec& spec, int layer);
std::string shared_basis_name(const WeightSpec& spec, int group);
std::string shared_map_key(const WeightSpec& spec);
// Pivoted factors (model/weights.h Pivots): metadata lowrank.pivots.blk.N.<kind>,
// the output row of each row of lr_in; lr_out then holds the other rows.
std::string pivots_key(const WeightSpec& spec, int layer);

// Where scripts/fetch-model.sh caches models: ${XDG_CACHE_HOME:-~/.cache}/lowrank/models.
std::string model_cache_dir();
// Where the default model lives: $LOWRANK_MODEL if set, else
// ${XDG_CACHE_HOME:-~/.cache}/lowrank/models/SmolLM2-135M-Instruct.Q4_1.gguf.
std::string default_model_path();

}  // namespace lr
