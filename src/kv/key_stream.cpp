#include "kv/key_stream.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/half.h"

namespace lr::kv {

namespace {

constexpr float kF16Max = 65504.f;
constexpr int kMaxHeadDim = 512;  // stack rows of one key

inline void f16_row(const uint16_t* h, float* out, int d) { f16_to_f32_row(h, out, d); }

// An f16 row (the stored basis) dotted with an f32 vector.
inline float dot_f16(const uint16_t* h, const float* b, int n) {
  alignas(32) float row[kMaxHeadDim];
  f16_row(h, row, n);
  float s = 0;
#pragma omp simd reduction(+ : s)
  for (int i = 0; i < n; ++i) s += row[i] * b[i];
  return s;
}

}  // namespace

KeyStream::KeyStream(const KeyCacheConfig& cfg, int head_dim, int64_t capacity,
                     std::shared_ptr<const SvdqBasis> calibrated, std::vector<double> rope_freq)
    : cfg_(cfg), d_(head_dim), cap_(capacity), rope_freq_(std::move(rope_freq)) {
  cfg_.validate(head_dim);
  if (cfg_.svdq.spread && int(rope_freq_.size()) * 2 != head_dim)
    fail("svdq: fitting over every position needs the model's RoPE frequencies ({} given for head_dim {})",
         rope_freq_.size(), head_dim);
  if (head_dim <= 0 || head_dim > kMaxHeadDim)
    fail("key cache: head_dim {} is outside [1, {}]", head_dim, kMaxHeadDim);
  switch (cfg_.type) {
    case KeyType::Kivi2:
      bt_ = cfg_.kivi_group;
      flush_ = cfg_.kivi_window;
      layout_ = BlockLayout(bt_, std::vector<int>(size_t(d_), 2));
      blocks_.assign(size_t(cap_ / bt_) * block_bytes());
      window_.assign(size_t(flush_) * size_t(d_), 0);
      break;
    case KeyType::Svdq:
      bt_ = flush_ = cfg_.svdq.group_size;
      if (cfg_.svdq.basis == BasisSource::Calibrated) {
        if (!calibrated) fail("--svdq-basis calibrated: the model has no calibrated key basis (run lowrank calibrate-kv)");
        if (calibrated->d != d_) fail("calibrated key basis has dimension {}, the model's head_dim is {}", calibrated->d, d_);
        set_basis(std::move(calibrated));
      }
      break;
    default:
      row_ = key_row_format(cfg_.type, d_);
      blocks_.assign(size_t(cap_) * block_bytes());
      break;
  }
}

uint64_t KeyStream::block_bytes() const {
  return latent() ? layout_.bytes() : row_bytes(row_.type, d_);
}

int64_t KeyStream::fit_at() const {
  return std::max<int64_t>({cfg_.svdq.min_fit_tokens, int64_t(cfg_.svdq.rank) + 1, 2});
}

void KeyStream::set_basis(std::shared_ptr<const SvdqBasis> b) {
  basis_ = std::move(b);
  std::vector<int> bits;
  vt_.clear();
  pt_.clear();
  for (const ChannelGroup& g : basis_->groups) {
    if (g.bits == 0) continue;
    for (int c = g.begin; c < g.begin + g.count; ++c) {
      bits.push_back(g.bits);
      for (int i = 0; i < d_; ++i) vt_.push_back(f32_to_f16(basis_->v[size_t(c) * size_t(d_) + size_t(i)]));
      if (!basis_->p.empty())
        for (int i = 0; i < d_; ++i) pt_.push_back(f32_to_f16(basis_->p[size_t(c) * size_t(d_) + size_t(i)]));
    }
  }
  qm_.reset();
  mean_ = basis_->mean;
  layout_ = BlockLayout(bt_, std::move(bits));
  blocks_.assign(size_t(cap_ / bt_) * block_bytes());
  window_.resize(std::max<size_t>(size_t(flush_), size_t(n_window_)) * size_t(d_));
}

void KeyStream::project(const float* k, float* l) const {
  alignas(32) float c[kMaxHeadDim];
  for (int i = 0; i < d_; ++i) c[i] = k[i] - (mean_.empty() ? 0.f : mean_[size_t(i)]);
  const std::vector<uint16_t>& rows = pt_.empty() ? vt_ : pt_;
  for (int ch = 0; ch < layout_.channels(); ++ch) l[ch] = dot_f16(&rows[size_t(ch) * size_t(d_)], c, d_);
}

void KeyStream::window_push(const float* k) {
  if (window_.size() < size_t(n_window_ + 1) * size_t(d_)) window_.resize(size_t(n_window_ + 1) * size_t(d_));
  uint16_t* dst = &window_[size_t(n_window_) * size_t(d_)];
  for (int i = 0; i < d_; ++i) dst[i] = f32_to_f16(k[i]);
  ++n_window_;
}

void KeyStream::window_row(int64_t i, float* out) const {
  f16_row(&window_[size_t(i) * size_t(d_)], out, d_);
}

void KeyStream::fit(const float* k, int64_t n, int64_t stride) {
  // The fit keys are positions [0, n_window_ + n): the window, then k.
  const int64_t total = n_window_ + n;
  std::vector<float> rows(size_t(total) * size_t(d_));
  for (int64_t i = 0; i < n_window_; ++i) window_row(i, &rows[size_t(i) * size_t(d_)]);
  for (int64_t t = 0; t < n; ++t) std::copy_n(k + t * stride, d_, &rows[size_t(n_window_ + t) * size_t(d_)]);
  if (cfg_.svdq.spread)
    for (int64_t p = 0; p < total; ++p) rope_unrotate(&rows[size_t(p) * size_t(d_)], d_, rope_freq_, p);
  KeyMoments m(d_);
  m.add(rows.data(), total, d_);
  const bool query = cfg_.svdq.metric == Metric::Query && qm_ && qm_->n > 0;
  if (cfg_.svdq.spread) {
    m = rope_spread(m, rope_freq_, cap_);
    if (query) *qm_ = rope_spread(*qm_, rope_freq_, cap_);
  }
  if (query) {
    set_basis(std::make_shared<const SvdqBasis>(make_basis(fit_eigen_weighted(m, *qm_), cfg_.svdq)));
  } else {  // the key metric (also the query metric's fallback when no query was seen)
    set_basis(std::make_shared<const SvdqBasis>(fit_basis(m, cfg_.svdq)));
  }
}

bool KeyStream::wants_queries() const {
  return cfg_.type == KeyType::Svdq && cfg_.svdq.metric == Metric::Query && !basis_;
}

void KeyStream::add_queries(const float* q, int64_t n, int64_t stride, int64_t pos0, int per_pos) {
  if (!wants_queries()) return;
  if (!qm_) qm_ = std::make_unique<KeyMoments>(d_);
  if (!cfg_.svdq.spread) return qm_->add(q, n, stride);
  thread_local std::vector<float> rows;  // decode steps before the fit call this too
  rows.resize(size_t(n) * size_t(d_));
  for (int64_t r = 0; r < n; ++r) {
    std::copy_n(q + r * stride, d_, &rows[size_t(r) * size_t(d_)]);
    rope_unrotate(&rows[size_t(r) * size_t(d_)], d_, rope_freq_, pos0 + r / per_pos);
  }
  qm_->add(rows.data(), n, d_);
}

void KeyStream::append(const float* k_in, int64_t n, int64_t stride, bool keep_flushed) {
  flushed_.clear();
  flushed_first_ = compressed();
  fitted_before_ = fitted();
  if (n <= 0) return;
  if (n_ + n > cap_) fail("key cache: {} cached + {} new keys exceed the capacity {}", n_, n, cap_);
  // Keys enter as f16 values, wherever they go next (window, fit, blocks):
  // the result does not depend on how the positions were chunked.
  thread_local std::vector<float> in, rows;  // scratch (capacity kept between calls)
  in.resize(size_t(n) * size_t(d_));
  for (int64_t t = 0; t < n; ++t)
    for (int i = 0; i < d_; ++i) {
      const float x = k_in[t * stride + i];
      if (!std::isfinite(x) || std::fabs(x) > kF16Max)
        fail("key cache: key {} channel {} is {} (the key cache holds finite f16-range values only)",
             n_ + t, i, x);
      in[size_t(t) * size_t(d_) + size_t(i)] = f16_to_f32(f32_to_f16(x));
    }
  const float* k = in.data();
  if (!fitted()) {
    if (n_window_ + n < fit_at()) {
      for (int64_t t = 0; t < n; ++t) window_push(k + t * d_);
      n_ += n;
      return;
    }
    fit(k, n, d_);
  }
  const int64_t total = n_window_ + n;
  if (total < flush_) {
    for (int64_t t = 0; t < n; ++t) window_push(k + t * d_);
    n_ += n;
    return;
  }
  // Window rows, then the new rows: whole windows of blocks are encoded (as
  // appends of one key at a time would leave them), the rest is the new window.
  rows.resize(size_t(total) * size_t(d_));
  for (int64_t i = 0; i < n_window_; ++i) window_row(i, &rows[size_t(i) * size_t(d_)]);
  std::copy(in.begin(), in.end(), rows.begin() + ptrdiff_t(n_window_) * d_);
  const int64_t nb = fitted_before_ ? total / flush_ * (flush_ / bt_) : total / bt_;
  if (keep_flushed) {  // (the rows hold f16 values: exact both ways)
    flushed_.resize(size_t(nb * bt_ * d_));
    for (size_t i = 0; i < flushed_.size(); ++i) flushed_[i] = f32_to_f16(rows[i]);
  }
  encode_blocks(rows.data(), nb);
  n_window_ = 0;
  for (int64_t i = nb * bt_; i < total; ++i) window_push(&rows[size_t(i) * size_t(d_)]);
  if (basis_) window_.resize(size_t(std::max<int64_t>(flush_, n_window_)) * size_t(d_));
  n_ += n;
}

void KeyStream::encode_blocks(const float* rows, int64_t nb) {
  const uint64_t bb = block_bytes();
  LR_ASSERT(uint64_t(n_blocks_ + nb) * bb <= blocks_.size());
  thread_local std::vector<float> L;
  if (latent()) L.resize(size_t(bt_) * size_t(layout_.channels()));
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* dst = &blocks_[size_t(n_blocks_ + b) * bb];
    const float* X = rows + b * bt_ * d_;
    if (!latent()) {
      encode_token(X, dst);
      continue;
    }
    const int C = layout_.channels();
    if (cfg_.type == KeyType::Svdq) {
      for (int t = 0; t < bt_; ++t) project(X + t * d_, &L[size_t(t) * size_t(C)]);
    } else {
      std::copy_n(X, size_t(bt_) * size_t(d_), L.data());
    }
    quantize_block(layout_, L.data(), C, reinterpret_cast<uint16_t*>(dst),
                   reinterpret_cast<uint32_t*>(dst + 4 * C));
  }
  n_blocks_ += nb;
}

