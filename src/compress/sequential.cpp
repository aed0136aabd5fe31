#include "compress/sequential.h"

#include <algorithm>

#include "backend/cpu/cpu.h"
#include "core/error.h"
#include "linalg/blas.h"

namespace lr::compress {

namespace {

constexpr Site kSites[] = {Site::AttnIn, Site::AttnOut, Site::MlpIn, Site::MlpMid};

int64_t site_width(const Config& c, Site s) {
  return s == Site::AttnOut ? c.q_dim() : s == Site::MlpMid ? c.ffn_dim : c.dim;
}

// Layer l of `w` as a model of one layer (the matrices shared, not copied).
// unpack: the compressed model's packed inputs belong to its dense source.
std::shared_ptr<Weights> one_layer(const Weights& w, int l, bool unpack) {
  auto s = std::make_shared<Weights>();
  s->cfg = w.cfg;
  s->cfg.n_layers = 1;
  s->wtype = w.wtype;
  s->as_stored = w.as_stored;
  s->tok_embd = w.tok_embd;
  s->out_norm = w.out_norm;
  s->output = w.output;
  s->layers = {w.layers[size_t(l)]};
  if (unpack) s->layers[0].qkv_in = s->layers[0].gate_up_in = Matrix();
  return s;
}

}  // namespace

// The dense stream's run keeps every site's rows (store); the compressed
// stream's run adds its Grams and its cross-Grams with those rows (accumulate).
class SequentialCalibration::Capture final : public ActivationObserver {
 public:
  Capture(SequentialCalibration& owner, const Capture* dense) : owner_(owner), dense_(dense) {}

  void begin_window() {
    for (size_t i = 0; i < 4; ++i) {
      if (!dense_) rows_[i].clear();
      cursor_[i] = 0;
    }
  }

  void observe(int, Site site, const float* X, int n, int dim) override {
    if (site == Site::Keys || site == Site::Queries) return;
    const size_t i = size_t(site);
    if (!dense_) {
      rows_[i].insert(rows_[i].end(), X, X + int64_t(n) * dim);
      return;
    }
    owner_.gram_[i]->add(X, n);
    // cross += D^T X' over the same tokens, in chunks converted to double.
    const std::vector<float>& d = dense_->rows_[i];
    LR_ASSERT(int64_t(d.size()) >= (cursor_[i] + n) * dim);
    MatD& c = owner_.cross_[i];
    for (int t0 = 0; t0 < n; t0 += kChunk) {
      const int nt = std::min(kChunk, n - t0);
      a_.assign(d.begin() + (cursor_[i] + t0) * dim, d.begin() + (cursor_[i] + t0 + nt) * dim);
      b_.assign(X + int64_t(t0) * dim, X + int64_t(t0 + nt) * dim);
      cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, dim, dim, nt, 1.0, a_.data(), dim,
                  b_.data(), dim, 1.0, c.data(), dim);
    }
    cursor_[i] += n;
  }

 private:
  static constexpr int kChunk = 256;
  SequentialCalibration& owner_;
  const Capture* dense_;                    // null: this is the dense stream's capture
  std::array<std::vector<float>, 4> rows_;  // per site [tokens, width] (dense stream)
  std::array<int64_t, 4> cursor_{};         // tokens consumed per site (compressed stream)
  std::vector<double> a_, b_;
};

SequentialCalibration::SequentialCalibration(const Model& dense, const CalibrationText& text)
    : dense_(dense), text_(text), len_(text.len) {
  const std::vector<int32_t> toks = calibration_tokens(dense, text);
  const Weights& w = *dense.weights;
  const int64_t dim = w.cfg.dim;
  for (int s = 0; s < text.samples; ++s) {
    std::vector<float> x(size_t(len_) * size_t(dim));
    for (int t = 0; t < len_; ++t)
      w.tok_embd.row_to_f32(toks[size_t(s) * size_t(len_) + size_t(t)],
                            &x[size_t(t) * size_t(dim)]);
    windows_.push_back(x);
    comp_.push_back(std::move(x));
  }
}

SequentialCalibration::~SequentialCalibration() = default;

