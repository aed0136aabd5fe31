#include "backend/cpu/exec/seq_cache.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <new>
#include <optional>
#include <type_traits>
#include <vector>

#include "backend/cpu/exec/split.h"
#include "backend/cpu/kernels/attention_kernels.h"
#include "backend/cpu/kernels/key_kernels.h"
#include "core/error.h"
#include "kv/stream_cache.h"
#include "model/scalar_ops.h"

namespace lr::cpu {

namespace {

// Positions [0, n) cut into `chunks` parts: part `chunk`.
Span part_of(int64_t n, int chunk, int chunks) {
  return {n * chunk / chunks, n * (chunk + 1) / chunks};
}

}  // namespace

void SeqCache::attend_rows(int l, int h, int p0, int n, const float* q, int64_t q_stride, int g,
                           float scale, const RowPartials& out) const {
  for (int t = 0; t < n; ++t)
    attend(l, h, 0, p0 + t, q + t * q_stride, g, 0, 1, scale, out.m + t * out.stride,
           out.sum + t * out.stride, out.acc + t * out.acc_stride);
}

namespace {

// E: float (f32 keys and values) or uint16_t (f16: the default cache, and the
// rings beside a typed cache, kv::KeyCacheConfig::ring_elem_bytes). A prompt's
// rows and decode rows read the same stored rows (f16: rounded as put).
template <typename E>
class DenseSeq final : public SeqCache {
 public:
  explicit DenseSeq(kv::DenseLayout layout, bool shared_file = false)
      : hd_(layout.head_dim), c_(std::move(layout), shared_file) {}

  void append(int l, int h, int pos, const float* k, const float* v, int n, int64_t stride,
              const float*, int64_t, int) override {
    c_.append(l, h, pos, k, v, n, stride);
    for (int t = tokens_.load(std::memory_order_relaxed);
         t < pos + n;)  // (appends run in parallel)
      if (tokens_.compare_exchange_weak(t, pos + n, std::memory_order_relaxed)) break;
  }
  void attend(int l, int h, int from, int p, const float* q, int g, int chunk, int chunks,
              float scale, float* m, float* sum, float* acc) const override {
    const Span r = part_of(p + 1 - from, chunk, chunks);
    const int a = int(from + r.begin);  // the part's positions follow one another from a on
    attend_partial(q, g, hd_, c_.key(l, h, a), c_.value(l, h, a), hd_, 0, r.end - r.begin, scale, m,
                   sum, acc);
  }
  void attend_rows(int l, int h, int p0, int n, const float* q, int64_t q_stride, int g,
                   float scale, const RowPartials& out) const override {
    LR_ASSERT(out.acc_stride == out.stride * hd_ && c_.layout().ring[size_t(l)] == 0);
    attend_causal(q, q_stride, n, p0 + 1, g, hd_, c_.key(l, h, 0), c_.value(l, h, 0), hd_, scale,
                  out.m, out.sum, out.acc, out.stride);
  }
  void truncate(int n) override { tokens_ = std::min(tokens_.load(), n); }
  void release() override { c_.release(); }
  int rewindable(int n_past, int n) const override { return c_.rewindable(n_past, n); }
  bool copy_prefix(const SeqCache& from, int n, int held) override {
    const auto* o = dynamic_cast<const DenseSeq*>(&from);
    if (!o) return false;
    tokens_ = n;
    c_.copy_prefix(o->c_, n, held);
    return true;
  }
  std::unique_ptr<SeqCache> store_prefix(int n) override {
    std::unique_ptr<DenseSeq> s;
    try {
      s = std::make_unique<DenseSeq>(c_.layout(), /*shared_file=*/true);
    } catch (const std::bad_alloc&) {  // no file in memory to be had: the prefix is copied
      return nullptr;
    }
    s->c_.copy_prefix(c_, n);
    s->tokens_ = n;
    c_.share_prefix(s->c_, n, /*rest=*/false);  // this cache too reads the stored pages now
    return s;
  }
  bool share_prefix(const SeqCache& stored, int n) override {
    const auto* o = dynamic_cast<const DenseSeq*>(&stored);
    if (!o) return false;
    tokens_ = n;
    c_.share_prefix(o->c_, n);
    return true;
  }
  bool copies() const override { return true; }
  uint64_t bytes() const override { return c_.bytes(); }
  uint64_t resident_bytes() const override { return c_.resident_bytes(); }
  // f16 keys and values as a key cache's statistics (the f32 cache has none).
  kv::KeyCacheStats key_stats() const override {
    kv::KeyCacheStats st;
    if constexpr (std::is_same_v<E, float>) return st;
    const kv::DenseLayout& lay = c_.layout();
    st.type = kv::KeyType::F16;
    st.value_type = kv::ValueType::F16;
    st.tokens = tokens_;
    st.head_dim = hd_;
    const uint64_t row = uint64_t(hd_) * sizeof(E);
    for (int l = 0; l < int(lay.ring.size()); ++l) {
      if (!lay.held(l)) continue;
      const int ring = lay.ring[size_t(l)];  // a ring holds at most its positions
      st.streams += lay.n_kv_heads;
      st.held.codes += uint64_t(ring > 0 ? std::min<int64_t>(st.tokens, ring) : st.tokens) *
                       uint64_t(lay.n_kv_heads) * row;
    }
    st.allocated.codes = c_.bytes() / 2;
    st.value_bytes = c_.bytes() / 2;
    return st;
  }
  kv::DenseCache* dense() override {
    if constexpr (std::is_same_v<E, float>) return &c_;
    return nullptr;
  }

