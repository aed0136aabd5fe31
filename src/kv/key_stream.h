// The keys of one KV head of one layer of one sequence, stored in one of the
// compressed key types (key_config.h): the codec (encode on append, decode,
// reconstruct) in portable code. Queries are scored against the stored form
// by the CPU's kernels (backend/cpu/key_kernels.h); reconstruct() and
// attend_keys_reference (kv/attend_keys.h) are their scalar twins.
//
// Positions [0, compressed()) live in blocks of block_tokens() tokens; the
// newer positions [compressed(), size()) are a small f16 window that is
// quantized in whole blocks once it holds flush_tokens() tokens (SVDq: one
// block of group_size; KIVI: kivi_window). The per-token types (f32, f16,
// q8_0, q4_0, rotated or not: kv/row_codec.h) encode each token at once
// (blocks of one token, no window).
//
// SVDq with a sequence basis keeps its first keys exact (f16, in the window)
// until min_fit_tokens of them are cached, fits the basis on them (a prefill
// arrives in one append, so the basis is the prompt's), then compresses. A
// calibrated basis is there from the start.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/zero_pages.h"
#include "kv/cache_stats.h"
#include "kv/key_config.h"
#include "kv/svdq.h"

namespace lr::kv {

class KeyStream;

// The keys of a stream as attention at one position reads them: positions
// below `blocks` from the stored blocks, the rest decoded as f16 rows
// (KeyStream::decode_rows).
struct KeyView {
  const KeyStream* ks = nullptr;
  int64_t blocks = 0;
};

class KeyStream {
 public:
  // `calibrated`: the basis to use when cfg.svdq.basis is Calibrated (else null).
  // rope_freq: the model's RoPE (svdq.h rope_unrotate), needed by svdq.spread.
  KeyStream(const KeyCacheConfig& cfg, int head_dim, int64_t capacity,
            std::shared_ptr<const SvdqBasis> calibrated = nullptr,
            std::vector<double> rope_freq = {});

  // Appends the post-RoPE keys of the next n positions (rows of k, `stride`
  // floats apart). Throws lr::Error for a non-finite key or one outside the
  // f16 range, or when the capacity would overflow. The window is encoded
  // in whole windows (flush_tokens()), so the blocks after any cut of the
  // positions into appends are those of appends of one key at a time (once
  // the basis is there). keep_flushed: the f16 rows this append encodes into
  // blocks stay readable (decode_rows, view_at) until the next append or
  // drop_flushed().
  void append(const float* k, int64_t n, int64_t stride, bool keep_flushed = false);
  void drop_flushed();
  // Query metric, before the fit: queries [n, d] (the query heads of this
  // stream's group) whose second moment weights the basis.
  bool wants_queries() const;
  // Row r is a query at position pos0 + r / per_pos.
  void add_queries(const float* q, int64_t n, int64_t stride, int64_t pos0 = 0, int per_pos = 1);

  // Forgets positions >= n. Inside a compressed block the kept positions of
  // that block return to the window as their reconstruction; n = 0 also
  // forgets a sequence basis.
  void truncate(int64_t n);
  // After truncate(0): the blocks' pages given back.
  void release() { blocks_.release_from(0); }

  int64_t size() const { return n_; }
  int64_t compressed() const { return n_blocks_ * bt_; }
  int block_tokens() const { return bt_; }
  int flush_tokens() const { return flush_; }
  int head_dim() const { return d_; }
  KeyType type() const { return cfg_.type; }
  // A per-token type's Hadamard block (kv/row_codec.h): its stored rows
  // (decode_rows) are rotated, and a query is rotated to score them; 0: none.
  int rotation() const { return row_.rot; }
  // SVDq: the basis in use (null before the fit); other types: null.
  const SvdqBasis* basis() const { return basis_.get(); }
  // Latent channels stored per token (SVDq: channels of non-zero width; KIVI: d).
  int channels() const { return layout_.channels(); }

  // Reference: key j as the cache holds it (decoded), out [d].
  void reconstruct(int64_t j, float* out) const;
  // SVDq, j < compressed(): the dequantized latents of key j, out [basis()->rank];
  // channels of 0-bit groups are exactly 0.
  void latents(int64_t j, float* out) const;