void SequentialCalibration::observe(int l, const CalibrationProgress& progress) {
  const Config& c = dense_.weights->cfg;
  gram_.clear();
  cross_.clear();
  for (Site s : kSites) {
    gram_.push_back(std::make_unique<GramAccumulator>(site_width(c, s)));
    cross_.emplace_back(site_width(c, s), site_width(c, s));
  }
  Capture store(*this, nullptr), acc(*this, &store);
  BackendOptions bo;
  bo.ctx = len_;
  bo.cpu.n_threads = text_.n_threads;
  auto layer = one_layer(*dense_.weights, l, false);
  bo.cpu.observer = &store;
  auto on_dense = make_cpu_layer_runner(layer, bo);
  bo.cpu.observer = &acc;
  auto on_comp = make_cpu_layer_runner(layer, bo);
  std::vector<float> x;
  const std::string phase =
      fmt::format("calibrating layer {} on the compressed layers before it", l);
  for (size_t s = 0; s < windows_.size(); ++s) {
    store.begin_window();
    acc.begin_window();
    on_dense->run(windows_[s].data(), len_);  // the dense stream moves on
    x = comp_[s];
    on_comp->run(x.data(), len_);  // observed only: the compressed stream moves in advance()
    if (progress) progress(int(s) + 1, int(windows_.size()), phase.c_str());
  }
}

void SequentialCalibration::advance(const Weights& compressed, int l) {
  BackendOptions bo;
  bo.ctx = len_;
  bo.cpu.n_threads = text_.n_threads;
  auto run = make_cpu_layer_runner(one_layer(compressed, l, true), bo);
  for (std::vector<float>& x : comp_) run->run(x.data(), len_);
}

const MatD& SequentialCalibration::gram(Site s) const {
  LR_ASSERT(size_t(s) < gram_.size());
  return gram_[size_t(s)]->gram();
}

const MatD& SequentialCalibration::cross(Site s) const {
  LR_ASSERT(size_t(s) < cross_.size());
  return cross_[size_t(s)];
}

MatF refit_out(const float* W, const float* Q, int64_t m, int64_t n, const MatF& V, int64_t r,
               const MatD& gram, const MatD& cross) {
  LR_ASSERT(r >= 1 && r <= V.rows && V.cols == n && gram.rows == n && cross.rows == n);
  MatD v(r, n), w(m, n);
  for (int64_t k = 0; k < r; ++k)
    for (int64_t j = 0; j < n; ++j) v(k, j) = V(k, j);
  for (int64_t i = 0; i < m * n; ++i) w.a[size_t(i)] = W[i];
  MatD t = matmul(w, cross);  // W C [m, n]
  if (Q) {
    for (int64_t i = 0; i < m * n; ++i) w.a[size_t(i)] = Q[i];
    const MatD qg = matmul(w, gram);
    for (size_t i = 0; i < t.a.size(); ++i) t.a[i] -= qg.a[i];
  }
  MatD b = matmul(t, v, false, true);                // (W C - Q G') V^T [m, r]
  MatD a = matmul(v, matmul(gram, v, false, true));  // V G' V^T [r, r]
  double mean = 0;
  for (int64_t k = 0; k < r; ++k) mean += a(k, k) / double(r);
  MatD l;
  for (double ridge : {0.0, 1e-8, 1e-6, 1e-4}) {
    MatD ar = a;
    for (int64_t k = 0; k < r; ++k) ar(k, k) += ridge * mean;
    if (try_cholesky(ar, l) == 0) break;
    l = MatD();
  }
  if (l.empty())
    fail("refitting an output factor: V G' V^T of rank {} is not positive definite", r);
  trsm(linalg::Side::Right, linalg::Uplo::Lower, true, l, b);   // B L^-T
  trsm(linalg::Side::Right, linalg::Uplo::Lower, false, l, b);  // B L^-T L^-1 = B A^-1
  MatF u(m, r);
  for (size_t i = 0; i < b.a.size(); ++i) u.a[i] = float(b.a[i]);
  return u;
}

}  // namespace lr::compress