void KeyStream::encode_token(const float* k, uint8_t* dst) const {
  encode_row(row_, k, d_, dst);
}

void KeyStream::decode_token(const uint8_t* src, float* out) const {
  decode_row(row_.type, src, d_, out);
}

void KeyStream::truncate(int64_t n) {
  LR_ASSERT(n >= 0 && n <= n_);
  drop_flushed();
  if (n == 0) {
    n_ = n_blocks_ = n_window_ = 0;
    if (cfg_.type == KeyType::Svdq && cfg_.svdq.basis == BasisSource::Sequence) {
      basis_.reset();
      qm_.reset();
      vt_.clear();
      pt_.clear();
      mean_.clear();
      layout_ = BlockLayout();
      blocks_.clear();
      window_.clear();
    }
    return;
  }
  if (n >= compressed()) {
    n_window_ = n - compressed();
  } else {
    // The kept positions of the cut block come back as their reconstruction.
    const int64_t keep_blocks = n / bt_;
    std::vector<float> rows(size_t(n - keep_blocks * bt_) * size_t(d_));
    for (int64_t j = keep_blocks * bt_; j < n; ++j) reconstruct(j, &rows[size_t(j - keep_blocks * bt_) * size_t(d_)]);
    n_blocks_ = keep_blocks;
    n_window_ = 0;
    for (size_t i = 0; i < rows.size() / size_t(d_); ++i) window_push(&rows[i * size_t(d_)]);
  }
  n_ = n;
}