 private:
  int hd_;
  kv::DenseCacheOf<E> c_;
  std::atomic<int> tokens_{0};  // positions appended (the highest + 1)
};

// The dense cache of layout `lay` (f32 or f16 as it says).
std::unique_ptr<SeqCache> make_dense(kv::DenseLayout lay) {
  if (lay.elem_bytes == 2) return std::make_unique<DenseSeq<uint16_t>>(std::move(lay));
  return std::make_unique<DenseSeq<float>>(std::move(lay));
}

class LatentSeq final : public SeqCache {
 public:
  LatentSeq(const Weights& w, int ctx) : hd_(w.cfg.head_dim), c_(make(w, ctx)) {}

  void append(int, int, int, const float*, const float*, int, int64_t, const float*, int64_t,
              int) override {
    LR_ASSERT(false);  // the legacy plan appends latents (Op::LatentAppend)
  }
  void attend(int /*l*/, int h, int from, int p, const float* q, int g, int chunk, int chunks,
              float scale, float* m, float* sum, float* acc) const override {
    LR_ASSERT(from == 0);  // latent_kv refuses what a windowed model has (q/k norms)
    const Span r = part_of(p + 1, chunk, chunks);
    attend_partial(q, g, hd_, c_.keys() + h * hd_, c_.values() + h * hd_, c_.kv_dim(), r.begin,
                   r.end, scale, m, sum, acc);
  }
  uint64_t bytes() const override { return c_.bytes(); }
  kv::LatentCache* latent() override { return &c_; }