  // Keys [j1 - j0, d] of positions that are not in latent blocks (f32, f16,
  // q8_0, q4_0 tokens, window positions of every type, rows the last append
  // kept from kept_from() on), decoded, as stored (rotated: rotation()).
  void decode_rows(int64_t j0, int64_t j1, float* out) const;
  int64_t kept_from() const;
  // Every position as its stored form now.
  KeyView view() const { return {this, compressed()}; }
  // Position p (one the last append brought) as a decode step at p sees it:
  // the blocks appends of one key at a time would have made by then, the
  // later positions as f16 rows. The same as view() unless the last append
  // kept its flushed rows.
  KeyView view_at(int64_t p) const;

  // The stored form, read-only, for the scoring kernels (backend/cpu/key_kernels.h).
  // Blocks of block_tokens() positions each: latent types hold f16 scales
  // [channels], f16 mins [channels], then the codes (layout()); the others one
  // token encoded (f16, q8_0 or q4_0 blocks of 32 along head_dim).
  bool latent() const { return cfg_.type == KeyType::Kivi2 || cfg_.type == KeyType::Svdq; }
  const BlockLayout& layout() const { return layout_; }
  const uint8_t* block(int64_t b) const { return &blocks_[size_t(b) * block_bytes()]; }
  // A per-token type's rows, position j at rows().row(j) (stored: rotated
  // where rotation() is).
  Rows rows() const { return {blocks_.data(), row_, block_bytes()}; }
  // Window position i (that is, position compressed() + i), f16 [d].
  const uint16_t* window_f16(int64_t i) const { return &window_[size_t(i) * size_t(d_)]; }
  // SVDq: the f16 reconstruction rows [channels, d] of the stored channels and
  // the mean [d] (empty before the fit and for the other types).
  const std::vector<uint16_t>& basis_rows() const { return vt_; }
  const std::vector<float>& mean() const { return mean_; }

  // Bytes held now; allocated() counts the block storage for the whole
  // capacity (what the session reserves), held() for the blocks written.
  KeyBytes held() const;
  KeyBytes allocated() const;
  // Bytes in RAM: the window and basis, and the blocks' pages written so far.
  uint64_t resident_bytes() const {
    const KeyBytes a = allocated();
    return a.window + a.basis + blocks_.resident_bytes();
  }

 private:
  bool fitted() const { return !latent() || cfg_.type == KeyType::Kivi2 || basis_ != nullptr; }
  void set_basis(std::shared_ptr<const SvdqBasis> b);
  int64_t fit_at() const;
  void fit(const float* k, int64_t n, int64_t stride);
  void encode_blocks(const float* rows, int64_t n_blocks);  // rows [n_blocks * bt, d]
  void encode_token(const float* k, uint8_t* dst) const;    // per-token types (row_)
  void decode_token(const uint8_t* src, float* out) const;
  void project(const float* k, float* l) const;  // l [channels] of key k
  void window_push(const float* k);
  void window_row(int64_t i, float* out) const;
  uint64_t block_bytes() const;
  KeyBytes bytes_of(uint64_t n_blocks) const;

  KeyCacheConfig cfg_;
  int d_;
  int64_t cap_;
  int bt_ = 1, flush_ = 1;
  BlockLayout layout_;                     // latent types
  RowFormat row_;                          // the other types: one position's row
  std::shared_ptr<const SvdqBasis> basis_; // SVDq
  std::vector<uint16_t> vt_;               // SVDq [channels, d] f16 reconstruction rows of stored channels
  std::vector<uint16_t> pt_;               // SVDq query metric: [channels, d] f16 projection rows
  std::unique_ptr<KeyMoments> qm_;         // query metric: queries seen before the fit
  std::vector<double> rope_freq_;          // spread: RoPE angle per position of each pair
  std::vector<float> mean_;                // SVDq [d]
  ZeroPages<uint8_t> blocks_;              // [capacity / bt, block_bytes()] (RAM as written)
  std::vector<uint16_t> window_;           // [window capacity, d] f16
  std::vector<uint16_t> flushed_;          // [rows, d] f16: the last append's encoded rows (kept)
  int64_t flushed_first_ = 0;              // their first position
  bool fitted_before_ = true;              // whether the basis was there before the last append
  int64_t n_ = 0, n_blocks_ = 0, n_window_ = 0;
};

}  // namespace lr::kv