void KeyStream::reconstruct(int64_t j, float* out) const {
  LR_ASSERT(j >= 0 && j < n_);
  if (j >= compressed()) return window_row(j - compressed(), out);
  const uint8_t* blk = &blocks_[size_t(j / bt_) * block_bytes()];
  if (!latent()) return reconstruct_row(row_, blk, d_, out);
  const int C = layout_.channels();
  std::vector<float> L(size_t(bt_) * size_t(C));
  dequantize_block(layout_, reinterpret_cast<const uint16_t*>(blk),
                   reinterpret_cast<const uint32_t*>(blk + 4 * C), L.data(), C);
  const float* l = &L[size_t(j % bt_) * size_t(C)];
  if (cfg_.type == KeyType::Kivi2) {
    std::copy_n(l, d_, out);
    return;
  }
  std::vector<float> row(static_cast<size_t>(d_));
  for (int i = 0; i < d_; ++i) out[i] = mean_[size_t(i)];
  for (int c = 0; c < C; ++c) {
    f16_row(&vt_[size_t(c) * size_t(d_)], row.data(), d_);
    for (int i = 0; i < d_; ++i) out[i] += l[c] * row[size_t(i)];
  }
}

void KeyStream::decode_rows(int64_t j0, int64_t j1, float* out) const {
  LR_ASSERT(j0 >= 0 && j1 <= n_ && (!latent() || j0 >= kept_from()));
  for (int64_t j = j0; j < j1; ++j) {
    float* o = out + (j - j0) * d_;
    if (j >= compressed()) window_row(j - compressed(), o);
    else if (latent()) f16_row(&flushed_[size_t(j - flushed_first_) * size_t(d_)], o, d_);
    else decode_token(&blocks_[size_t(j) * block_bytes()], o);
  }
}