 private:
  static kv::LatentCache make(const Weights& w, int ctx) {
    std::vector<int64_t> rk, rv;
    for (const Layer& L : w.layers) {
      rk.push_back(L.k.rank());
      rv.push_back(L.v.rank());
    }
    return kv::LatentCache(ctx, w.cfg.kv_dim(), rk, rv);
  }
  int hd_;
  kv::LatentCache c_;
};

// Folds the partial (m2, l2, acc2) of g heads into (m, l, acc).
void combine(int g, int d, float* m, float* l, float* acc, const float* m2, const float* l2,
             const float* acc2) {
  for (int h = 0; h < g; ++h) {
    if (!(l2[h] > 0)) continue;
    const float mx = l[h] > 0 ? std::max(m[h], m2[h]) : m2[h];
    const float a = l[h] > 0 ? std::exp(m[h] - mx) : 0.f, b = std::exp(m2[h] - mx);
    for (int i = 0; i < d; ++i) acc[h * d + i] = acc[h * d + i] * a + acc2[h * d + i] * b;
    l[h] = l[h] * a + l2[h] * b;
    m[h] = mx;
  }
}

// The stored calibration of stream (l, h) cut to cfg's rank and schedule.
std::shared_ptr<const kv::SvdqBasis> calibrated_basis(const Weights& w, int l, int h,
                                                      const kv::SvdqConfig& cfg) {
  const Weights::KeyCalibration& cal = w.key_calibration;
  if (cal.empty())
    fail(
        "--svdq-basis calibrated: the model has no calibrated key basis (run lowrank "
        "calibrate-kv on it)");
  const bool q = cfg.metric == kv::Metric::Query;
  if (q && cal.q_vectors.empty())
    fail(
        "--svdq-metric query --svdq-basis calibrated: the model's key calibration has no "
        "query-aware fit (rerun lowrank calibrate-kv)");
  const size_t d = size_t(w.cfg.head_dim), i = size_t(l) * size_t(w.cfg.n_kv_heads) + size_t(h);
  auto slice = [&](const std::vector<float>& v, size_t n) {
    return std::vector<float>(v.begin() + ptrdiff_t(i * n), v.begin() + ptrdiff_t((i + 1) * n));
  };
  kv::KeyEigen e;
  e.d = int(d);
  e.n_keys = cal.n_keys;
  e.mean = slice(cal.mean, d);
  e.vectors = slice(q ? cal.q_vectors : cal.vectors, d * d);
  if (q) e.proj = slice(cal.q_proj, d * d);
  const std::vector<float> sigma = slice(q ? cal.q_sigma : cal.sigma, d);
  e.sigma.assign(sigma.begin(), sigma.end());
  return std::make_shared<const kv::SvdqBasis>(kv::make_basis(e, cfg));
}

// Typed keys and values (kv/stream_cache.h). A session's prompt is staged: its
// own keys exact, the history from the stored form. A batch slot keeps the
// rows each append encodes, so a row of a prompt chunk reads the cache as a
// decode step at its position would (KeyStream::view_at).
class StreamSeq final : public SeqCache {
 public:
  // held: the layers it holds (empty: all).
  StreamSeq(const Weights& w, const BackendOptions& opt, bool batched,
            const std::vector<uint8_t>& held = {})
      : hd_(w.cfg.head_dim), batched_(batched), c_(make(w, opt, held)) {}

  void begin_call(int pos, int n) override { c_.begin_call(pos, n); }
  void end_call(ThreadPool& pool) override { c_.end_call(pool); }
  bool appends_tokens() const override { return false; }

  void append(int l, int h, int pos, const float* k, const float* v, int n, int64_t stride,
              const float* q, int64_t q_stride, int g) override {
    kv::KeyStream& ks = c_.stream(l, h);
    if (ks.wants_queries()) {  // the group's query rows of every token, [n * g, head_dim]
      thread_local std::vector<float> rows;
      rows.resize(size_t(n) * size_t(g) * size_t(hd_));
      for (int t = 0; t < n; ++t)
        std::copy_n(q + t * q_stride, g * hd_, &rows[size_t(t) * size_t(g * hd_)]);
      ks.add_queries(rows.data(), int64_t(n) * g, hd_, pos, g);
    }
    c_.append(l, h, pos, k, v, n, stride, batched_);
  }

