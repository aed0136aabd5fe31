// The model's weights and the one weight table that drives loading, shape
// validation and memory estimates. Weights are read-only after loading and are
// shared by every session (sessions own their KV cache and scratch).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "model/config.h"

namespace lr {

// A row-major [rows, cols] matrix in one of the runtime's weight types: F32,
// F16, BF16, Q8_0 or a GGUF block format (core/dtype.h is_block_format).
// Storage is 64-byte aligned and shared (tied embeddings share it), or a
// view of the model file's mapping (a block-format matrix used as stored).
//
// Q8_0 in memory: int8 values [rows, cols] in `data` and one f16 scale per
// block of 32 values along each row in `scales` [rows, q8_blocks(cols)]
// (value = scale * q; the last block of a row may be shorter): GGUF's 34
// bytes per 32 values. Unlike GGUF's interleaved Q8_0 the scales are
// separate, so a row need not be a multiple of 32 (low-rank factors U [out,
// rank] have any rank).
// A block format keeps GGUF's layout: each row is cols / block_elems blocks.
inline int64_t q8_blocks(int64_t cols) { return (cols + 31) / 32; }
// One row of GGUF's Q8_0 blocks (an f16 scale, then 32 int8 values; cols a
// multiple of 32) to the in-memory layout (values q, scales apart) and back:
// exact both ways.
void q8_0_row_from_blocks(const uint8_t* blocks, int64_t cols, int8_t* q, uint16_t* scales);
void q8_0_row_to_blocks(const int8_t* q, const uint16_t* scales, int64_t cols, uint8_t* blocks);

struct Matrix {
  DType dtype = DType::F32;
  int64_t rows = 0;
  int64_t cols = 0;
  std::shared_ptr<uint8_t[]> data;
  std::shared_ptr<uint16_t[]> scales;  // Q8_0 only: f16 bit patterns
  // (A backend's prepared forms of a matrix, the CPU's panels or the GPU's
  // device copy, belong to that backend, which finds them by the matrix's
  // address: backend/cpu/exec/cpu_weights.h, backend/cuda/device_weights.h.)

  static Matrix allocate(DType dtype, int64_t rows, int64_t cols);
  // A block-format matrix over `bytes` (rows * row_bytes() of them), which
  // `owner` keeps alive (the file mapping): no copy.
  static Matrix view(DType dtype, int64_t rows, int64_t cols, std::shared_ptr<const void> owner,
                     const uint8_t* bytes);
  const float* f32() const;       // asserts dtype == F32
  const uint16_t* half() const;   // F16 or BF16 bit patterns (asserts a 16-bit dtype)
  const int8_t* q8() const;       // Q8_0 values (asserts Q8_0)
  float* f32_mut();
  uint16_t* half_mut();
  uint64_t bytes() const;       // values and scales
  uint64_t data_bytes() const;  // values only (the `data` buffer)
  // Row r decoded to f32 (any weight type).
  void row_to_f32(int64_t r, float* out) const;
  // Rows [r0, r0 + n) as a matrix sharing this one's storage (no copy).
  Matrix rows_view(int64_t r0, int64_t n) const;
  const uint8_t* ptr() const { return data.get(); }
  // Bytes of one row of `data` (a block format: its blocks).
  uint64_t row_bytes() const;
  // Row r of x as this matrix's type (the inverse of row_to_f32, rounding).
  void set_row(int64_t r, const float* x);
};

// Pivoted storage of rank-r factors (PIFA, arXiv 2501.19090): V holds r of
// the map's output rows exactly, U the other out - r rows as combinations of
// them, so y = U V x becomes t = V x; y[rows[k]] = t[k]; every other row
// y[i] = U[source[i]] . t. r (out + in - r) values instead of r (out + in).
struct Pivots {
  std::vector<int32_t> rows;    // [r] the output row latent k is (ascending or not)
  std::vector<int32_t> source;  // [out] >= 0: the row of U; < 0: latent -1 - source[i]
  std::vector<int32_t> before;  // [out + 1] rows of U that come before output row i