int64_t KeyStream::kept_from() const {
  return flushed_.empty() ? compressed() : flushed_first_;
}

KeyView KeyStream::view_at(int64_t p) const {
  LR_ASSERT(p >= 0 && p < n_);
  if (!latent()) return {this, p + 1};
  if (flushed_.empty()) return view();
  // As appends of one key at a time would have left the blocks at p: whole
  // windows from where the last append began (none before a sequence
  // basis is fitted).
  const int64_t b0 = flushed_first_;
  if (!fitted_before_ || p + 1 < b0) return {this, b0};
  return {this, std::min(compressed(), b0 + (p + 1 - b0) / flush_ * flush_)};
}

void KeyStream::drop_flushed() {
  flushed_.clear();
  flushed_.shrink_to_fit();
}

void KeyStream::latents(int64_t j, float* out) const {
  LR_ASSERT(cfg_.type == KeyType::Svdq && basis_ && j >= 0 && j < compressed());
  const int C = layout_.channels();
  const uint8_t* blk = &blocks_[size_t(j / bt_) * block_bytes()];
  std::vector<float> L(size_t(bt_) * size_t(C));
  dequantize_block(layout_, reinterpret_cast<const uint16_t*>(blk),
                   reinterpret_cast<const uint32_t*>(blk + 4 * C), L.data(), C);
  int at = 0;
  for (const ChannelGroup& g : basis_->groups)
    for (int c = g.begin; c < g.begin + g.count; ++c)
      out[c] = g.bits == 0 ? 0.f : L[size_t(j % bt_) * size_t(C) + size_t(at++)];
}

// --- accounting ---------------------------------------------------------------

KeyBytes KeyStream::bytes_of(uint64_t nb) const {
  KeyBytes b;
  if (latent()) {
    b.codes = nb * uint64_t(layout_.code_words) * 4;
    b.scales = nb * uint64_t(layout_.channels()) * 4;
  } else {
    const bool blocks = row_.type == DType::Q8_0 || row_.type == DType::Q4_0;
    b.scales = blocks ? nb * uint64_t(d_ / 32) * 2 : 0;
    b.codes = nb * block_bytes() - b.scales;
  }
  b.window = window_.size() * sizeof(uint16_t);
  b.basis = (vt_.size() + pt_.size()) * sizeof(uint16_t) + mean_.size() * sizeof(float);
  return b;
}

KeyBytes KeyStream::held() const { return bytes_of(uint64_t(n_blocks_)); }

KeyBytes KeyStream::allocated() const {
  const uint64_t bb = block_bytes();
  return bytes_of(bb ? blocks_.size() / bb : 0);
}

}  // namespace lr::kv