  void attend(int l, int h, int from, int p, const float* q, int g, int chunk, int chunks,
              float scale, float* m, float* sum, float* acc) const override {
    LR_ASSERT(from == 0);     // windowed layers are held by WindowedSeq's rings
    const int64_t n = p + 1;  // positions the query sees
    const kv::KeyStream& ks = c_.stream(l, h);
    if (!c_.staging()) {  // parts of whole blocks of the stored form
      const Span r = split(n, chunk, chunks, ks.block_tokens());
      return attend_keys_partial(ks.view_at(p), c_.values(l, h), q, g, r.begin, r.end, scale, m,
                                 sum, acc);
    }
    // A staged prompt's row, as attend_rows computes it, all in the first
    // part (a prompt's rows are not split).
    if (chunk > 0)
      return attend_partial(q, g, hd_, static_cast<const float*>(nullptr), nullptr, hd_, 0, 0,
                            scale, m, sum, acc);
    attend_rows(l, h, p, 1, q, 0, g, scale, {m, sum, acc, g, int64_t(g) * hd_});
  }

  // A staged prompt's rows: the call's own positions exact, in tiles, then
  // the history from the stored form. A batch slot's rows (not staged) read
  // the stored rows as decode steps at their positions would. Either way the
  // blocks every row sees are read once for a tile of rows
  // (backend/cpu/kernels/key_kernels.h attend_keys_rows; latent types in a
  // batch row by row, at their views).
  void attend_rows(int l, int h, int p0, int n, const float* q, int64_t q_stride, int g,
                   float scale, const RowPartials& out) const override {
    LR_ASSERT(out.acc_stride == out.stride * hd_);
    const kv::KeyStream& ks = c_.stream(l, h);
    if (!c_.staging()) {
      if (ks.latent()) return SeqCache::attend_rows(l, h, p0, n, q, q_stride, g, scale, out);
      return attend_keys_rows(ks, c_.values(l, h), q, q_stride, n, g, p0 + 1, true, scale, out.m,
                              out.sum, out.acc, out.stride);
    }
    const int hist = c_.stage_begin();
    attend_causal(q, q_stride, n, p0 + 1 - hist, g, hd_, c_.staged_key(l, h), c_.staged_value(l, h),
                  hd_, scale, out.m, out.sum, out.acc, out.stride);
    if (hist == 0) return;
    thread_local std::vector<float> m2, l2, acc2;  // the history's partials, row after row
    m2.resize(size_t(n) * size_t(g));
    l2.resize(m2.size());
    acc2.resize(m2.size() * size_t(hd_));
    attend_keys_rows(ks, c_.values(l, h), q, q_stride, n, g, hist, false, scale, m2.data(),
                     l2.data(), acc2.data(), g);
    for (int t = 0; t < n; ++t)
      combine(g, hd_, out.m + t * out.stride, out.sum + t * out.stride,
              out.acc + t * out.acc_stride, &m2[size_t(t) * size_t(g)], &l2[size_t(t) * size_t(g)],
              &acc2[size_t(t) * size_t(g) * size_t(hd_)]);
  }

  void truncate(int n) override { c_.truncate(n); }
  void release() override { c_.release(); }
  void end_step() override { c_.drop_flushed(); }
  uint64_t bytes() const override { return c_.bytes(); }
  uint64_t resident_bytes() const override { return c_.resident_bytes(); }
  kv::KeyCacheStats key_stats() const override { return c_.stats(); }

 private:
  static kv::StreamCache make(const Weights& w, const BackendOptions& opt,
                              const std::vector<uint8_t>& held) {
    const Config& c = w.cfg;
    opt.keys.validate(c.head_dim);
    std::vector<std::shared_ptr<const kv::SvdqBasis>> bases;
    if (opt.keys.type == kv::KeyType::Svdq && opt.keys.svdq.basis == kv::BasisSource::Calibrated)
      for (int l = 0; l < c.n_layers; ++l)
        for (int h = 0; h < c.n_kv_heads && (held.empty() || held[size_t(l)]); ++h)
          bases.push_back(calibrated_basis(w, l, h, opt.keys.svdq));
    return kv::StreamCache(opt.keys, c.n_layers, c.n_kv_heads, c.head_dim, opt.ctx,
                           scalar::rope_inv_freq(c, 0, opt.ctx), bases, held);
  }
  int hd_;
  bool batched_;
  kv::StreamCache c_;
};

// A model with sliding-window layers under a typed cache: the windowed
// layers keep dense rings (a window of positions: fewer bytes than the typed
// whole context; f16 unless a type is f32), the full layers the typed keys
// and values.
class WindowedSeq final : public SeqCache {
 public:
  WindowedSeq(const Weights& w, const BackendOptions& opt, bool batched, int rows)
      : windowed_(w.cfg.swa_layers),
        rings_(make_dense(
            kv::DenseLayout::of(w.cfg, opt.ctx, rows, true, opt.keys.ring_elem_bytes()))),
        keys_(w, opt, batched, full_layers(w.cfg)) {}