  // The map of pivot rows `rows` in an output of `out` rows; U's rows are the
  // others in ascending order. Bad input (a row out of range, a repeat) is an
  // error naming `what`.
  static Pivots make(std::vector<int32_t> rows, int64_t out, const std::string& what);
  int64_t out() const { return int64_t(source.size()); }
};

// A linear map y = W x, W [out, in], stored either dense or as low-rank
// factors W ~ U V with V [rank, in] applied first and U [out, rank] (or,
// pivoted, U [out - rank, rank]: see Pivots), or in the residual form
// W ~ Q(W) + U V: a quantized W plus a low-rank correction of its error (both
// present). Ranks may differ per matrix; V may be the same object in several
// layers (a shared input-side basis), loaded and counted once.
struct Linear {
  Matrix w;  // dense [out, in]; empty when low-rank (not residual)
  Matrix v;  // low-rank input factor [rank, in]
  Matrix u;  // low-rank output factor [out, rank]; pivoted: [out - rank, rank]
  Matrix b;  // bias [1, out] f32 (y = W x + b), empty when none; dense either way
  std::shared_ptr<const Pivots> pivots;  // pivoted storage of the factors, else null

  bool low_rank() const { return v.rows > 0; }        // has factors (pure or residual)
  bool residual() const { return v.rows > 0 && w.rows > 0; }
  bool pivoted() const { return pivots != nullptr; }
  int64_t rank() const { return v.rows; }
  int64_t out_dim() const { return low_rank() ? (pivots ? pivots->out() : u.rows) : w.rows; }
  int64_t in_dim() const { return low_rank() ? v.cols : w.cols; }
};

struct Layer {
  // Packed projections (see model/pack.h): the input-side matrices of q, k, v
  // (V factors, or W when dense) stacked into one allocation, of which q, k
  // and v hold row views; the same for gate and up. Empty when not packed.
  Matrix qkv_in;      // [rq+rk+rv, dim] or [q_dim+2*kv_dim, dim]
  Matrix gate_up_in;  // [rgate+rup, dim] or [2*ffn_dim, dim]

  Matrix attn_norm;  // [1, dim] f32
  Matrix q_norm;     // [1, head_dim] f32, each q head's RMSNorm (cfg.qk_norm; [1, q_dim] with
                     // cfg.qk_norm_full: q's), else empty
  Matrix k_norm;     // [1, head_dim] f32, each k head's
  Matrix
      attn_post_norm;  // [1, dim] f32, the attention output's RMSNorm (cfg.post_norms), else empty
  Matrix ffn_post_norm;  // [1, dim] f32, the FFN output's
  Linear q;          // [n_heads*head_dim, dim]
  Linear k;          // [n_kv_heads*head_dim, dim]
  Linear v;          // [n_kv_heads*head_dim, dim]
  Linear o;          // [dim, n_heads*head_dim]
  Matrix ffn_norm;   // [1, dim] f32
  Linear gate;       // [ffn_dim, dim]
  Linear up;         // [ffn_dim, dim]
  Linear down;       // [dim, ffn_dim]
};

struct Weights {
  Config cfg;
  DType wtype = DType::F32;  // type of every matrix except the norms and biases (always F32): F32, F16,
                             // BF16 or Q8_0; unless as_stored
  bool as_stored = false;    // every matrix kept in the type it is stored in (--wtype auto)
  Matrix tok_embd;           // [vocab, dim]
  Matrix out_norm;           // [1, dim] f32
  Linear output;             // [vocab, dim]; output.w shares tok_embd's storage when cfg.tied_output
  std::vector<Layer> layers;
  // Optional: key bases fitted offline per (layer, KV head) by `lowrank
  // calibrate-kv` (kv/svdq.h KeyEigen), for --svdq-basis calibrated.
  struct KeyCalibration {
    int64_t n_keys = 0;         // keys each fit saw
    std::vector<float> mean;    // [n_layers, n_kv_heads, head_dim]
    std::vector<float> vectors; // [n_layers, n_kv_heads, head_dim, head_dim] row c = direction c
    std::vector<float> sigma;   // [n_layers, n_kv_heads, head_dim] descending
    // The query-aware fit (kv/svdq.h fit_eigen_weighted), when the queries
    // were observed: reconstruction rows, projection rows, spectrum.
    std::vector<float> q_vectors, q_proj, q_sigma;
    bool empty() const { return mean.empty(); }
  } key_calibration;