  void begin_call(int pos, int n) override { keys_.begin_call(pos, n); }
  void end_call(ThreadPool& pool) override { keys_.end_call(pool); }
  bool appends_tokens() const override { return false; }
  void append(int l, int h, int pos, const float* k, const float* v, int n, int64_t stride,
              const float* q, int64_t q_stride, int g) override {
    of(l).append(l, h, pos, k, v, n, stride, q, q_stride, g);
  }
  void attend(int l, int h, int from, int p, const float* q, int g, int chunk, int chunks,
              float scale, float* m, float* sum, float* acc) const override {
    of(l).attend(l, h, from, p, q, g, chunk, chunks, scale, m, sum, acc);
  }
  void truncate(int n) override {
    rings_->truncate(n);
    keys_.truncate(n);
  }
  void release() override {
    rings_->release();
    keys_.release();
  }
  int rewindable(int n_past, int n) const override { return rings_->rewindable(n_past, n); }
  void end_step() override { keys_.end_step(); }
  uint64_t bytes() const override { return rings_->bytes() + keys_.bytes(); }
  uint64_t resident_bytes() const override {
    return rings_->resident_bytes() + keys_.resident_bytes();
  }
  kv::KeyCacheStats key_stats() const override { return keys_.key_stats(); }

 private:
  static std::vector<uint8_t> full_layers(const Config& c) {
    std::vector<uint8_t> held(size_t(c.n_layers));
    for (int l = 0; l < c.n_layers; ++l) held[size_t(l)] = !c.windowed(l);
    return held;
  }
  SeqCache& of(int l) { return windowed_[size_t(l)] ? *rings_ : static_cast<SeqCache&>(keys_); }
  const SeqCache& of(int l) const {
    return windowed_[size_t(l)] ? *rings_ : static_cast<const SeqCache&>(keys_);
  }
  std::vector<uint8_t> windowed_;  // [n_layers]
  std::unique_ptr<SeqCache> rings_;
  StreamSeq keys_;
};

}  // namespace

std::unique_ptr<SeqCache> make_seq_cache(const Weights& w, const BackendOptions& opt, KvMode kv,
                                         bool batched, int rows) {
  if (opt.keys.half() && kv != KvMode::Legacy)  // f16 rows, every layer (windowed ones in rings)
    return make_dense(kv::DenseLayout::of(w.cfg, opt.ctx, rows, false, 2));
  const bool compressed = !opt.keys.dense();
  int windowed = 0;
  for (int l = 0; l < w.cfg.n_layers; ++l) windowed += w.cfg.windowed(l) ? 1 : 0;
  if (compressed && windowed == 0) return std::make_unique<StreamSeq>(w, opt, batched);
  if (compressed && windowed < w.cfg.n_layers)
    return std::make_unique<WindowedSeq>(w, opt, batched, rows);
  // (every layer windowed: the rings are the whole cache, f16 unless a type is f32)
  if (kv == KvMode::Legacy) return std::make_unique<LatentSeq>(w, opt.ctx);
  return make_dense(kv::DenseLayout::of(w.cfg, opt.ctx, rows, false, opt.keys.ring_elem_bytes()));
}

}  // namespace lr::cpu