  // Bytes of all distinct allocations (shared bases and tied embeddings once).
  uint64_t bytes() const;
  // Parameters of all distinct matrices (shared bases and tied embeddings once).
  uint64_t parameters() const;
  // Weight bytes one decode token reads: every layer's matrices and norms (a
  // shared basis once per layer that uses it), the output head, and one row
  // of the embedding.
  uint64_t bytes_per_token() const;
};

// --- the weight table -------------------------------------------------------

enum class Slot {
  TokEmbd,
  OutNorm,
  Output,
  AttnNorm,
  QNorm,
  KNorm,
  Q,
  K,
  V,
  O,
  AttnPostNorm,
  FfnNorm,
  Gate,
  Up,
  Down,
  FfnPostNorm
};

// Which models have a tensor: every one, or those whose config asks for it.
enum class Needs : uint8_t { Always, QkNorm, PostNorms, PreNorms };

struct WeightSpec {
  Slot slot;
  bool per_layer;
  bool is_norm;     // 1-D, kept in f32
  const char* gguf; // GGUF tensor name; "{}" is the layer index
  const char* hf;   // HuggingFace safetensors name
  const char* kind; // short name of the matrix type ("attn_q", ...), used by low-rank names
  Needs needs = Needs::Always;

  // A linear map (Q..Down, Output), which may be stored low-rank.
  bool is_linear() const { return !is_norm && slot != Slot::TokEmbd; }
  // Whether a model of config c has this tensor.
  bool present(const Config& c) const {
    return needs == Needs::Always || (needs == Needs::QkNorm && c.qk_norm) ||
           (needs == Needs::PostNorms && c.post_norms) || (needs == Needs::PreNorms && c.pre_norms);
  }
};

inline constexpr WeightSpec kWeightTable[] = {
    {Slot::TokEmbd, false, false, "token_embd.weight", "model.embed_tokens.weight", "token_embd"},
    {Slot::OutNorm, false, true, "output_norm.weight", "model.norm.weight", "output_norm"},
    {Slot::Output, false, false, "output.weight", "lm_head.weight", "output"},
    {Slot::AttnNorm, true, true, "blk.{}.attn_norm.weight",
     "model.layers.{}.input_layernorm.weight", "attn_norm", Needs::PreNorms},
    {Slot::QNorm, true, true, "blk.{}.attn_q_norm.weight",
     "model.layers.{}.self_attn.q_norm.weight", "attn_q_norm", Needs::QkNorm},
    {Slot::KNorm, true, true, "blk.{}.attn_k_norm.weight",
     "model.layers.{}.self_attn.k_norm.weight", "attn_k_norm", Needs::QkNorm},
    {Slot::Q, true, false, "blk.{}.attn_q.weight", "model.layers.{}.self_attn.q_proj.weight",
     "attn_q"},
    {Slot::K, true, false, "blk.{}.attn_k.weight", "model.layers.{}.self_attn.k_proj.weight",
     "attn_k"},
    {Slot::V, true, false, "blk.{}.attn_v.weight", "model.layers.{}.self_attn.v_proj.weight",
     "attn_v"},
    {Slot::O, true, false, "blk.{}.attn_output.weight", "model.layers.{}.self_attn.o_proj.weight",
     "attn_output"},
    // Gemma 3's (its HuggingFace names; lowrank imports no Gemma checkpoint)
    {Slot::AttnPostNorm, true, true, "blk.{}.post_attention_norm.weight",
     "model.layers.{}.post_attention_layernorm.weight", "post_attention_norm", Needs::PostNorms},
    {Slot::FfnNorm, true, true, "blk.{}.ffn_norm.weight",
     "model.layers.{}.post_attention_layernorm.weight", "ffn_norm", Needs::PreNorms},
    {Slot::Gate, true, false, "blk.{}.ffn_gate.weight", "model.layers.{}.mlp.gate_proj.weight",
     "ffn_gate"},
    {Slot::Up, true, false, "blk.{}.ffn_up.weight", "model.layers.{}.mlp.up_proj.weight", "ffn_up"},
    {Slot::Down, true, false, "blk.{}.ffn_down.weight", "model.layers.{}.mlp.down_proj.weight",
     "ffn_down"},
    {Slot::FfnPostNorm, true, true, "blk.{}.post_ffw_norm.weight",
     "model.layers.{}.post_feedforward_layernorm.weight", "post_ffw_norm", Needs::PostNorms},
};

// Expected [rows, cols] of a slot (norms: [1, dim]; q/k norms [1, head_dim]).
std::pair<int64_t, int64_t> slot_shape(const Config& c, Slot s);
// The matrix a table entry fills: the embedding, a norm, or a linear map's
// dense W (empty when that map is low-rank).
Matrix& slot_matrix(Weights& w, Slot s, int layer);
const Matrix& slot_matrix(const Weights& w, Slot s, int layer);
// The linear map a linear table entry fills (Q..Down, Output).
Linear& slot_linear(Weights& w, Slot s, int layer);
const Linear& slot_linear(const Weights& w, Slot s, int layer);
// The table entry of a slot.
const WeightSpec& weight_spec(Slot s);
// The entry of a per-layer linear map by its kind ("attn_q", ...); an unknown
// kind is an error listing the seven.
const WeightSpec& block_linear_spec(const std::string& kind);
// Parameter count of the dense model (tied output counted once).
uint64_t parameter_count(const Config& c);

// --- visiting the table ---------------------------------------------------------
// The loader, saver, importers, compressor, synth, inspect and the CUDA
// weight layout walk the model through these rather than naming its maps.

// f(spec, layer) for every tensor a model of config c has: the model-wide
// ones (layer 0), then layer by layer the block's, each in table order.
template <class F>
void for_each_tensor(const Config& c, F&& f) {
  for (const WeightSpec& spec : kWeightTable)
    if (!spec.per_layer && spec.present(c)) f(spec, 0);
  for (int l = 0; l < c.n_layers; ++l)
    for (const WeightSpec& spec : kWeightTable)
      if (spec.per_layer && spec.present(c)) f(spec, l);
}
// f(spec, layer, linear) for every linear map (Weights or const Weights).
template <class W, class F>
void for_each_linear(W& w, F&& f) {
  for_each_tensor(w.cfg, [&](const WeightSpec& spec, int l) {
    if (spec.is_linear()) f(spec, l, slot_linear(w, spec.slot, l));
  });
}
// f(spec, matrix) for every matrix of `w` (embedding, norms, dense W and
// factors; not the biases, see for_each_linear), each distinct allocation
// once: a shared basis, a tied embedding.
void for_each_matrix(const Weights& w, const std::function<void(const WeightSpec&, const Matrix&)>& f);

// --- memory -----------------------------------------------------------------------
// A matrix by its shape: what memory estimates are made of.
struct MatrixShape {
  int64_t rows = 0, cols = 0;
  bool norm = false;  // kept in f32
};
// The distinct matrices of `w`; those of a dense model of config `c`.
std::vector<MatrixShape> matrix_shapes(const Weights& w);
std::vector<MatrixShape> matrix_shapes(const Config& c);
// Bytes of a [rows, cols] matrix of type t with rows padded to row_pad elements (Q8_0: with its scales).
uint64_t matrix_bytes(DType t, int64_t rows, int64_t cols, int64_t row_pad = 1);
// Bytes the matrices take with every one but the norms stored as `wtype`,
// rows padded to row_pad elements: the one estimate behind inspect, bench and
// the CUDA memory plan.
uint64_t estimate_bytes(const std::vector<MatrixShape>& shapes, DType wtype, int64_t row_pad = 1);

}  // namespace lr
